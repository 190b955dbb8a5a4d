/**
 * Retention (SPEC §3): expired rows go, live ones stay, in bounded batches, and on
 * PostgreSQL two instances never purge at the same time. `gatehouse purge` is run as an
 * operator runs it, on the database a live server is using.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { sql } from 'kysely';
import { purgeOnce, PURGE_LOCK } from '../../src/store/purge.ts';
import { hashIfWellFormed } from '../../src/tokens.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { discover, obtainCallback, obtainTokens, profile, refresh, type App } from '../support/oauth-client.ts';
import { databaseUrl, gatehouse } from '../support/processes.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';

const DAY = 24 * 3600;
const TABLES = ['auth_codes', 'access_tokens', 'refresh_tokens', 'grants', 'sessions', 'consents', 'audit_events'] as const;

for (const backend of BACKENDS) {
  describe(`purging expired rows (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let app: App;
    /** The application of the old activity, so that its consent is not renewed by today's. */
    let oldApp: App;

    const count = async (table: string) => {
      const { rows } = await sql<{ n: number | string }>`select count(*) as n from ${sql.table(table)}`.execute(server.store.db);
      return Number(rows[0]!.n);
    };
    const counts = async () => Object.fromEntries(await Promise.all(TABLES.map(async (table) => [table, await count(table)] as const)));

    /** Old activity: codes, grants, tokens, sessions, consents and audit events that expired days ago. */
    async function oldActivity(times: number) {
      server.advance(-3 * DAY);
      try {
        const agent = new UserAgent(server.url);
        for (let i = 0; i < times; i++) {
          const tokens = await obtainTokens(oldApp, agent);
          await refresh(oldApp, tokens.refresh_token!);
          await obtainCallback(oldApp, agent); // a code never exchanged
        }
      } finally {
        server.advance(3 * DAY);
      }
    }

    before(async () => {
      // Short lifetimes, so that rows made three days ago are all past their expiry.
      server = await startServer(backend, {
        ACCESS_TOKEN_TTL: '600',
        REFRESH_TOKEN_TTL: '3600',
        SESSION_TTL: '3600',
        CONSENT_TTL: '3600',
        AUDIT_RETENTION_DAYS: '1',
      });
      await server.createUser('alice');
      app = await discover(server, (await server.createClient({ name: 'Annotator' })).client.id);
      oldApp = await discover(server, (await server.createClient({ name: 'Old annotator' })).client.id);
    });
    after(() => server?.close());

    test('gatehouse purge deletes what has expired and nothing that still works', async () => {
      await oldActivity(2);
      const live = await obtainTokens(app, new UserAgent(server.url));
      const before = await counts();

      const run = await gatehouse(['purge', '--json'], { DATABASE_URL: databaseUrl(server.config) });
      assert.equal(run.code, 0, run.stderr);
      const purged = JSON.parse(run.stdout) as Record<string, number>;
      const after = await counts();
      for (const table of TABLES) {
        assert.ok(purged[table]! > 0, `nothing purged from ${table}`);
        assert.equal(after[table], before[table]! - purged[table]!, table);
      }
      // What is left is today's: the live grant's rows and its audit events.
      assert.deepEqual(
        { grants: after.grants, access_tokens: after.access_tokens, refresh_tokens: after.refresh_tokens, sessions: after.sessions },
        { grants: 1, access_tokens: 1, refresh_tokens: 1, sessions: 1 },
      );
      assert.equal((await profile(server, live.access_token)).status, 200);
      await refresh(app, live.refresh_token!);

      const again = await gatehouse(['purge'], { DATABASE_URL: databaseUrl(server.config) });
      assert.match(again.stdout, /^auth_codes: 0 deleted$/m);
    });

    test('works in bounded batches until nothing expired is left', async () => {
      await oldActivity(3);
      const before = await counts();
      const purged = (await purgeOnce(server.store, Date.now(), server.config.refreshGraceSeconds * 1000, 2))!;
      const after = await counts();
      for (const table of TABLES) assert.equal(after[table], before[table]! - purged[table]!, table);
      assert.ok(purged.audit_events! > 2 && purged.auth_codes! >= 3, 'more rows than one batch holds were deleted');
      assert.equal(after.grants, 1, 'only the live grant is left');
    });

    test('a sealed pair is wiped once its grace window is over, from a successor used or not; one still in its window stays', async () => {
      const agent = new UserAgent(server.url);
      const boxOf = async (refreshToken: string) =>
        (
          await server.store.db
            .selectFrom('refresh_tokens')
            .select('replay_box')
            .where('hash', '=', hashIfWellFormed('refresh', refreshToken)!)
            .executeTakeFirstOrThrow()
        ).replay_box;
      server.advance(-2 * server.config.refreshGraceSeconds);
      const unused = await refresh(app, (await obtainTokens(app, agent)).refresh_token!);
      const used = await refresh(app, (await obtainTokens(app, agent)).refresh_token!);
      await refresh(app, used.refresh_token!);
      server.advance(2 * server.config.refreshGraceSeconds);
      const recent = await refresh(app, (await obtainTokens(app, agent)).refresh_token!);
      assert.ok((await boxOf(unused.refresh_token!)) !== null && (await boxOf(recent.refresh_token!)) !== null);

      const purged = (await purgeOnce(server.store, Date.now(), server.config.refreshGraceSeconds * 1000))!;
      assert.ok(purged.successor_boxes! >= 2);
      assert.equal(await boxOf(unused.refresh_token!), null);
      assert.equal(await boxOf(used.refresh_token!), null);
      assert.notEqual(await boxOf(recent.refresh_token!), null, 'still in its window');
      await refresh(app, unused.refresh_token!); // the token itself lives on
    });

    // Last: it purges as of a day ahead, which takes every other test's rows too.
    test('a grant goes at the first purge after the day its last token expired, never while a token of it lives', async () => {
      const grace = server.config.refreshGraceSeconds * 1000;
      const endOfDay = (time: number) => Math.ceil(time / (DAY * 1000)) * DAY * 1000;
      const grantOf = (refreshToken: string) =>
        server.store.db
          .selectFrom('grants')
          .innerJoin('refresh_tokens', 'refresh_tokens.grant_id', 'grants.id')
          .select(['grants.id', 'grants.expires_at', 'grants.purge_after'])
          .where('refresh_tokens.hash', '=', hashIfWellFormed('refresh', refreshToken)!)
          .executeTakeFirstOrThrow();
      const exists = async (id: string) => (await server.store.db.selectFrom('grants').select('id').where('id', '=', id).executeTakeFirst()) !== undefined;

      // As an older instance writes a grant during a rolling upgrade: with no purge day (0).
      const first = await obtainTokens(app, new UserAgent(server.url));
      const { id } = await grantOf(first.refresh_token!);
      await server.store.db.updateTable('grants').set({ purge_after: 0 }).where('id', '=', id).execute();
      await purgeOnce(server.store, Date.now(), grace);
      assert.ok(await exists(id), 'the purge finds it at once, and keeps it: its tokens live');

      // Its refresh by an older instance moves the exact expiry and not the day, which falls behind.
      const behind = endOfDay(Date.now()) - DAY * 1000;
      await server.store.db.updateTable('grants').set({ purge_after: behind }).where('id', '=', id).execute();
      await purgeOnce(server.store, Date.now(), grace);
      assert.ok(await exists(id), 'found by the purge, and kept: its tokens live');

      // Its next refresh here gives it the end of the day its newest token expires; one more keeps it so.
      const second = await refresh(app, first.refresh_token!);
      const moved = await grantOf(second.refresh_token!);
      assert.equal(moved.purge_after, endOfDay(moved.expires_at));
      const third = await refresh(app, second.refresh_token!);
      const last = await grantOf(third.refresh_token!);
      assert.equal(last.purge_after, endOfDay(last.expires_at));

      await purgeOnce(server.store, last.expires_at - 1, grace);
      assert.ok(await exists(id), 'kept while its newest token lives');
      await purgeOnce(server.store, last.expires_at + 1, grace);
      assert.ok(await exists(id), 'kept until the end of the day its last token expired');
      await purgeOnce(server.store, last.purge_after, grace);
      assert.equal(await exists(id), false, 'gone once that day is over');
    });
  });
}

