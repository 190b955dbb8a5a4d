/**
 * SPEC §4.11, h's publisher grant tokens: a jwt-bearer client's secret signs (HS256) a grant
 * token naming one of its users; h's embedded client exchanges it exactly as
 * hypothesis/client's `OAuthClient.exchangeGrantToken` does (src/sidebar/util/oauth-client.ts:
 * a sorted form body of `grant_type` and `assertion`, no client authentication), refreshes
 * without the secret and revokes with the token alone. Every refusal answers h's own text
 * (h/services/oauth/_jwt_grant_token.py, _jwt_grant.py, _errors.py) and consumes nothing.
 * Grant tokens are minted with jose, as a publisher's server would.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { generateKeyPair as generateDpopKeys, generateProof } from 'dpop';
import { SignJWT, UnsecuredJWT, base64url, exportSPKI, generateKeyPair } from 'jose';
import { registerClient, rotateClientSecret } from '../../src/clients/clients.ts';
import { COMMAND_LINE } from '../../src/audit.ts';
import { changeTokenSettings, findResourceNamed } from '../../src/clients/resources.ts';
import { builtinResourceUri } from '../../src/oauth/resources.ts';
import { openContext } from '../../src/open-context.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { assertNoSecretsLogged, assertNoStore, assertOAuthError } from '../support/responses.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { JWT_BEARER_GRANT_TYPE as JWT_BEARER } from '../../src/oauth/grants/types.ts';

const silent = { info() {}, warn() {}, error() {} };

/** hypothesis/client's `_formPost`: URLSearchParams, sorted, form-encoded, no credentials. */
async function hClientPost(url: string, data: Record<string, string>): Promise<Response> {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(data)) params.set(key, value);
  params.sort();
  return fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/x-www-form-urlencoded' }, body: params.toString() });
}

/** `exchangeGrantToken(token)` */
const exchangeGrantToken = (server: TestServer, token: string) => hClientPost(`${server.url}/api/token`, { grant_type: JWT_BEARER, assertion: token });
/** `refreshToken(refreshToken)` */
const refreshToken = (server: TestServer, token: string) => hClientPost(`${server.url}/api/token`, { grant_type: 'refresh_token', refresh_token: token });
/** `revokeToken(accessToken)` */
const revokeToken = (server: TestServer, token: string) => hClientPost(`${server.url}/oauth/revoke`, { token });

const nowSeconds = (server: TestServer, offset = 0) => Math.floor(Date.now() / 1000) + offset + Math.floor(serverOffset.get(server) ?? 0);
const serverOffset = new Map<TestServer, number>();

interface Claims {
  [claim: string]: unknown;
}

/** A grant token as a publisher signs it (h's functional test: iss, aud, sub, nbf, exp). */
async function grantToken(server: TestServer, clientId: string, secret: string, claims: Claims = {}, alg = 'HS256'): Promise<string> {
  const now = nowSeconds(server);
  const payload: Claims = {
    iss: clientId,
    aud: new URL(server.url).hostname,
    sub: `acct:alice@${new URL(server.url).hostname}`,
    nbf: now,
    exp: now + 300,
    ...claims,
  };
  for (const [name, value] of Object.entries(payload)) if (value === undefined) delete payload[name];
  return new SignJWT(payload as Record<string, unknown>).setProtectedHeader({ alg, typ: 'JWT' }).sign(new TextEncoder().encode(secret));
}

