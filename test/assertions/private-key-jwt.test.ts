/**
 * `private_key_jwt` client authentication (SPEC §4.2, §4.11) end to end, on both backends:
 * oauth4webapi's `PrivateKeyJwt` driving the real server at every endpoint where clients
 * authenticate (code exchange, refresh, revocation, introspection, device authorization,
 * client_credentials), keys minted with jose, a client's key set served over https by this
 * test (test CA) — and the attacks: hostile key set URLs (slow, huge, redirecting, on a
 * private address), `alg: none`, HS256, key confusion, wrong claims, replays (20 at once),
 * a flood of unknown kids, and the method rules (one method per request, exactly the
 * registered one). Metadata-document clients with private_key_jwt (inline jwks and jwks_uri).
 */
import assert from 'node:assert/strict';
import { createPublicKey, randomUUID, type JsonWebKey } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { SignJWT, UnsecuredJWT, type JWTPayload } from 'jose';
import * as oauth from 'oauth4webapi';
import { DEVICE_CODE_GRANT_TYPE } from '../../src/oauth/grants/types.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { jwksOf, signingKey, startJwksServer, type JwksServer, type SigningKey } from '../support/jwks-server.ts';
import { serveMetadataDocument, type MetadataDocument } from '../support/metadata-document.ts';
import { discover, insecure, obtainTokens, postForm, refresh, refreshRequest, revokeToken, tokenResult, type App } from '../support/oauth-client.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';

const ASSERTION_TYPE = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer';

/** oauth4webapi's private_key_jwt with `key`. */
const pkjwt = (key: SigningKey, modify?: (header: Record<string, unknown>, payload: Record<string, unknown>) => void) =>
  oauth.PrivateKeyJwt({ key: key.privateKey, kid: key.kid }, modify ? { [oauth.modifyAssertion]: modify } : undefined);

/** A client assertion signed by `key` for `clientId`, the claims overridden by `claims` (undefined removes one). */
async function assertion(server: TestServer, key: SigningKey, clientId: string, claims: Record<string, unknown> = {}): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  const payload: Record<string, unknown> = { iss: clientId, sub: clientId, aud: server.url, jti: randomUUID(), iat: now, exp: now + 60, ...claims };
  for (const [name, value] of Object.entries(payload)) if (value === undefined) delete payload[name];
  return new SignJWT(payload as JWTPayload).setProtectedHeader({ alg: key.alg, kid: key.kid }).sign(key.privateKey);
}

/** A client_credentials request authenticated by `clientAssertion` (plus `extra` form fields or headers). */
function clientCredentials(server: TestServer, clientAssertion: string, extra: Record<string, string> = {}, headers: Record<string, string> = {}) {
  return postForm(
    server,
    '/api/token',
    { grant_type: 'client_credentials', client_assertion_type: ASSERTION_TYPE, client_assertion: clientAssertion, ...extra },
    headers,
  );
}

async function assertRefused(response: Response, status = 401, error = 'invalid_client'): Promise<void> {
  const result = await tokenResult(response);
  assert.deepEqual([result.status, result.body.error], [status, error], result.body.error_description);
}

