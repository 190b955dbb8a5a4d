/**
 * Signing keys (SPEC §4.9) on one server, both backends: the first keys, the JWKS, scheduled
 * rotation with its publication lead and retirement tail (the server's clock moved; the
 * ring's timer work run by `refresh`, which the timer calls every minute), rotate --now,
 * revoke, KEYS_SECRET at rest, and that no private key material leaves the process.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createRemoteJWKSet, decodeProtectedHeader, jwtVerify, SignJWT, generateKeyPair, exportJWK, UnsecuredJWT } from 'jose';
import { COMMAND_LINE } from '../../src/audit.ts';
import { ConfigError, loadConfig } from '../../src/config.ts';
import { beginAppSetup, currentAppSetup } from '../../src/accounts/second-factors.ts';
import { findUserNamed } from '../../src/accounts/users.ts';
import { KeyInputError, PUBLICATION_LEAD_MS, listKeys, retirementTailMs, revokeKey, rotateKeys } from '../../src/identity/key-schedule.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { databaseUrl, gatehouse } from '../support/processes.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { JWT_BEARER_GRANT_TYPE as JWT_BEARER } from '../../src/oauth/grants/types.ts';

const SECRET = 'k'.repeat(40);
const PRIVATE_PARAMETERS = ['d', 'p', 'q', 'dp', 'dq', 'qi'];

const jwks = async (server: TestServer) => {
  const response = await fetch(`${server.url}/oauth/jwks`, { headers: { origin: 'https://elsewhere.example' } });
  assert.equal(response.status, 200);
  return { response, body: (await response.json()) as { keys: Array<Record<string, string>> } };
};
const kids = async (server: TestServer) => (await jwks(server)).body.keys.map((key) => key.kid).sort();
const signingKid = async (server: TestServer, alg: 'ES256' | 'RS256' = 'ES256') =>
  decodeProtectedHeader(await server.app.gatehouse.keys.signJwt(alg, { typ: 'at+jwt' }, { sub: 'x', exp: Math.floor(Date.now() / 1000) + 3600 })).kid;
/** The private `d` of every stored key, read straight from the database, to look for where it must never be. */
async function privateValues(server: TestServer): Promise<string[]> {
  const rows = await server.store.db.selectFrom('signing_keys').select(['private_jwk', 'encrypted']).execute();
  return rows.filter((row) => row.encrypted === 0).map((row) => (JSON.parse(row.private_jwk) as { d: string }).d);
}

