/**
 * The exactly-once writes as one statement (PostgreSQL) or one transaction (SQLite): a
 * request that loses writes nothing at all — no grant, token, audit row or consumed code
 * beyond the winner's. On PostgreSQL, a change committed by another connection while a
 * request waits for the row it holds — the user, the client, the code, the grant — is
 * interleaved on purpose: the other connection takes the row lock first, the request is
 * seen waiting for it (pg_stat_activity), then the change commits.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'kysely';
import pg from 'pg';
import { hashIfWellFormed } from '../../src/tokens.ts';
import { BACKENDS, backendOptions, postgres } from '../support/backends.ts';
import { exchangeRequest, obtainCallback, obtainTokens, refreshRequest, tokenResult, type TokenResult } from '../support/oauth-client.ts';
import type { TestServer } from '../support/server.ts';
import { startWithApp, type Setup } from '../support/token-checks.ts';

const RACERS = 20;

/** What the client's grants left behind: grants, tokens, and `token_issued` / `token_refreshed` events. */
async function storedFor(server: TestServer, clientId: string) {
  const db = server.store.db;
  const grants = await db.selectFrom('grants').select('id').where('client_id', '=', clientId).execute();
  const ids = grants.map((g) => g.id);
  const count = async (table: 'access_tokens' | 'refresh_tokens') =>
    ids.length === 0
      ? 0
      : Number(
          (
            await db
              .selectFrom(table)
              .select((eb) => eb.fn.countAll().as('n'))
              .where('grant_id', 'in', ids)
              .executeTakeFirstOrThrow()
          ).n,
        );
  const events = await db.selectFrom('audit_events').select(['type', 'detail']).where('client_id', '=', clientId).execute();
  return {
    grants: ids,
    access: await count('access_tokens'),
    refresh: await count('refresh_tokens'),
    issued: events.filter((e) => e.type === 'token_issued').length,
    refreshed: events.filter((e) => e.type === 'token_refreshed' && !e.detail?.includes('repeated_within_grace')).length,
  };
}

for (const backend of BACKENDS) {
  describe(`what the losers of a race write (${backend.name})`, backendOptions(backend), () => {
    let setup: Setup;
    before(async () => {
      setup = await startWithApp(backend);
    });
    after(() => setup?.server.close());

    test(`of ${RACERS} concurrent exchanges of one code, only the winner's grant, tokens and audit row are stored`, async () => {
      const { server, app, agent } = setup;
      await obtainTokens(app, agent); // logs in; its grant is counted below
      const authorized = await obtainCallback(app, agent);
      const results = await Promise.all(Array.from({ length: RACERS }, () => exchangeRequest(app, authorized).then(tokenResult)));
      assert.equal(results.filter((r) => r.status === 200).length, 1);
      const stored = await storedFor(server, app.client.client_id);
      assert.deepEqual(stored, { grants: stored.grants, access: 2, refresh: 2, issued: 2, refreshed: 0 });
      assert.equal(stored.grants.length, 2, 'the first exchange and the race winner: one grant each');
      const code = await server.store.db
        .selectFrom('auth_codes')
        .select('grant_id')
        .where('hash', '=', hashIfWellFormed('code', authorized.callback.get('code')!)!)
        .executeTakeFirstOrThrow();
      assert.ok(code.grant_id !== null && stored.grants.includes(code.grant_id), 'the code names the winner’s grant');
    });

    test(`of ${RACERS} concurrent refreshes within the grace window, one rotation is stored; the rest repeat it`, async () => {
      const { server, app, agent } = setup;
      const { client } = await server.createClient({ name: 'Tabs' });
      const tabs = { ...app, client: { client_id: client.id } };
      const pair = await obtainTokens(tabs, agent);
      const results: TokenResult[] = await Promise.all(Array.from({ length: RACERS }, () => refreshRequest(tabs, pair.refresh_token!).then(tokenResult)));
      assert.equal(results.filter((r) => r.status === 200).length, RACERS);
      const stored = await storedFor(server, client.id);
      assert.deepEqual(stored, { grants: stored.grants, access: 2, refresh: 2, issued: 1, refreshed: 1 });
    });
  });
}

/** A transaction of another connection that has changed rows and holds their locks until `commit`. */
async function holding(server: TestServer, statement: string, params: unknown[]): Promise<{ commit(): Promise<void> }> {
  if (server.config.database.kind !== 'postgres') throw new Error('row locks are PostgreSQL’s');
  const other = new pg.Client({ connectionString: server.config.database.url });
  await other.connect();
  await other.query('begin');
  await other.query(statement, params);
  return {
    async commit() {
      await other.query('commit');
      await other.end();
    },
  };
}

/** Resolves once a query of the server waits for a row lock (the request has reached it). */
async function untilWaiting(server: TestServer): Promise<void> {
  for (let tries = 0; tries < 500; tries++) {
    const { rows } = await sql<{
      n: number;
    }>`select count(*) as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`.execute(server.store.db);
    if (rows[0]!.n > 0) return;
    await sleep(10);
  }
  throw new Error('the request never waited for the lock');
}

