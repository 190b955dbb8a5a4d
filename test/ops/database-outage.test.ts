/**
 * PostgreSQL going away under a running server: the server reaches its database through a
 * TCP relay this test holds, which it can cut — every connection dropped, new ones reset (the
 * database restarting, or down) or accepted and never answered (a network partition, a host
 * that is gone). Every endpoint then answers 503 `temporarily_unavailable`, with Retry-After
 * when nothing can have been done, within the pool's connection timeout — never a 500, never a
 * 401 that would make a client throw its token away, never a wait for a connection that does
 * not come — and says why in one log line, not a stack trace. A connection lost while a request
 * held it ends that request, not the process. When the database is back, the server is too,
 * and nothing was consumed meanwhile: the refresh token refused with 503 still works.
 */
import assert from 'node:assert/strict';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import pg from 'pg';
import { COMMAND_LINE } from '../../src/audit.ts';
import { parseScopeDefinition, registerResource } from '../../src/clients/resources.ts';
import { loadConfig } from '../../src/config.ts';
import { forgetScopeCatalogue } from '../../src/oauth/resources.ts';
import { openContext } from '../../src/open-context.ts';
import { openStore } from '../../src/store/database.ts';
import { postgres, backendOptions } from '../support/backends.ts';
import { discover, obtainTokens, profile, refresh, refreshRequest, type App } from '../support/oauth-client.ts';
import { freePort } from '../support/ports.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent, formFields } from '../support/user-agent.ts';
import { until } from '../support/waits.ts';

type RelayMode = 'forward' | 'reset' | 'silent';