for (const backend of BACKENDS) {
  describe(`signing keys (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    before(async () => (server = await startServer(backend)));
    after(() => server?.close());

    test('the first start makes exactly one active ES256 and one active RS256 key, and the JWKS publishes their public halves only', async () => {
      const keys = await listKeys(server.app.gatehouse);
      assert.deepEqual(keys.map((key) => [key.alg, key.state]).sort(), [
        ['ES256', 'active'],
        ['RS256', 'active'],
      ]);
      const { response, body } = await jwks(server);
      assert.equal(response.headers.get('cache-control'), 'public, max-age=600');
      assert.equal(response.headers.get('access-control-allow-origin'), '*');
      assert.equal(body.keys.length, 2);
      for (const key of body.keys) {
        assert.equal(key.use, 'sig');
        assert.ok(['ES256', 'RS256'].includes(key.alg!));
        assert.deepEqual(
          Object.keys(key).sort(),
          (key.kty === 'EC' ? ['alg', 'crv', 'kid', 'kty', 'use', 'x', 'y'] : ['alg', 'e', 'kid', 'kty', 'n', 'use']).sort(),
        );
        for (const name of PRIVATE_PARAMETERS) assert.equal(key[name], undefined);
      }
      const metadata = (await (await fetch(`${server.url}/.well-known/oauth-authorization-server`)).json()) as { jwks_uri: string };
      assert.equal(metadata.jwks_uri, `${server.url}/oauth/jwks`);
    });

    test('what signJwt signs verifies with any JOSE library against /oauth/jwks, and with verifyJwt', async () => {
      const remote = createRemoteJWKSet(new URL(`${server.url}/oauth/jwks`));
      for (const alg of ['ES256', 'RS256'] as const) {
        const token = await server.app.gatehouse.keys.signJwt(
          alg,
          { typ: 'at+jwt' },
          { iss: server.url, sub: 'alice', exp: Math.floor(Date.now() / 1000) + 300 },
        );
        const { payload, protectedHeader } = await jwtVerify(token, remote, { issuer: server.url, typ: 'at+jwt', algorithms: [alg] });
        assert.equal(payload.sub, 'alice');
        assert.equal(protectedHeader.alg, alg);
        assert.equal((await server.app.gatehouse.keys.verifyJwt(token, { typ: 'at+jwt' }))?.sub, 'alice');
        assert.equal(await server.app.gatehouse.keys.verifyJwt(token, { typ: 'JWT' }), null, 'another typ');
        assert.equal(await server.app.gatehouse.keys.verifyJwt(token, { typ: 'at+jwt', algorithms: [alg === 'ES256' ? 'RS256' : 'ES256'] }), null);
      }
    });

    test("verifyJwt chooses only among the server's own keys, by kid: a key carried in the header, an unknown kid, alg none, expiry all fail", async () => {
      const ring = server.app.gatehouse.keys;
      const exp = Math.floor(Date.now() / 1000) + 300;
      const { publicKey, privateKey } = await generateKeyPair('ES256', { extractable: true });
      const ownKid = (await jwks(server)).body.keys.find((key) => key.alg === 'ES256')!.kid;
      // An attacker's key, offered in the header (jwk), or under the server's kid.
      const withJwk = await new SignJWT({ sub: 'mallory', exp })
        .setProtectedHeader({ alg: 'ES256', typ: 'at+jwt', jwk: await exportJWK(publicKey) })
        .sign(privateKey);
      const underOwnKid = await new SignJWT({ sub: 'mallory', exp }).setProtectedHeader({ alg: 'ES256', typ: 'at+jwt', kid: ownKid }).sign(privateKey);
      const unknownKid = await new SignJWT({ sub: 'mallory', exp }).setProtectedHeader({ alg: 'ES256', typ: 'at+jwt', kid: 'nope' }).sign(privateKey);
      const unsigned = new UnsecuredJWT({ sub: 'mallory', exp }).encode();
      for (const token of [withJwk, underOwnKid, unknownKid, unsigned, 'not.a.jwt', '']) assert.equal(await ring.verifyJwt(token, { typ: 'at+jwt' }), null);
      const expired = await ring.signJwt('ES256', { typ: 'at+jwt' }, { sub: 'alice', exp: Math.floor(Date.now() / 1000) - 10 });
      assert.equal(await ring.verifyJwt(expired, { typ: 'at+jwt' }), null);
    });

    test('scheduled rotation: the next key is published an hour before it signs; the old one retires, then leaves after the tail', async () => {
      const ring = server.app.gatehouse.keys;
      const before = await kids(server);
      const oldKid = await signingKid(server);
      server.advance(90 * 86_400 + 1);
      await ring.refresh();
      const published = await kids(server);
      assert.equal(published.length, 4, 'a next key per algorithm is published');
      assert.equal(await signingKid(server), oldKid, 'and does not sign yet');
      const next = (await listKeys(server.app.gatehouse)).filter((key) => key.state === 'next');
      assert.equal(next.length, 2);
      for (const key of next) assert.ok(key.activatesAt - key.createdAt >= 3600_000);
      server.advance(PUBLICATION_LEAD_MS / 1000 - 60);
      await ring.refresh();
      assert.equal(await signingKid(server), oldKid, 'a minute before the lead is over, the old key still signs');
      server.advance(61);
      await ring.refresh();
      const newKid = await signingKid(server);
      assert.notEqual(newKid, oldKid);
      assert.ok(published.includes(newKid!));
      const states = await listKeys(server.app.gatehouse);
      assert.deepEqual(
        states
          .filter((key) => key.state === 'retiring')
          .map((key) => key.kid)
          .sort(),
        before,
      );
      assert.deepEqual(await kids(server), published, 'the retiring keys stay published');
      server.advance(retirementTailMs(server.config) / 1000 - 60);
      await ring.refresh();
      assert.equal((await kids(server)).length, 4, 'until everything they signed has expired');
      server.advance(61);
      await ring.refresh();
      assert.deepEqual(
        await kids(server),
        published.filter((kid) => !before.includes(kid)),
      );
      assert.deepEqual(
        (await listKeys(server.app.gatehouse)).map((key) => key.state),
        ['active', 'active'],
      );
    });

    test('rotate --now: new keys sign at once, the old ones retire; revoke: the key leaves the JWKS at once and a new one signs', async () => {
      const ctx = server.app.gatehouse;
      const oldKid = await signingKid(server);
      const token = await ctx.keys.signJwt('ES256', { typ: 'at+jwt' }, { sub: 'alice', exp: Math.floor(ctx.now() / 1000) + 300 }); // the server's clock has moved
      await rotateKeys(ctx, { now: true }, COMMAND_LINE);
      const rotatedKid = await signingKid(server);
      assert.notEqual(rotatedKid, oldKid);
      assert.deepEqual((await listKeys(ctx)).map((key) => key.state).sort(), ['active', 'active', 'retiring', 'retiring']);
      assert.ok((await ctx.keys.verifyJwt(token, { typ: 'at+jwt' })) !== null, 'a retiring key still verifies');

      await revokeKey(ctx, oldKid!, COMMAND_LINE);
      assert.ok(!(await kids(server)).includes(oldKid!));
      assert.equal(await ctx.keys.verifyJwt(token, { typ: 'at+jwt' }), null, 'what a revoked key signed no longer verifies');

      await revokeKey(ctx, rotatedKid!, COMMAND_LINE);
      const replacement = await signingKid(server);
      assert.ok(replacement !== rotatedKid && (await kids(server)).includes(replacement!), 'a new active key of its algorithm signs at once');
      assert.equal((await listKeys(ctx)).filter((key) => key.state === 'active' && key.alg === 'ES256').length, 1);

      const stored = await listKeys(ctx);
      await assert.rejects(revokeKey(ctx, 'no-such-kid', COMMAND_LINE), KeyInputError);
      assert.deepEqual(await listKeys(ctx), stored, 'an unknown kid changes nothing');
    });

    test('the audit trail names keys by kid and algorithm; no private key material in logs, audit trail or CLI output', async () => {
      const events = await server.store.db.selectFrom('audit_events').select(['type', 'detail']).where('type', 'like', 'key_%').execute();
      assert.deepEqual([...new Set(events.map((event) => event.type))].sort(), ['key_activated', 'key_created', 'key_removed', 'key_revoked']);
      for (const event of events) assert.deepEqual(Object.keys(JSON.parse(event.detail!)).sort(), ['alg', 'kid']);
      const cli = await gatehouse(['keys', 'list', '--json'], { DATABASE_URL: databaseUrl(server.config) });
      assert.equal(cli.code, 0, cli.stderr);
      assert.deepEqual(Object.keys(JSON.parse(cli.stdout)[0]).sort(), ['activates_at', 'alg', 'created_at', 'kid', 'retires_at', 'state']);
      const rotated = await gatehouse(['keys', 'rotate', '--now'], { DATABASE_URL: databaseUrl(server.config) });
      assert.equal(rotated.code, 0, rotated.stderr);
      const secrets = await privateValues(server);
      assert.ok(secrets.length >= 2);
      const everything = [server.logs.join(''), JSON.stringify(events), cli.stdout, cli.stderr, rotated.stdout, rotated.stderr].join('\n');
      for (const secret of secrets) assert.ok(!everything.includes(secret), 'a private key value leaked');
    });

    test('a revocation by another process (the CLI) reaches the server by its next re-read', async () => {
      const kid = await signingKid(server, 'RS256');
      // A kid is a base64url thumbprint: one in 64 begins with "-", which only reads as an argument after "--".
      const run = await gatehouse(['keys', 'revoke', '--', kid!], { DATABASE_URL: databaseUrl(server.config) });
      assert.equal(run.code, 0, run.stderr);
      assert.match(run.stdout, /Revoked RS256 key/);
      await server.app.gatehouse.keys.refresh();
      assert.ok(!(await kids(server)).includes(kid!));
      assert.notEqual(await signingKid(server, 'RS256'), kid);
      const unknown = await gatehouse(['keys', 'revoke', 'nope'], { DATABASE_URL: databaseUrl(server.config) });
      assert.equal(unknown.code, 2);
      assert.equal(unknown.stderr.trim(), 'gatehouse: no signing key has the kid "nope"');
      const dashed = await gatehouse(['keys', 'revoke', '--', '-nope'], { DATABASE_URL: databaseUrl(server.config) });
      assert.equal(dashed.stderr.trim(), 'gatehouse: no signing key has the kid "-nope"');
      const unseparated = await gatehouse(['keys', 'revoke', '-nope'], { DATABASE_URL: databaseUrl(server.config) });
      assert.equal(unseparated.code, 2);
      assert.equal(
        unseparated.stderr.trim(),
        'gatehouse: unknown option -n for "keys revoke"; see gatehouse keys revoke --help (a value that begins with "-" goes after --: gatehouse keys revoke -- -nope)',
      );
    });
  });

  describe(`KEYS_SECRET (${backend.name})`, backendOptions(backend), () => {
    test('keys are stored encrypted under it, and a wrong, missing or short one stops start-up with one line naming it', async () => {
      assert.throws(
        () => loadConfig({ KEYS_SECRET: 'x'.repeat(31) }),
        (error: Error) => error instanceof ConfigError && /^KEYS_SECRET must be at least 32 characters$/.test(error.message),
      );
      const server = await startServer(backend, { KEYS_SECRET: SECRET });
      const url = databaseUrl(server.config);
      try {
        const rows = await server.store.db.selectFrom('signing_keys').select(['private_jwk', 'encrypted']).execute();
        assert.equal(rows.length, 2);
        for (const row of rows) {
          assert.equal(row.encrypted, 1);
          assert.equal(row.private_jwk.split('.').length, 5, 'a compact JWE');
          assert.ok(!row.private_jwk.includes('"d"'));
        }
        for (const [env, pattern] of [
          [{ KEYS_SECRET: 'w'.repeat(40) }, /^gatehouse: KEYS_SECRET does not decrypt the signing keys/],
          [{}, /^gatehouse: KEYS_SECRET is not set, but the signing keys in the database are encrypted/],
          [{ KEYS_SECRET: 'short' }, /^gatehouse: KEYS_SECRET must be at least 32 characters$/],
        ] as const) {
          const run = await gatehouse(['keys', 'list'], { DATABASE_URL: url, ...env });
          assert.equal(run.code, 2);
          assert.match(run.stderr.trim(), pattern);
          assert.equal(run.stderr.trim().split('\n').length, 1, 'one line');
        }
        await assert.rejects(
          startServer(backend, { DATABASE_URL: url, KEYS_SECRET: 'w'.repeat(40) }),
          (error: Error) => error instanceof ConfigError && /KEYS_SECRET/.test(error.message),
        );
        const same = await gatehouse(['keys', 'list', '--json'], { DATABASE_URL: url, KEYS_SECRET: SECRET });
        assert.equal(same.code, 0, same.stderr);
      } finally {
        await server.close();
      }
    });

    test('every kind of secret stored before KEYS_SECRET is sealed at the next start, and still works', async () => {
      const plain = await startServer(backend);
      const url = databaseUrl(plain.config);
      let sealed: TestServer | undefined;
      try {
        const alice = await plain.createUser('alice');
        const publisher = await plain.createClient({ name: 'Publisher', grantType: JWT_BEARER, redirectUris: [], confidential: true });
        const app = await beginAppSetup(plain.app.gatehouse, alice);
        const appSecret = app!.secret.replace(/ /g, '');
        const inClear = [publisher.secret!, appSecret, ...(await privateValues(plain))];
        const stored = async () => [
          ...(await plain.store.db.selectFrom('signing_keys').select(['private_jwk as value', 'encrypted']).execute()),
          ...(await plain.store.db.selectFrom('client_grant_secrets').select(['secret as value', 'encrypted']).execute()),
          ...(await plain.store.db.selectFrom('authenticator_apps').select(['secret as value', 'encrypted']).execute()),
        ];
        assert.equal((await stored()).filter((row) => row.encrypted === 0).length, 4, 'two keys, a grant secret, an app secret');

        const run = await gatehouse(['keys', 'list'], { DATABASE_URL: url, KEYS_SECRET: SECRET });
        assert.equal(run.code, 0, run.stderr);
        const rows = await stored();
        assert.equal(rows.length, 4);
        for (const row of rows) {
          assert.equal(row.encrypted, 1);
          assert.equal(row.value.split('.').length, 5, 'a compact JWE');
          assert.ok(!inClear.some((secret) => row.value.includes(secret)));
        }

        sealed = await startServer(backend, { DATABASE_URL: url, KEYS_SECRET: SECRET });
        const ctx = sealed.app.gatehouse;
        assert.equal((await currentAppSetup(ctx, (await findUserNamed(ctx, 'alice'))!))!.secret.replace(/ /g, ''), appSecret);
        const now = Math.floor(Date.now() / 1000);
        const grantToken = await new SignJWT({ sub: `acct:alice@${new URL(sealed.url).hostname}`, aud: sealed.url, nbf: now, exp: now + 60 })
          .setProtectedHeader({ alg: 'HS256' })
          .setIssuer(publisher.client.id)
          .sign(new TextEncoder().encode(publisher.secret!));
        const body = new URLSearchParams({ grant_type: JWT_BEARER, assertion: grantToken });
        const exchanged = await fetch(`${sealed.url}/api/token`, { method: 'POST', body });
        assert.equal(exchanged.status, 200, await exchanged.text());
      } finally {
        await sealed?.close();
        await plain.close();
      }
    });

    if (backend.name === 'postgres') {
      test('without it, the start-up warning names every kind of secret the database keeps in clear', async () => {
        const server = await startServer(backend);
        try {
          const warning = server.logs.find((line) => line.includes('KEYS_SECRET is not set'));
          assert.ok(warning, 'a warning');
          assert.match(JSON.parse(warning).msg, /signing keys \(2\), publishers' grant secrets \(0\), authenticator app secrets \(0\)/);
        } finally {
          await server.close();
        }
      });
    }

    test('keys stored unencrypted are encrypted once KEYS_SECRET is set', async () => {
      const plain = await startServer(backend);
      const url = databaseUrl(plain.config);
      try {
        const secrets = await privateValues(plain);
        const run = await gatehouse(['keys', 'list'], { DATABASE_URL: url, KEYS_SECRET: SECRET });
        assert.equal(run.code, 0, run.stderr);
        const rows = await plain.store.db.selectFrom('signing_keys').select(['private_jwk', 'encrypted']).execute();
        assert.ok(rows.every((row) => row.encrypted === 1 && !secrets.some((secret) => row.private_jwk.includes(secret))));
      } finally {
        await plain.close();
      }
    });
  });
}