for (const backend of BACKENDS) {
  describe(`jwt-bearer: h's publisher grant tokens (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let clientId: string;
    let secret: string;
    let otherClient: { id: string; secret: string };

    before(async () => {
      server = await startServer(backend, { KEYS_SECRET: 'k'.repeat(40) });
      await server.createUser('alice');
      await server.createUser('bob');
      const publisher = await server.createClient({ name: 'Publisher', grantType: JWT_BEARER, redirectUris: [], confidential: true });
      clientId = publisher.client.id;
      secret = publisher.secret!;
      const other = await server.createClient({ name: 'Other', grantType: 'client_credentials', redirectUris: [], confidential: true });
      otherClient = { id: other.client.id, secret: other.secret! };
    });
    after(() => server?.close());

    test("h's client exchanges a grant token, refreshes without the secret and revokes with the token alone", async () => {
      const response = await exchangeGrantToken(server, await grantToken(server, clientId, secret));
      const body = (await response.json()) as Record<string, unknown>;
      assert.equal(response.status, 200, JSON.stringify(body));
      assertNoStore(response);
      assert.deepEqual(Object.keys(body).sort(), ['access_token', 'expires_in', 'refresh_token', 'scope', 'token_type']);
      assert.equal(body.scope, 'annotation:read annotation:write');
      const me = await fetch(`${server.url}/api/profile`, { headers: { authorization: `Bearer ${body.access_token}` } });
      assert.equal(me.status, 200);
      assert.equal(((await me.json()) as { userid: string }).userid, `acct:alice@${new URL(server.url).hostname}`);

      const refreshed = await refreshToken(server, body.refresh_token as string);
      const next = (await refreshed.json()) as Record<string, unknown>;
      assert.equal(refreshed.status, 200, JSON.stringify(next));
      assert.ok(typeof next.refresh_token === 'string' && next.refresh_token !== body.refresh_token);

      const revoked = await revokeToken(server, next.access_token as string);
      assert.equal(revoked.status, 200);
      assert.deepEqual(await revoked.json(), {});
      const after = await fetch(`${server.url}/api/profile`, { headers: { authorization: `Bearer ${next.access_token}` } });
      assert.equal(after.status, 401);
    });

    test('a grant token is accepted once: by its jti, or by its hash when it has none', async () => {
      // The second has no jti (and claims of its own, so it is not a token another test presented).
      for (const claims of [{ jti: 'grant-1' }, { iat: nowSeconds(server) - 1, note: 'no jti' }]) {
        const token = await grantToken(server, clientId, secret, claims);
        assert.equal((await exchangeGrantToken(server, token)).status, 200);
        await assertOAuthError(await exchangeGrantToken(server, token), 400, 'invalid_grant', 'Grant token has already been used.');
      }
    });

    test('of 20 concurrent presentations of one grant token exactly one gets tokens', async () => {
      const token = await grantToken(server, clientId, secret, { jti: 'raced' });
      const responses = await Promise.all(Array.from({ length: 20 }, () => exchangeGrantToken(server, token)));
      const statuses = responses.map((r) => r.status);
      assert.equal(statuses.filter((s) => s === 200).length, 1, statuses.join(' '));
      assert.equal(statuses.filter((s) => s === 400).length, 19, statuses.join(' '));
    });

    test("every refusal carries h's text, and consumes nothing", async () => {
      const host = new URL(server.url).hostname;
      const now = nowSeconds(server);
      const sign = (claims: Claims, alg?: string) => grantToken(server, clientId, secret, claims, alg);
      const { publicKey } = await generateKeyPair('RS256');
      const rsaPem = await exportSPKI(publicKey);
      const cases: Array<[string, () => Promise<string> | string, number, string, string]> = [
        ['not a JWT', () => 'not-a-jwt', 400, 'invalid_request', 'Invalid JWT grant token format.'],
        ['three parts of garbage', () => 'a.b.c', 400, 'invalid_request', 'Invalid JWT grant token format.'],
        ['no iss', () => sign({ iss: undefined }), 400, 'invalid_grant', "Missing claim 'iss' (issuer) from grant token."],
        ['iss of no client', () => sign({ iss: '00000000-0000-4000-8000-000000000000' }), 401, 'invalid_client', 'Client authentication failed.'],
        [
          'iss of a client of another grant type',
          () => sign({ iss: otherClient.id }),
          400,
          'unauthorized_client',
          'this client is not registered for the jwt-bearer grant',
        ],
        ['no exp', () => sign({ exp: undefined }), 400, 'invalid_grant', "Missing claim 'exp' (expiry) from grant token."],
        ['no nbf', () => sign({ nbf: undefined }), 400, 'invalid_grant', "Missing claim 'nbf' (start time) from grant token."],
        ['exp not a number', () => sign({ exp: 'soon' }), 400, 'invalid_grant', "Invalid claim 'exp' (expiry) in grant token."],
        ['a lifetime over ten minutes', () => sign({ nbf: now, exp: now + 601 }), 400, 'invalid_grant', 'Grant token lifetime is too long.'],
        ['signed with another secret', () => grantToken(server, clientId, 'not the secret'), 400, 'invalid_grant', 'Invalid grant token signature.'],
        [
          'signed with the secret of another client',
          () => grantToken(server, clientId, otherClient.secret),
          400,
          'invalid_grant',
          'Invalid grant token signature.',
        ],
        ['HS512', () => sign({}, 'HS512'), 400, 'invalid_grant', 'Invalid grant token signature algorithm.'],
        [
          'alg none',
          () => new UnsecuredJWT({ iss: clientId, aud: host, sub: `acct:alice@${host}`, nbf: now, exp: now + 300 }).encode(),
          400,
          'invalid_grant',
          'Invalid grant token signature algorithm.',
        ],
        ['HS256 keyed with an RSA public key', () => grantToken(server, clientId, rsaPem), 400, 'invalid_grant', 'Invalid grant token signature.'],
        ['no aud', () => sign({ aud: undefined }), 400, 'invalid_grant', "Missing claim 'aud' (audience) from grant token."],
        ['another aud', () => sign({ aud: 'hypothes.is' }), 400, 'invalid_grant', "Invalid claim 'aud' (audience) in grant token."],
        ['nbf in the future', () => sign({ nbf: now + 60, exp: now + 300 }), 400, 'invalid_grant', 'Grant token is not yet valid.'],
        ['expired', () => sign({ nbf: now - 400, exp: now - 60 }), 400, 'invalid_grant', 'Grant token is expired.'],
        ['iat in the future', () => sign({ iat: now + 60 }), 400, 'invalid_grant', 'Grant token issue time (iat) is in the future.'],
        ['no sub', () => sign({ sub: undefined }), 400, 'invalid_grant', "Missing claim 'sub' (subject) from grant token."],
        ['an unknown user', () => sign({ sub: `acct:nobody@${host}` }), 400, 'invalid_grant', 'Grant token subject (sub) could not be found.'],
        ['a user of another authority', () => sign({ sub: 'acct:alice@hypothes.is' }), 400, 'invalid_grant', 'Grant token subject (sub) could not be found.'],
        ['a malformed sub', () => sign({ sub: 'alice' }), 400, 'invalid_grant', 'Grant token subject (sub) could not be found.'],
        ['a sub with a NUL', () => sign({ sub: `acct:al\u0000ice@${host}` }), 400, 'invalid_grant', 'Grant token subject (sub) could not be found.'],
        ['a sub that is a number', () => sign({ sub: 42 }), 400, 'invalid_grant', 'Grant token subject (sub) could not be found.'],
        ['a huge sub', () => sign({ sub: `acct:${'a'.repeat(5000)}@${host}` }), 400, 'invalid_grant', 'Grant token subject (sub) could not be found.'],
        [
          'for another resource',
          () => sign({ jti: 'for-a-resource' }),
          400,
          'invalid_target',
          'the requested resource is unknown to this authorization server',
        ],
      ];
      for (const [name, make, status, error, description] of cases) {
        const token = await make();
        const response =
          name === 'for another resource'
            ? await hClientPost(`${server.url}/api/token`, { grant_type: JWT_BEARER, assertion: token, resource: 'https://unknown.example/api' })
            : await exchangeGrantToken(server, token);
        await assertOAuthError(response, status, error, description).catch((e: Error) => {
          throw new Error(`${name}: ${e.message}`);
        });
      }
      // Nothing was consumed: the token refused for its resource is good without it.
      assert.equal((await exchangeGrantToken(server, await sign({ jti: 'for-a-resource' }))).status, 200);
      await assertOAuthError(await hClientPost(`${server.url}/api/token`, { grant_type: JWT_BEARER }), 400, 'invalid_request', 'Missing assertion.');
    });

    test('the built-in resource requiring a second factor gets no token for a grant token (step-up), and consumes nothing', async () => {
      const ctx = server.app.gatehouse;
      const builtin = async () => (await findResourceNamed(ctx, builtinResourceUri(ctx)))!;
      await changeTokenSettings(ctx, await builtin(), { requireSecondFactor: true }, COMMAND_LINE);
      const token = await grantToken(server, clientId, secret, { jti: 'step-up' });
      try {
        await assertOAuthError(
          await exchangeGrantToken(server, token),
          400,
          'invalid_grant',
          'the resource server requires a login with a second factor, which an assertion cannot prove',
        );
      } finally {
        await changeTokenSettings(ctx, await builtin(), { requireSecondFactor: false }, COMMAND_LINE);
      }
      assert.equal((await exchangeGrantToken(server, token)).status, 200, 'not consumed by the refusal');
    });

    test('with a DPoP proof a grant token gets a bound pair, whose refresh needs that key; a DPoP-only resource consumes nothing it refuses', async () => {
      const keys = await generateDpopKeys('ES256');
      const withProof = async (form: Record<string, string>, proving = keys) =>
        fetch(`${server.url}/api/token`, {
          method: 'POST',
          headers: { 'content-type': 'application/x-www-form-urlencoded', dpop: await generateProof(proving, `${server.url}/api/token`, 'POST') },
          body: new URLSearchParams(form),
        });
      const exchanged = await withProof({ grant_type: JWT_BEARER, assertion: await grantToken(server, clientId, secret, { jti: 'bound' }) });
      const pair = (await exchanged.json()) as { token_type: string; refresh_token: string };
      assert.equal(pair.token_type, 'DPoP');
      // A publisher's refresh token is a public client's (no secret to refresh with): bound too.
      await assertOAuthError(
        await refreshToken(server, pair.refresh_token),
        400,
        'invalid_dpop_proof',
        'this refresh token is bound to a DPoP key: prove that key',
      );
      assert.equal((await withProof({ grant_type: 'refresh_token', refresh_token: pair.refresh_token }, await generateDpopKeys('ES256'))).status, 400);
      assert.equal((await withProof({ grant_type: 'refresh_token', refresh_token: pair.refresh_token })).status, 200);

      const ctx = server.app.gatehouse;
      const builtin = async () => (await findResourceNamed(ctx, builtinResourceUri(ctx)))!;
      await changeTokenSettings(ctx, await builtin(), { requireDpop: true }, COMMAND_LINE);
      const token = await grantToken(server, clientId, secret, { jti: 'dpop-only' });
      try {
        await assertOAuthError(
          await exchangeGrantToken(server, token),
          400,
          'invalid_dpop_proof',
          'the resource server requires DPoP: send a DPoP proof with the token request',
        );
        assert.equal((await withProof({ grant_type: JWT_BEARER, assertion: token })).status, 200, 'not consumed by the refusal');
      } finally {
        await changeTokenSettings(ctx, await builtin(), { requireDpop: false }, COMMAND_LINE);
      }
    });

    test('a grant token’s grant stops refreshing once the built-in resource requires a second factor (no login proved one)', async () => {
      const ctx = server.app.gatehouse;
      const builtin = async () => (await findResourceNamed(ctx, builtinResourceUri(ctx)))!;
      const exchanged = await exchangeGrantToken(server, await grantToken(server, clientId, secret, { jti: 'before-step-up' }));
      const { refresh_token } = (await exchanged.json()) as { refresh_token: string };
      await changeTokenSettings(ctx, await builtin(), { requireSecondFactor: true }, COMMAND_LINE);
      try {
        await assertOAuthError(
          await refreshToken(server, refresh_token),
          400,
          'invalid_grant',
          'the resource server requires a login with a second factor, and this grant was approved without: ask the person again',
        );
      } finally {
        await changeTokenSettings(ctx, await builtin(), { requireSecondFactor: false }, COMMAND_LINE);
      }
      assert.equal((await refreshToken(server, refresh_token)).status, 200, 'the refusal changed nothing');
    });

    test('a disabled user gets no tokens; the aud may be the issuer or the token endpoint; scope narrows', async () => {
      const ctx = await openContext(server.config, server.store, silent);
      await server.createUser('carol');
      const { disableUser, findUserNamed } = await import('../../src/accounts/users.ts');
      await disableUser(ctx, (await findUserNamed(ctx, 'carol'))!, COMMAND_LINE);
      const host = new URL(server.url).hostname;
      await assertOAuthError(
        await exchangeGrantToken(server, await grantToken(server, clientId, secret, { sub: `acct:carol@${host}` })),
        400,
        'invalid_grant',
        'Grant token subject (sub) could not be found.',
      );
      for (const aud of [server.url, `${server.url}/api/token`, [host, 'other']]) {
        assert.equal((await exchangeGrantToken(server, await grantToken(server, clientId, secret, { aud }))).status, 200, JSON.stringify(aud));
      }
      const narrowed = await hClientPost(`${server.url}/api/token`, {
        grant_type: JWT_BEARER,
        // A jti of its own: without one, a token with the default claims minted in the same second as the first test's is that same token (HS256 is deterministic), and a replay.
        assertion: await grantToken(server, clientId, secret, { jti: 'narrowed' }),
        scope: 'annotation:read',
      });
      assert.equal(((await narrowed.json()) as { scope: string }).scope, 'annotation:read');
      await ctx.close();
    });

    test('the secret is kept sealed under KEYS_SECRET; a rotated secret stops signing at once', async () => {
      const row = await server.store.db.selectFrom('client_grant_secrets').selectAll().where('client_id', '=', clientId).executeTakeFirstOrThrow();
      assert.equal(row.encrypted, 1);
      assert.ok(!row.secret.includes(secret));
      assert.equal(JSON.parse(new TextDecoder().decode(base64url.decode(row.secret.split('.')[0]!))).kid, clientId);

      const ctx = await openContext(server.config, server.store, silent);
      const made = await registerClient(
        ctx,
        { name: 'Rotating publisher', grantType: JWT_BEARER, redirectUris: [], confidential: true, trusted: false, requirePkce: false, scope: '' },
        COMMAND_LINE,
      );
      const fresh = await rotateClientSecret(ctx, made.client, COMMAND_LINE);
      await assertOAuthError(
        await exchangeGrantToken(server, await grantToken(server, made.client.id, made.secret!)),
        400,
        'invalid_grant',
        'Invalid grant token signature.',
      );
      assert.equal((await exchangeGrantToken(server, await grantToken(server, made.client.id, fresh))).status, 200);
      await ctx.close();
    });

    test('a sealed secret that KEYS_SECRET does not open (another client’s row copied in) is "Client is invalid.", never a 500', async () => {
      const other = await server.createClient({ name: 'Swapped publisher', grantType: JWT_BEARER, redirectUris: [], confidential: true });
      const db = server.store.db;
      const theirs = await db.selectFrom('client_grant_secrets').select('secret').where('client_id', '=', clientId).executeTakeFirstOrThrow();
      await db.updateTable('client_grant_secrets').set({ secret: theirs.secret, encrypted: 1 }).where('client_id', '=', other.client.id).execute();
      await assertOAuthError(await exchangeGrantToken(server, await grantToken(server, other.client.id, secret)), 401, 'invalid_client', 'Client is invalid.');
      await assertOAuthError(
        await exchangeGrantToken(server, await grantToken(server, other.client.id, other.secret!)),
        401,
        'invalid_client',
        'Client is invalid.',
      );
    });

    test('neither the logs nor the audit trail hold an assertion', async () => {
      const token = await grantToken(server, clientId, secret, { jti: 'logged' });
      await exchangeGrantToken(server, token);
      await exchangeGrantToken(server, token);
      const signature = token.split('.')[2]!;
      assertNoSecretsLogged(server.logs);
      assert.ok(!server.logs.some((line) => line.includes(signature)), 'an assertion reached the log');
      const rows = await server.store.db.selectFrom('audit_events').selectAll().execute();
      assert.ok(!rows.some((row) => JSON.stringify(row).includes(signature)), 'an assertion reached the audit trail');
      const refused = rows.filter((row) => row.type === 'assertion_refused' && String(row.detail).includes('logged'));
      assert.equal(refused.length, 1, 'the replay is audited by its jti');
      const accepted = rows.filter((row) => row.type === 'token_issued' && String(row.detail).includes('"jti":"logged"'));
      assert.equal(accepted.length, 1);
    });
  });
}
