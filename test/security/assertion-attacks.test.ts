/**
 * Attacks on the jwt-bearer grant (SPEC §4.11), performed over HTTP as an attacker would.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { SignJWT } from 'jose';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { startServer, type TestServer } from '../support/server.ts';

const JWT_BEARER = 'urn:ietf:params:oauth:grant-type:jwt-bearer';
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