describe('purging on PostgreSQL with several instances', backendOptions(BACKENDS.find((b) => b.name === 'postgres')!), () => {
  let server: TestServer;
  before(async () => {
    server = await startServer(BACKENDS.find((b) => b.name === 'postgres')!);
  });
  after(() => server?.close());

  test('while one instance purges, another skips its turn instead of doing the same work', async () => {
    const other = new pg.Client({ connectionString: databaseUrl(server.config) });
    await other.connect();
    try {
      // Another instance is in the middle of a purge run: it holds the purge lock.
      assert.equal((await other.query('select pg_try_advisory_lock($1) as locked', [PURGE_LOCK])).rows[0].locked, true);
      const skipped = await gatehouse(['purge', '--json'], { DATABASE_URL: databaseUrl(server.config) });
      assert.equal(skipped.code, 0, skipped.stderr);
      assert.deepEqual(JSON.parse(skipped.stdout), { skipped: 'another instance is purging right now' });
      assert.equal(await purgeOnce(server.store, Date.now(), 0), null);

      await other.query('select pg_advisory_unlock($1)', [PURGE_LOCK]);
      const ran = await gatehouse(['purge', '--json'], { DATABASE_URL: databaseUrl(server.config) });
      assert.equal(typeof (JSON.parse(ran.stdout) as Record<string, number>).grants, 'number');
    } finally {
      await other.end();
    }
  });

  test('a crashed instance does not keep the lock: it dies with its connection', async () => {
    const crashed = new pg.Client({ connectionString: databaseUrl(server.config) });
    await crashed.connect();
    await crashed.query('select pg_try_advisory_lock($1)', [PURGE_LOCK]);
    await crashed.end();
    assert.notEqual(await purgeOnce(server.store, Date.now(), 0), null);
  });
});