/** A TCP relay to PostgreSQL that the test can cut. */
async function startRelay(target: URL): Promise<{ port: number; set(mode: RelayMode): void; close(): Promise<void> }> {
  let mode: RelayMode = 'forward';
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    sockets.add(client);
    client.on('close', () => sockets.delete(client));
    client.on('error', () => {});
    if (mode === 'reset') return client.resetAndDestroy();
    if (mode === 'silent') return; // accepted, never answered
    const upstream = connect({ host: target.hostname, port: Number(target.port || 5432) });
    sockets.add(upstream);
    upstream.on('close', () => (sockets.delete(upstream), client.destroy()));
    upstream.on('error', () => {});
    client.on('close', () => upstream.destroy());
    client.pipe(upstream).pipe(client);
  });
  const port = await freePort();
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  return {
    port,
    set(next) {
      mode = next;
      // Every connection open now is dropped, as a database restart or a partition drops them.
      if (next !== 'forward') for (const socket of sockets) socket.resetAndDestroy();
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

describe('PostgreSQL going away under a running server', backendOptions(postgres), () => {
  let database: { url: string; drop(): Promise<void> };
  let relay: Awaited<ReturnType<typeof startRelay>>;
  let server: TestServer;
  let app: App;
  let tokens: { access_token: string; refresh_token?: string };
  let alice: UserAgent;

  before(async () => {
    database = await postgres.createMigrated();
    const url = new URL(database.url);
    relay = await startRelay(new URL(database.url));
    url.host = `127.0.0.1:${relay.port}`;
    server = await startServer(postgres, { DATABASE_URL: url.href });
    await server.createUser('alice');
    const { client } = await server.createClient({ name: 'Notes' });
    app = await discover(server, client.id);
    alice = new UserAgent(server.url);
    await alice.login('alice');
    tokens = await obtainTokens(app, alice);
  });
  after(async () => {
    relay?.set('forward');
    await server?.close();
    await relay?.close();
    await database?.drop();
  });

  const unexpectedErrors = () => server.logs.filter((line) => line.includes('"msg":"unexpected error"'));

  /** The server's connections listening for revocations made elsewhere (the command line, other instances). */
  const listening = async () =>
    (await sql<{ pid: number }>`select pid from pg_stat_activity where datname = current_database() and query ilike 'LISTEN%'`.execute(server.store.db)).rows
      .length;

  /** What each kind of endpoint answers, and how long it took. */
  async function answersWhileDown() {
    const started = performance.now();
    const [token, bearer, status, page] = await Promise.all([
      refreshRequest(app, tokens.refresh_token!),
      profile(server, tokens.access_token),
      fetch(new URL('/_status', server.url)),
      fetch(new URL('/login', server.url)),
    ]);
    return { token, bearer, status, page, ms: performance.now() - started };
  }

  for (const [mode, what, withinMs] of [
    ['reset', 'down (connections reset)', 3000],
    ['silent', 'unreachable (connections never answered)', 8000],
  ] as const) {
    test(
      `while the database is ${what}, every endpoint answers 503 within ${withinMs / 1000} s, and works again once it is back`,
      { timeout: 30_000 },
      async () => {
        const errorsBefore = unexpectedErrors().length;
        const logsBefore = server.logs.length;
        relay.set(mode);
        const down = await answersWhileDown();
        assert.ok(down.ms < withinMs, `answered after ${Math.round(down.ms)} ms`);
        assert.equal(down.token.status, 503);
        assert.ok(Number(down.token.headers.get('retry-after')) > 0, 'Retry-After');
        assert.equal(((await down.token.json()) as { error: string }).error, 'temporarily_unavailable');
        assert.equal(down.bearer.status, 503, 'not 401: the token is not known to be bad');
        assert.equal(down.status.status, 503);
        assert.equal(down.page.status, 503);
        assert.match(await down.page.text(), /<html/i, 'a page, for a browser');
        assert.deepEqual(unexpectedErrors().slice(errorsBefore), [], 'no unexpected error logged');
        assert.ok(
          server.logs.slice(logsBefore).some((line) => line.includes('"msg":"database unavailable"')),
          'the outage is logged',
        );

        relay.set('forward');
        const renewed = await refresh(app, tokens.refresh_token!);
        tokens = renewed;
        assert.equal((await profile(server, renewed.access_token)).status, 200);
        assert.equal((await fetch(new URL('/_status', server.url))).status, 200);
      },
    );
  }

  /** Runs `request` while `lock` (statements on a connection of the test's own) holds what it needs, and cuts the server's connections once it waits. */
  async function cutWhileWaiting(lock: string[], request: () => Promise<Response>): Promise<Response> {
    const direct = new pg.Client({ connectionString: database.url });
    await direct.connect();
    try {
      await direct.query('begin');
      for (const statement of lock) await direct.query(statement);
      const answer = request();
      await until('the request waits for the lock', async () => {
        // A statement of the server's, in this database, waiting for a lock (not another test file's, nor the server's background count of the table).
        const { rows } = await direct.query<{ n: number }>(
          "select count(*)::int as n from pg_locks join pg_stat_activity using (pid) where not granted and datname = current_database() and query not ilike '%count(%'",
        );
        return rows[0]!.n > 0;
      });
      relay.set('reset');
      return await answer;
    } finally {
      await direct.query('rollback');
      await direct.end();
      relay.set('forward');
    }
  }

  test(
    'a connection lost while a request holds it: that request is answered 503 without Retry-After (it may have taken effect), and the server lives on',
    { timeout: 30_000 },
    async () => {
      const fresh = await obtainTokens(app, alice);
      // The refresh's statements wait for the table, each holding its connection.
      const refused = await cutWhileWaiting(['lock table refresh_tokens in access exclusive mode'], () => refreshRequest(app, fresh.refresh_token!));
      assert.equal(refused.status, 503);
      assert.equal(refused.headers.get('retry-after'), null, 'no invitation to retry what may have been done');
      // Here it had not been done: the statement never got its lock.
      assert.equal((await refreshRequest(app, fresh.refresh_token!)).status, 200);
    },
  );

  test('a transaction whose connection is lost is answered 503 too, not the error of its ROLLBACK on the dead connection', { timeout: 30_000 }, async () => {
    const carol = new UserAgent(server.url);
    await carol.login('alice');
    const home = await carol.visit('/');
    const errorsBefore = unexpectedErrors().length;
    // Logging out reads and deletes the session in a transaction: the session's row, locked, holds it there.
    const refused = await cutWhileWaiting(["select 1 from sessions where user_id = (select id from users where username = 'alice') for update"], () =>
      carol.fetch('/logout', { method: 'POST', body: formFields(home.html, '/logout') }),
    );
    assert.equal(refused.status, 503);
    assert.deepEqual(unexpectedErrors().slice(errorsBefore), []);
  });

  test('the connection that hears changes made elsewhere comes back after an outage of several seconds', { timeout: 40_000 }, async () => {
    const QUEUE_DOWN = 'back-channel logout delivery: the database is unavailable; trying again';
    const QUEUE_BACK = 'back-channel logout delivery: the database is back';
    const said = (message: string, since = 0) => server.logs.slice(since).filter((line) => line.includes(`"msg":"${message}"`)).length;
    await until('the queue is over the earlier outages', () => said(QUEUE_DOWN) === said(QUEUE_BACK));
    const logsBefore = server.logs.length;
    relay.set('silent');
    await new Promise((resolve) => setTimeout(resolve, 3000)); // its attempts to come back fail meanwhile
    // Until the queue has met the outage (a loaded machine may have held its poll back).
    await until('the queue says the database is unavailable', () => said(QUEUE_DOWN, logsBefore) === 1);
    relay.set('forward');
    await until('the server listens again', async () => (await listening()) === 1);
    // The back-channel logouts' queue, looked at every 2 s, says the outage once, and its end once.
    await until('the queue says the database is back', () => said(QUEUE_BACK, logsBefore) === 1);
    assert.equal(said(QUEUE_DOWN, logsBefore), 1);
    // The scopes are cached for ten seconds, and forgotten at once when the fan-out says they changed.
    const scopes = async () =>
      ((await (await fetch(new URL('/.well-known/oauth-authorization-server', server.url))).json()) as { scopes_supported: string[] }).scopes_supported;
    forgetScopeCatalogue(server.app.gatehouse.db); // so that the next read caches them for the whole ten seconds from now
    const cachedAt = performance.now();
    assert.ok(!(await scopes()).includes('notes:read'));
    // Registered elsewhere — a context of its own, straight to the database (not through the relay), as the command line's.
    const config = loadConfig({ DATABASE_URL: database.url, PUBLIC_URL: server.url });
    const elsewhereStore = openStore(config.database);
    const elsewhere = await openContext(config, elsewhereStore, { info() {}, warn() {}, error() {} });
    try {
      await registerResource(
        elsewhere,
        { uri: 'https://notes.example/', name: 'Notes', scopes: [parseScopeDefinition('notes:read=Read notes')] },
        COMMAND_LINE,
      );
    } finally {
      await elsewhere.close();
      await elsewhereStore.close();
    }
    await until('the new scope is offered', async () => (await scopes()).includes('notes:read'));
    assert.ok(performance.now() - cachedAt < 10_000, 'told by the notification, not by the cache running out');
  });
});
