/**
 * Attacks on the jwt-bearer grant (SPEC §4.11), performed over HTTP as an attacker would.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { SignJWT } from 'jose';
import * as oauth from 'oauth4webapi';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { jwksOf, signingKey } from '../support/jwks-server.ts';
import { discover, obtainTokens, refresh, refreshRequest, tokenResult, type App } from '../support/oauth-client.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { serverCertificate } from '../support/tls.ts';
import { UserAgent } from '../support/user-agent.ts';
import { JWT_BEARER_GRANT_TYPE as JWT_BEARER } from '../../src/oauth/grants/types.ts';

const BASE64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

/**
 * The same JWS with the signature's last character changed in its unused low bits: a 32-byte
 * HS256 signature is 43 base64url characters, whose last holds 2 bits no decoder reads.
 */
function respelled(jws: string): string[] {
  const index = BASE64URL.indexOf(jws.at(-1)!);
  return [1, 2, 3].map((d) => jws.slice(0, -1) + BASE64URL[(index & ~3) | ((index + d) & 3)]);
}

for (const backend of BACKENDS) {
  describe(`jwt-bearer attacks (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;

    before(async () => {
      server = await startServer(backend, { KEYS_SECRET: 'k'.repeat(40), LOG_LEVEL: 'warn' });
    });
    after(() => server?.close());

    const exchange = (assertion: string) =>
      fetch(`${server.url}/api/token`, { method: 'POST', body: new URLSearchParams({ grant_type: JWT_BEARER, assertion }) });

    test('a grant token without jti, replayed with its signature spelled another way, is still a replay', async () => {
      await server.createUser('sam');
      const publisher = await server.createClient({ name: 'Publisher', grantType: JWT_BEARER, redirectUris: [], confidential: true });
      const host = new URL(server.url).hostname;
      const now = Math.floor(Date.now() / 1000);
      // As h's publishers sign them: no jti.
      const token = await new SignJWT({ iss: publisher.client.id, aud: host, sub: `acct:sam@${host}`, nbf: now, exp: now + 300 })
        .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
        .sign(new TextEncoder().encode(publisher.secret!));
      const first = await exchange(token);
      assert.equal(first.status, 200, await first.text());
      for (const variant of respelled(token)) {
        assert.notEqual(variant, token);
        const again = await exchange(variant);
        const body = (await again.json()) as { error?: string };
        assert.equal(again.status, 400, `a respelled signature was accepted again: ${JSON.stringify(body)}`);
        assert.equal(body.error, 'invalid_grant');
      }
    });

    test('a grant token whose exp has a fraction of a second (a NumericDate may) is a token, not a 500', async () => {
      await server.createUser('tess');
      const publisher = await server.createClient({ name: 'Fractions', grantType: JWT_BEARER, redirectUris: [], confidential: true });
      const host = new URL(server.url).hostname;
      const now = Math.floor(Date.now() / 1000);
      const token = await new SignJWT({ iss: publisher.client.id, aud: host, sub: `acct:tess@${host}`, nbf: now, exp: now + 300.0001, jti: 'fraction' })
        .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
        .sign(new TextEncoder().encode(publisher.secret!));
      const first = await exchange(token);
      assert.equal(first.status, 200, await first.text());
      const again = await exchange(token);
      assert.equal(again.status, 400, 'and it is still single use');
      await again.arrayBuffer();
    });
  });
}

for (const backend of BACKENDS) {
  describe(`a metadata-document client switching to private_key_jwt (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    /** The document's fields beyond the usual ones: what its owner says now. */
    let extra: Record<string, unknown> = {};
    let url = '';
    const host = createServer(serverCertificate(['127.0.0.1']), (_request, response) => {
      const document = {
        client_id: url,
        client_name: 'Switching app',
        redirect_uris: ['http://127.0.0.1/callback'],
        token_endpoint_auth_method: 'none',
        ...extra,
      };
      response.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'max-age=0' }).end(JSON.stringify(document));
    });

    before(async () => {
      await new Promise<void>((resolve) => host.listen(0, '127.0.0.1', resolve));
      url = `https://127.0.0.1:${(host.address() as AddressInfo).port}/apps/switching.json`;
      server = await startServer(backend, { CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES: 'true', LOG_LEVEL: 'warn' });
      await server.createUser('alice');
    });
    after(async () => {
      await server?.close();
      host.close();
    });

    test("once its document asks for private_key_jwt, a refresh token it got as a public client needs the client's key", async () => {
      const app: App = await discover(server, url, { redirectUri: 'http://127.0.0.1:9/callback' });
      const tokens = await obtainTokens(app, new UserAgent(server.url));
      // The owner moves the client to private_key_jwt (say, because its refresh tokens leaked).
      const key = await signingKey('RS256', 'switch-1');
      extra = { token_endpoint_auth_method: 'private_key_jwt', jwks: jwksOf(key) };
      server.advance(600);
      // Whoever holds a refresh token but not the key: refused, as the document says now.
      const stolen = await tokenResult(await refreshRequest({ ...app, auth: oauth.None() }, tokens.refresh_token!));
      assert.deepEqual([stolen.status, stolen.body.error], [401, 'invalid_client'], 'a refresh without the key was accepted');
      // The client itself, with its key: refreshed.
      const refreshed = await refresh(
        {
          ...app,
          auth: oauth.PrivateKeyJwt(
            { key: key.privateKey, kid: key.kid },
            {
              // On the server's clock, moved on above.
              [oauth.modifyAssertion]: (_header, payload) => {
                payload.iat = (payload.iat as number) + 600;
                payload.exp = (payload.exp as number) + 600;
              },
            },
          ),
        },
        tokens.refresh_token!,
      );
      assert.ok(refreshed.access_token);
    });
  });
}