describe('changes committed while a request waits for the row (postgres)', backendOptions(postgres), () => {
  let setup: Setup;
  let aliceId: string;
  before(async () => {
    setup = await startWithApp(postgres);
    aliceId = (await setup.server.store.db.selectFrom('users').select('id').where('username', '=', 'alice').executeTakeFirstOrThrow()).id;
  });
  after(() => setup?.server.close());

  /** Interleaves `change` with an exchange of a fresh code of a fresh client: the request waits for the change, which then commits. */
  async function exchangeDuring(change: (clientId: string) => [string, unknown[]]) {
    const { server, app, agent } = setup;
    const { client } = await server.createClient({ name: 'Interleaved' });
    const interleaved = { ...app, client: { client_id: client.id } };
    const authorized = await obtainCallback(interleaved, agent);
    const [statement, params] = change(client.id);
    const lock = await holding(server, statement, params);
    const answer = exchangeRequest(interleaved, authorized).then(tokenResult);
    await untilWaiting(server);
    await lock.commit();
    const result = await answer;
    const code = await server.store.db
      .selectFrom('auth_codes')
      .select(['consumed_at', 'grant_id'])
      .where('hash', '=', hashIfWellFormed('code', authorized.callback.get('code')!)!)
      .executeTakeFirst();
    return { result, code, stored: await storedFor(server, client.id) };
  }

  const nothingIssued = { grants: [], access: 0, refresh: 0, issued: 0, refreshed: 0 };

  test('a user disabled while the exchange waits: invalid_grant, the code not consumed, nothing issued', async () => {
    const { result, code, stored } = await exchangeDuring(() => ['update users set disabled = 1 where id = $1', [aliceId]]);
    await setup.server.store.db.updateTable('users').set({ disabled: 0 }).where('id', '=', aliceId).execute();
    assert.deepEqual([result.status, result.body.error], [400, 'invalid_grant']);
    assert.deepEqual(code, { consumed_at: null, grant_id: null });
    assert.deepEqual(stored, nothingIssued);
  });

  test("a client's scopes changed while the exchange waits: invalid_grant, the code not consumed, nothing issued", async () => {
    const { result, code, stored } = await exchangeDuring((clientId) => ["update clients set scopes = 'annotation:read' where id = $1", [clientId]]);
    assert.deepEqual([result.status, result.body.error], [400, 'invalid_grant']);
    assert.deepEqual(code, { consumed_at: null, grant_id: null });
    assert.deepEqual(stored, nothingIssued);
  });

  test('a client blocked while the exchange waits: invalid_grant, the code not consumed, nothing issued', async () => {
    const { result, code, stored } = await exchangeDuring((clientId) => ['update clients set blocked = 1 where id = $1', [clientId]]);
    assert.deepEqual([result.status, result.body.error], [400, 'invalid_grant']);
    assert.deepEqual(code, { consumed_at: null, grant_id: null });
    assert.deepEqual(stored, nothingIssued);
  });

  test('a client deleted while the exchange waits: a 4xx, nothing issued', async () => {
    const { result, code, stored } = await exchangeDuring((clientId) => ['delete from clients where id = $1', [clientId]]);
    assert.ok(result.status >= 400 && result.status < 500, `status ${result.status}`);
    assert.equal(code, undefined, 'the code went with its client');
    assert.deepEqual(stored, nothingIssued);
  });

  test('a code consumed by another exchange while this one waits: invalid_grant as a replay, nothing issued by this one', async () => {
    const now = Date.now();
    const { result, code, stored } = await exchangeDuring((clientId) => ['update auth_codes set consumed_at = $1 where client_id = $2', [now, clientId]]);
    assert.deepEqual([result.status, result.body.error], [400, 'invalid_grant']);
    assert.deepEqual(code, { consumed_at: now, grant_id: null });
    assert.deepEqual(stored, nothingIssued);
  });

  test('a revocation committed while a rotation waits for the grant: invalid_grant, the token not rotated, nothing issued', async () => {
    const { server, app, agent } = setup;
    const pair = await obtainTokens(app, agent);
    const refreshHash = hashIfWellFormed('refresh', pair.refresh_token!)!;
    const { grant_id: grantId } = await server.store.db
      .selectFrom('refresh_tokens')
      .select('grant_id')
      .where('hash', '=', refreshHash)
      .executeTakeFirstOrThrow();
    const lock = await holding(server, 'update grants set revoked_at = $1 where id = $2', [Date.now(), grantId]);
    const answer = refreshRequest(app, pair.refresh_token!).then(tokenResult);
    await untilWaiting(server);
    await lock.commit();
    const result = await answer;
    assert.deepEqual([result.status, result.body.error], [400, 'invalid_grant']);
    const token = await server.store.db
      .selectFrom('refresh_tokens')
      .select(['rotated_at', 'successor_hash'])
      .where('hash', '=', refreshHash)
      .executeTakeFirstOrThrow();
    assert.deepEqual(token, { rotated_at: null, successor_hash: null });
    const tokens = await server.store.db.selectFrom('access_tokens').select('hash').where('grant_id', '=', grantId).execute();
    assert.equal(tokens.length, 1, 'only the access token of the exchange');
  });
});