async function consumedCount(server: TestServer): Promise<number> {
  const row = await server.store.db
    .selectFrom('consumed_assertions')
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

for (const backend of BACKENDS) {
  describe(`private_key_jwt (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let jwks: JwksServer;
    let rsa: SigningKey, ec: SigningKey, ed: SigningKey, ps: SigningKey;
    /** A client_credentials client with its keys at a jwks_uri (RS256), and one with an inline JWKS (ES256). */
    let remoteClient: string, inlineClient: string;

    before(async () => {
      [rsa, ec, ed, ps] = await Promise.all([
        signingKey('RS256', 'rsa-1'),
        signingKey('ES256', 'ec-1'),
        signingKey('EdDSA', 'ed-1'),
        signingKey('PS256', 'ps-1'),
      ]);
      jwks = await startJwksServer();
      jwks.publish('main', [rsa]);
      server = await startServer(backend, { CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES: 'true' });
      await server.createUser('alice');
      const job = { name: 'Batch job', grantType: 'client_credentials', redirectUris: [], confidential: true } as const;
      remoteClient = (await server.createClient({ ...job, jwksUri: jwks.url('main') })).client.id;
      inlineClient = (await server.createClient({ ...job, name: 'Inline job', jwks: JSON.stringify(jwksOf(ec, ed, ps)) })).client.id;
    });
    after(async () => {
      await server?.close();
      jwks?.close();
    });

    test('registration: keys make a confidential client with no secret, listed as private_key_jwt', async () => {
      const registered = await server.createClient({ name: 'Keyed app', confidential: true, jwksUri: jwks.url('main') });
      assert.equal(registered.secret, null);
      const metadata = (await (await fetch(new URL('/.well-known/oauth-authorization-server', server.url))).json()) as Record<string, string[]>;
      assert.ok(metadata.token_endpoint_auth_methods_supported!.includes('private_key_jwt'));
      assert.deepEqual(metadata.token_endpoint_auth_signing_alg_values_supported, ['RS256', 'PS256', 'ES256', 'EdDSA']);
      for (const [jwksText, problem] of [
        [JSON.stringify({ keys: [{ ...rsa.publicJwk, d: 'AQAB' }] }), /private member "d"/],
        [JSON.stringify({ keys: [{ kty: 'oct', k: 'c2VjcmV0' }] }), /private member "k"/],
        [JSON.stringify({ keys: [{ ...rsa.publicJwk, alg: 'HS256' }] }), /alg other than/],
        ['not json', /not JSON/],
      ] as const) {
        await assert.rejects(server.createClient({ name: 'Bad keys', confidential: true, jwks: jwksText }), { message: problem });
      }
      await assert.rejects(server.createClient({ name: 'Bad URL', confidential: true, jwksUri: 'http://keys.example/jwks' }), { message: /https/ });
      await assert.rejects(server.createClient({ name: 'Both', confidential: true, jwksUri: jwks.url('main'), jwks: JSON.stringify(jwksOf(ec)) }), {
        message: /not both/,
      });
    });

    test('every accepted algorithm authenticates: RS256 (jwks_uri), ES256, EdDSA and PS256 (inline)', async () => {
      for (const [key, clientId] of [
        [rsa, remoteClient],
        [ec, inlineClient],
        [ed, inlineClient],
        [ps, inlineClient],
      ] as const) {
        const app = await discover(server, clientId);
        // oauth4webapi names an Ed25519 signature by RFC 9864's "Ed25519"; the SPEC's accepted name is "EdDSA".
        const auth = pkjwt(key, (header) => void (header.alg === 'Ed25519' && (header.alg = 'EdDSA')));
        const response = await oauth.clientCredentialsGrantRequest(app.as, app.client, auth, new URLSearchParams(), insecure);
        const tokens = await oauth.processClientCredentialsResponse(app.as, app.client, response);
        assert.ok(tokens.access_token, `${key.alg} authenticates`);
      }
    });

    test('code exchange, refresh, introspection and revocation with oauth4webapi', async () => {
      const { client } = await server.createClient({ name: 'Keyed web app', confidential: true, jwksUri: jwks.url('main') });
      const app: App = { ...(await discover(server, client.id)), auth: pkjwt(rsa) };
      const tokens = await obtainTokens(app, new UserAgent(server.url));
      const refreshed = await refresh(app, tokens.refresh_token!);
      const introspection = await oauth.processIntrospectionResponse(
        app.as,
        app.client,
        await oauth.introspectionRequest(app.as, app.client, app.auth, refreshed.access_token, insecure),
      );
      assert.equal(introspection.active, true);
      assert.equal(introspection.client_id, client.id);
      await revokeToken(app, refreshed.refresh_token!);
      await assertRefused(await refreshRequest(app, refreshed.refresh_token!), 400, 'invalid_grant');
      // Without its assertion, the client is refused, whatever else it sends.
      await assertRefused(await refreshRequest({ ...app, auth: oauth.None() }, tokens.refresh_token!));
      await assertRefused(await refreshRequest({ ...app, auth: oauth.ClientSecretPost('a guess') }, tokens.refresh_token!));
    });

    test('device authorization with private_key_jwt', async () => {
      const { client } = await server.createClient({
        name: 'Keyed TV',
        grantType: DEVICE_CODE_GRANT_TYPE,
        redirectUris: [],
        confidential: true,
        jwks: JSON.stringify(jwksOf(ec)),
      });
      const app = await discover(server, client.id);
      const codes = await oauth.processDeviceAuthorizationResponse(
        app.as,
        app.client,
        await oauth.deviceAuthorizationRequest(app.as, app.client, pkjwt(ec), new URLSearchParams(), insecure),
      );
      assert.ok(codes.device_code);
      const refused = await oauth.deviceAuthorizationRequest(app.as, app.client, oauth.None(), new URLSearchParams(), insecure);
      assert.equal(refused.status, 401);
    });

    test('forged assertions are refused with 401 invalid_client and consume nothing', async () => {
      const before = await consumedCount(server);
      const now = Math.floor(Date.now() / 1000);
      const claims = { iss: inlineClient, sub: inlineClient, aud: server.url, jti: randomUUID(), exp: now + 60 };
      const pem = createPublicKey({ key: rsa.publicJwk as JsonWebKey, format: 'jwk' }).export({ type: 'spki', format: 'pem' }) as string;
      const rsaClaims = { ...claims, iss: remoteClient, sub: remoteClient };
      const forged = [
        // alg none
        new UnsecuredJWT(claims).encode(),
        // HS256 with any secret
        await new SignJWT(claims).setProtectedHeader({ alg: 'HS256', kid: 'ec-1' }).sign(new TextEncoder().encode('a secret the attacker chose')),
        // key confusion: the client's public key (PEM, and its JWK) as an HMAC secret
        await new SignJWT(rsaClaims).setProtectedHeader({ alg: 'HS256', kid: 'rsa-1' }).sign(new TextEncoder().encode(pem)),
        await new SignJWT(rsaClaims).setProtectedHeader({ alg: 'HS256', kid: 'rsa-1' }).sign(new TextEncoder().encode(JSON.stringify(rsa.publicJwk))),
        // signed by a key the client never registered
        await assertion(server, await signingKey('ES256', 'ec-1'), inlineClient),
        // wrong claims, signed by the right key
        await assertion(server, ec, inlineClient, { aud: 'https://elsewhere.example' }),
        await assertion(server, ec, inlineClient, { aud: [`${server.url}/oauth/authorize`] }),
        await assertion(server, ec, inlineClient, { sub: remoteClient }),
        await assertion(server, ec, inlineClient, { exp: now + 600 }),
        await assertion(server, ec, inlineClient, { exp: undefined }),
        await assertion(server, ec, inlineClient, { exp: now - 60 }),
        await assertion(server, ec, inlineClient, { jti: undefined }),
        await assertion(server, ec, inlineClient, { jti: '' }),
        await assertion(server, ec, inlineClient, { nbf: now + 120 }),
        // another client's assertion presented as this one
        await assertion(server, rsa, remoteClient, { iss: inlineClient, sub: inlineClient }),
        'not.a.jwt',
        'x'.repeat(10_000),
      ];
      for (const [index, forgery] of forged.entries()) {
        const result = await tokenResult(await clientCredentials(server, forgery));
        assert.deepEqual([result.status, result.body.error], [401, 'invalid_client'], `forgery ${index}: ${result.body.error_description}`);
        assert.equal(result.body.error_description, 'client authentication failed', 'the client is not told which check failed');
      }
      assert.equal(await consumedCount(server), before);
      // The audience may be the issuer or the endpoint's URL, alone or in an array.
      for (const aud of [server.url, `${server.url}/api/token`, [server.url], ['https://other.example', `${server.url}/api/token`]]) {
        assert.equal((await clientCredentials(server, await assertion(server, ec, inlineClient, { aud }))).status, 200, JSON.stringify(aud));
      }
      const logs = server.logs.join('');
      for (const forgery of forged.slice(0, 5)) assert.ok(!logs.includes(forgery), 'no assertion reaches the log');
    });

    test('one method per request, and exactly the registered one', async () => {
      const good = () => assertion(server, ec, inlineClient);
      await assertRefused(await clientCredentials(server, await good(), { client_secret: 'x' }), 400, 'invalid_request');
      await assertRefused(
        await clientCredentials(server, await good(), {}, { authorization: `Basic ${Buffer.from(`${inlineClient}:x`).toString('base64')}` }),
        400,
        'invalid_request',
      );
      await assertRefused(await clientCredentials(server, await good(), { client_assertion_type: 'urn:other' }), 400, 'invalid_request');
      await assertRefused(
        await postForm(server, '/api/token', { grant_type: 'client_credentials', client_assertion_type: ASSERTION_TYPE }),
        400,
        'invalid_request',
      );
      await assertRefused(await clientCredentials(server, await good(), { client_id: remoteClient }));
      // A private_key_jwt client sending a secret, or nothing.
      await assertRefused(await postForm(server, '/api/token', { grant_type: 'client_credentials', client_id: inlineClient, client_secret: 'guess' }));
      await assertRefused(await postForm(server, '/api/token', { grant_type: 'client_credentials', client_id: inlineClient }));
      // A client with a secret sending an assertion (signed by a key of its own choosing).
      const secretClient = await server.createClient({ name: 'Secret job', grantType: 'client_credentials', redirectUris: [], confidential: true });
      await assertRefused(await clientCredentials(server, await assertion(server, ec, secretClient.client.id)));
    });

    test('of 20 concurrent presentations of one assertion exactly one succeeds', async () => {
      const once = await assertion(server, ec, inlineClient);
      const results = await Promise.all(Array.from({ length: 20 }, async () => tokenResult(await clientCredentials(server, once))));
      assert.equal(results.filter((r) => r.status === 200).length, 1);
      for (const loser of results.filter((r) => r.status !== 200)) assert.deepEqual([loser.status, loser.body.error], [401, 'invalid_client']);
      await assertRefused(await clientCredentials(server, once));
    });

    test('hostile key set URLs: slow, huge, redirecting — refused, nothing consumed', async () => {
      const before = await consumedCount(server);
      for (const path of ['/slow', '/huge', '/redirect']) {
        const { client } = await server.createClient({
          name: `Job ${path}`,
          grantType: 'client_credentials',
          redirectUris: [],
          confidential: true,
          jwksUri: `${jwks.origin}${path}`,
        });
        await assertRefused(await clientCredentials(server, await assertion(server, rsa, client.id)));
        assert.equal(jwks.requests(path), 1, `${path} was fetched once`);
        // Remembered as refused for a while: a second request costs no second fetch.
        await assertRefused(await clientCredentials(server, await assertion(server, rsa, client.id)));
        assert.equal(jwks.requests(path), 1);
      }
      assert.equal(await consumedCount(server), before);
    });

    test('a key set on a private address is refused without CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES', async () => {
      const strict = await startServer(backend);
      try {
        jwks.publish('private', [rsa]);
        const { client } = await strict.createClient({
          name: 'Private job',
          grantType: 'client_credentials',
          redirectUris: [],
          confidential: true,
          jwksUri: jwks.url('private'),
        });
        await assertRefused(await clientCredentials(strict, await assertion(strict, rsa, client.id)));
        assert.equal(jwks.requests('/jwks/private'), 0, 'refused before connecting');
        assert.equal(await consumedCount(strict), 0);
      } finally {
        await strict.close();
      }
    });

    test('a key rotated in is fetched on its unknown kid, at most once a minute however many arrive', async (t) => {
      const [first, second, unknown] = await Promise.all([signingKey('ES256', 'gen-1'), signingKey('ES256', 'gen-2'), signingKey('ES256', 'gen-3')]);
      jwks.publish('rotating', [first]);
      // A server of its own: its clock is moved on.
      const server = await startServer(backend, { CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES: 'true' });
      t.after(() => server.close());
      const { client } = await server.createClient({
        name: 'Rotating job',
        grantType: 'client_credentials',
        redirectUris: [],
        confidential: true,
        jwksUri: jwks.url('rotating'),
      });
      const skew = { seconds: 0 };
      const present = (key: SigningKey) => {
        const now = Math.floor(Date.now() / 1000) + skew.seconds;
        return assertion(server, key, client.id, { iat: now, exp: now + 60 });
      };
      assert.equal((await clientCredentials(server, await present(first))).status, 200);
      assert.equal(jwks.requests('/jwks/rotating'), 1);
      jwks.publish('rotating', [second]);
      // Within the minute: the unknown kid is refused from the cached set, no refetch.
      await assertRefused(await clientCredentials(server, await present(second)));
      assert.equal(jwks.requests('/jwks/rotating'), 1);
      server.advance(61);
      skew.seconds = 61;
      // A flood of the new kid after the minute: one fetch, and every one of them accepted.
      const flood = await Promise.all(Array.from({ length: 20 }, async () => (await clientCredentials(server, await present(second))).status));
      assert.deepEqual(new Set(flood), new Set([200]));
      assert.equal(jwks.requests('/jwks/rotating'), 2);
      // A flood of a kid nobody published: no further fetch within the minute.
      const unknowns = await Promise.all(Array.from({ length: 20 }, async () => (await clientCredentials(server, await present(unknown))).status));
      assert.deepEqual(new Set(unknowns), new Set([401]));
      assert.equal(jwks.requests('/jwks/rotating'), 2);
      server.advance(61);
      skew.seconds = 122;
      await assertRefused(await clientCredentials(server, await present(unknown)));
      assert.equal(jwks.requests('/jwks/rotating'), 3, 'a minute later, one more fetch');
    });

    describe('metadata-document clients', () => {
      const documents: MetadataDocument[] = [];
      after(() => documents.forEach((document) => document.close()));

      for (const how of ['jwks', 'jwks_uri'] as const) {
        test(`with private_key_jwt and ${how}: confidential, authenticates with its key`, async () => {
          jwks.publish('document', [rsa]);
          const keys = how === 'jwks' ? { jwks: jwksOf(rsa) } : { jwks_uri: jwks.url('document') };
          const document = await serveMetadataDocument(`Keyed document app ${how}`, `/apps/keyed-${how}.json`, {
            token_endpoint_auth_method: 'private_key_jwt',
            ...keys,
          });
          documents.push(document);
          const app: App = { ...(await discover(server, document.url, { redirectUri: 'http://127.0.0.1:9/callback' })), auth: pkjwt(rsa) };
          const tokens = await obtainTokens(app, new UserAgent(server.url));
          assert.ok(tokens.access_token);
          const refreshed = await refresh(app, tokens.refresh_token!);
          // Without its assertion the client is refused: it is confidential.
          await assertRefused(await refreshRequest({ ...app, auth: oauth.None() }, refreshed.refresh_token!));
          // Another key is refused.
          await assertRefused(await refreshRequest({ ...app, auth: pkjwt(await signingKey('RS256', 'rsa-1')) }, refreshed.refresh_token!));
          await refresh(app, refreshed.refresh_token!);
        });
      }
    });
  });
}
