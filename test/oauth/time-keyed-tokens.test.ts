/**
 * Tokens keyed by time (src/tokens.ts `TIME_KEYED`): access and refresh tokens and codes
 * carry the millisecond they were made, so their rows are written in index order. Tokens
 * made before — keyed by their plain hash — keep working until they expire, and a token
 * whose time is made up opens nothing.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { TOKEN_INVALID_CLOSE_CODE } from '../../src/http/ws.ts';
import { hashIfWellFormed, hashToken, TOKEN_PREFIX } from '../../src/tokens.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { exchangeRequest, obtainCallback, obtainTokens, profile, refresh, refreshRequest, revokeToken, tokenResult } from '../support/oauth-client.ts';
import { assertDead, startWithApp, type Setup } from '../support/token-checks.ts';
import { connect, timeToClose } from '../support/ws-client.ts';

type Kind = 'access' | 'refresh' | 'code';
const TABLES = { access: 'access_tokens', refresh: 'refresh_tokens', code: 'auth_codes' } as const;

/** The token as it would have been made before tokens carried their time, its row re-keyed to match: an upgrade's leftover. */
async function asMadeBefore(setup: Setup, kind: Kind, token: string): Promise<string> {
  const legacy = TOKEN_PREFIX[kind] + token.slice(-43);
  // A row's hash never changes in the application (the schema's types say so): plain SQL here.
  const { numAffectedRows } =
    await sql`update ${sql.table(TABLES[kind])} set hash = ${hashToken(legacy)} where hash = ${hashIfWellFormed(kind, token)}`.execute(setup.server.store.db);
  assert.equal(numAffectedRows, 1n);
  return legacy;
}

/** The token with its time moved by a millisecond: same secret, made-up time. */
function withOtherTime(kind: Kind, token: string): string {
  const start = TOKEN_PREFIX[kind].length;
  const time = (parseInt(token.slice(start, start + 12), 16) + 1).toString(16).padStart(12, '0');
  return token.slice(0, start) + time + token.slice(start + 12);
}

for (const backend of BACKENDS) {
  describe(`tokens keyed by time (${backend.name})`, backendOptions(backend), () => {
    let setup: Setup;
    before(async () => {
      setup = await startWithApp(backend);
    });
    after(() => setup?.server.close());

    test('new access and refresh tokens carry the time they were made, and work', async () => {
      const before = Date.now();
      const tokens = await obtainTokens(setup.app, setup.agent);
      for (const [kind, token] of [
        ['access', tokens.access_token],
        ['refresh', tokens.refresh_token!],
      ] as const) {
        const time = parseInt(token.slice(4, 16), 16);
        assert.ok(time >= before && time <= Date.now(), kind);
      }
      assert.equal((await profile(setup.server, tokens.access_token)).status, 200);
      assert.equal((await refresh(setup.app, tokens.refresh_token!)).token_type, 'bearer');
    });

    test('a token with a made-up time opens nothing: not the API, not a refresh, not a code exchange', async () => {
      const tokens = await obtainTokens(setup.app, setup.agent);
      assert.equal((await profile(setup.server, withOtherTime('access', tokens.access_token))).status, 401);
      const refused = await tokenResult(await refreshRequest(setup.app, withOtherTime('refresh', tokens.refresh_token!)));
      assert.deepEqual([refused.status, refused.body.error], [400, 'invalid_grant']);
      const authorized = await obtainCallback(setup.app, setup.agent);
      authorized.callback.set('code', withOtherTime('code', authorized.callback.get('code')!));
      const exchange = await tokenResult(await exchangeRequest(setup.app, authorized));
      assert.deepEqual([exchange.status, exchange.body.error], [400, 'invalid_grant']);
      // and the real ones were left untouched by the attempts
      assert.equal((await profile(setup.server, tokens.access_token)).status, 200);
      assert.equal((await tokenResult(await refreshRequest(setup.app, tokens.refresh_token!))).status, 200);
    });

    test('tokens made before the upgrade keep working: the API, rotation (with its grace repeat) and revocation', async () => {
      const tokens = await obtainTokens(setup.app, setup.agent);
      const access = await asMadeBefore(setup, 'access', tokens.access_token);
      const refreshToken = await asMadeBefore(setup, 'refresh', tokens.refresh_token!);
      assert.equal((await profile(setup.server, access)).status, 200);
      assert.equal((await profile(setup.server, tokens.access_token)).status, 401, 'the row answers to its old shape only');

      const rotated = await refresh(setup.app, refreshToken);
      assert.match(rotated.refresh_token!, /^grt_[0-9a-f]{12}[\w-]{43}$/, 'its successor is keyed by time');
      assert.deepEqual((await refresh(setup.app, refreshToken)).refresh_token, rotated.refresh_token, 'the grace window repeats the same pair');

      await revokeToken(setup.app, access);
      await assertDead(setup, [{ access_token: access }, rotated]);
    });

    test('a socket opened with either shape is closed by the once-a-second check when its grant is revoked behind the fan-out’s back', async () => {
      const current = await obtainTokens(setup.app, setup.agent);
      const before = await obtainTokens(setup.app, setup.agent);
      const sockets = [
        await connect(setup.server.url, current.access_token),
        await connect(setup.server.url, await asMadeBefore(setup, 'access', before.access_token)),
      ];
      // Straight in the database, as another process on SQLite would: only the liveness check, which reads each socket's token by its stored hash, can notice.
      await setup.server.store.db.updateTable('grants').set({ revoked_at: Date.now() }).where('revoked_at', 'is', null).execute();
      for (const socket of sockets) assert.equal((await timeToClose(socket, 5000)).code, TOKEN_INVALID_CLOSE_CODE);
    });

    test('a code made before the upgrade is still exchanged, once', async () => {
      const authorized = await obtainCallback(setup.app, setup.agent);
      authorized.callback.set('code', await asMadeBefore(setup, 'code', authorized.callback.get('code')!));
      const first = await tokenResult(await exchangeRequest(setup.app, authorized));
      assert.equal(first.status, 200);
      const again = await tokenResult(await exchangeRequest(setup.app, authorized));
      assert.deepEqual([again.status, again.body.error], [400, 'invalid_grant']);
    });
  });
}
