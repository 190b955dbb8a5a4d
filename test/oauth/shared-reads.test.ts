/**
 * Issue 35, item 3: on PostgreSQL, the reads of what a request redeems — a code, a refresh
 * token, the token a revocation or an introspection names, the client whose secret is checked
 * — are shared by the requests that arrive together
 * (src/store/shared-reads.ts): one statement reads the rows of many, and each request gets its
 * own row and its own answer. A read the database holds up holds only the requests that joined
 * it, and for at most 5 s: then they are answered 503, nothing spent. (SQLite reads in process,
 * one by one, as before: these suites are PostgreSQL's.)
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'kysely';
import { backendOptions, postgres } from '../support/backends.ts';
import { scrape } from '../support/metrics.ts';
import * as oauth from 'oauth4webapi';
import { UserAgent } from '../support/user-agent.ts';
import {
  authorizationUrl,
  discover,
  exchangeRequest,
  insecure,
  obtainCallback,
  obtainTokens,
  profile,
  refreshRequest,
  revokeToken,
  tokenResult,
  type TokenResult,
} from '../support/oauth-client.ts';
import { assertDead, assertWorks, startWithApp, type Setup } from '../support/token-checks.ts';
import { until } from '../support/waits.ts';

describe('reads shared by the requests that arrive together (postgres)', backendOptions(postgres), () => {
  let setup: Setup;

  before(async () => {
    setup = await startWithApp(postgres);
  });
  after(() => setup?.server.close());

  /** `count` results of `make`, one after another (one browser authorizes one request at a time). */
  async function inTurn<T>(count: number, make: () => Promise<T>): Promise<T[]> {
    const made: T[] = [];
    for (let n = 0; n < count; n++) made.push(await make());
    return made;
  }

  const statementsSoFar = async () => (await scrape(setup.server)).get('gatehouse_database_statements_total')!;

  /**
   * Statements in this server's database waiting for a lock, of those whose first kilobyte (all
   * pg_stat_activity keeps) is like `pattern`.
   */
  async function waitingFor(pattern = '%'): Promise<number> {
    const { rows } = await sql<{ n: number }>`select count(*)::int as n from pg_stat_activity
      where datname = current_database() and wait_event_type = 'Lock' and query like ${pattern}`.execute(setup.server.store.db);
    return rows[0]!.n;
  }

  test('refreshes, exchanges, unknown tokens and revocations sent at once each get their own answer, in fewer statements than two each', async () => {
    const { app, agent, server } = setup;
    const { db } = server.store;
    const pairs = await inTurn(12, () => obtainTokens(app, agent));
    const codes = await inTurn(6, () => obtainCallback(app, agent));
    const revoked = await inTurn(4, () => obtainTokens(app, agent));
    // Shaped like refresh tokens, issued by nobody.
    const unknown = pairs.slice(0, 4).map(({ refresh_token }) => refresh_token!.slice(0, -8) + randomBytes(6).toString('base64url'));

    const before = await statementsSoFar();
    // Every one of these reads joins the clients table: held, it makes the requests arrive while a
    // read is under way, as under load (on an idle machine each read would end before the next came).
    let requests: Promise<[TokenResult[], TokenResult[], TokenResult[], void[]]>;
    await db.transaction().execute(async (trx) => {
      await sql`lock table clients in access exclusive mode`.execute(trx);
      requests = Promise.all([
        Promise.all(pairs.map(({ refresh_token }) => refreshRequest(app, refresh_token!).then(tokenResult))),
        Promise.all(codes.map((code) => exchangeRequest(app, code).then(tokenResult))),
        Promise.all(unknown.map((token) => refreshRequest(app, token).then(tokenResult))),
        Promise.all(revoked.map(({ refresh_token }) => revokeToken(app, refresh_token!))),
      ]);
      await until('a read of each kind waits', async () => (await waitingFor()) >= 3);
      await sleep(300);
    });
    const [refreshed, exchanged, refused] = await requests!;
    const sent = (await statementsSoFar()) - before;

    assert.deepEqual(
      [...refreshed, ...exchanged].map((result) => result.status),
      Array(18).fill(200),
    );
    const issued = new Set([...refreshed, ...exchanged].map((result) => result.body.refresh_token));
    assert.equal(issued.size, 18, 'every request got a pair of its own');
    assert.deepEqual(
      refused.map((result) => [result.status, result.body.error]),
      Array(4).fill([400, 'invalid_grant']),
    );
    // Each refresh rotated its own token: presented again within the grace window, each old token
    // yields the very pair its own refresh got (sealed under that token alone), and that pair works.
    for (const [n, pair] of pairs.entries()) {
      const again = await tokenResult(await refreshRequest(app, pair.refresh_token!));
      assert.deepEqual([again.status, again.body.refresh_token], [200, refreshed[n]!.body.refresh_token]);
      assert.equal((await profile(server, refreshed[n]!.body.access_token!)).status, 200);
    }
    await assertWorks(setup, exchanged[0]!.body);
    await assertDead(setup, revoked);
    // Alone, each would read and then write: two statements each, one for an unknown token.
    const alone = 12 * 2 + 6 * 2 + 4 * 1 + 4 * 2;
    assert.ok(sent < alone, `${alone} statements' worth of requests sent ${sent}`);
  });

  test('introspections sent at once each learn of their own token, expiry judged by each request, in fewer statements than two each', async () => {
    const { app, agent, server } = setup;
    const registered = await server.createClient({ name: 'Annotation API', grantType: 'client_credentials', redirectUris: [], confidential: true });
    const resourceServer = await discover(server, registered.client.id, { secret: registered.secret! });
    const expiring = await obtainTokens(app, agent);
    server.advance(server.config.accessTokenTtl - 30);
    // Told apart by their scopes: each answer must describe its own token.
    const scopes = ['annotation:read', 'annotation:read annotation:write', 'annotation:write'];
    const live = await inTurn(6, async () => obtainTokens(app, agent, 'alice', { scope: scopes[Math.floor(Math.random() * scopes.length)]! }));
    const revoked = await obtainTokens(app, agent);
    await revokeToken(app, revoked.refresh_token!);
    server.advance(60); // `expiring` is 30 s past its expiry; the others have most of an hour left

    const tokens = [expiring, ...live, revoked].map(({ access_token }) => access_token);
    const before = await statementsSoFar();
    let answers: Promise<oauth.IntrospectionResponse[]>;
    // The secret is checked against the client as stored, and every token read joins the clients table.
    await server.store.db.transaction().execute(async (trx) => {
      await sql`lock table clients in access exclusive mode`.execute(trx);
      answers = Promise.all(
        tokens.map(async (token) =>
          oauth.processIntrospectionResponse(
            resourceServer.as,
            resourceServer.client,
            await oauth.introspectionRequest(resourceServer.as, resourceServer.client, resourceServer.auth, token, insecure),
          ),
        ),
      );
      await until('the reads of the client wait', async () => (await waitingFor()) >= 2);
      await sleep(300);
    });
    const described = await answers!;
    const sent = (await statementsSoFar()) - before;

    assert.deepEqual(
      described.map(({ active, scope }) => ({ active, scope })),
      [{ active: false, scope: undefined }, ...live.map(({ scope }) => ({ active: true, scope })), { active: false, scope: undefined }],
    );
    // Alone, each reads its client and then its token.
    assert.ok(sent < 2 * tokens.length, `${2 * tokens.length} statements' worth of requests sent ${sent}`);
  });

  test("one session's page requests sent at once read it together, and a session ended before they came is not found", async () => {
    const { app, agent, server } = setup;
    await obtainTokens(app, agent); // logged in, the application approved: an authorization answers with a code
    const ended = new UserAgent(server.url);
    await ended.login('alice');
    const stale = new UserAgent(server.url);
    for (const [name, value] of ended.cookies) stale.cookies.set(name, value);
    await ended.submit((await ended.visit('/')).html, '/logout');

    const authorize = async (who: UserAgent) => who.visit((await authorizationUrl(app)).url.toString());
    let before = await statementsSoFar();
    assert.ok((await authorize(agent)).redirect);
    const alone = (await statementsSoFar()) - before;

    before = await statementsSoFar();
    let outcomes: ReturnType<typeof authorize>[] = [];
    // The session's read joins the users table: held, the requests arrive while it is under way.
    await server.store.db.transaction().execute(async (trx) => {
      await sql`lock table users in access exclusive mode`.execute(trx);
      outcomes = [...Array.from({ length: 8 }, () => authorize(agent)), authorize(stale)];
      await until("a session's read waits", async () => (await waitingFor()) >= 1);
      await sleep(300);
    });
    const answered = await Promise.all(outcomes);
    const sent = (await statementsSoFar()) - before;

    const codes = answered.slice(0, 8).map((outcome) => outcome.redirect?.searchParams.get('code'));
    assert.equal(new Set(codes).size, 8, 'each authorization got a code of its own');
    assert.ok(codes.every((code) => code?.startsWith('gac_')));
    const refused = answered[8]!;
    assert.equal(refused.redirect, null, 'a session ended before the request came is not found');
    assert.match(refused.html, /action="\/login"/);
    assert.ok(sent < 9 * alone, `${9 * alone} statements' worth of requests sent ${sent}`);
  });

  test('a read the database holds up holds only its requests: the requests after it read beside it, and all are answered', async () => {
    const { app, agent, server } = setup;
    const pairs = await inTurn(3, () => obtainTokens(app, agent));
    const { db } = server.store;
    // The reads of refresh tokens (only refreshes are sent) begin with the resource server's settings.
    const waiting = () => waitingFor('select "resources"."token_format"%');
    const answers: Array<Promise<{ status: number }>> = [];
    await db.transaction().execute(async (trx) => {
      await sql`lock table refresh_tokens in access exclusive mode`.execute(trx);
      answers.push(refreshRequest(app, pairs[0]!.refresh_token!));
      await until('the first read waits', async () => (await waiting()) === 1);
      answers.push(refreshRequest(app, pairs[1]!.refresh_token!), refreshRequest(app, pairs[2]!.refresh_token!));
      // 50 ms after they came, not once the first read ends (which is never, while the lock is held).
      await until('the later requests read beside it', async () => (await waiting()) >= 2);
    });
    assert.deepEqual(
      (await Promise.all(answers)).map((answer) => answer.status),
      [200, 200, 200],
    );
  });

  test(
    'a read the database does not answer within 5 s is answered 503 to the requests that joined it, and nothing was spent',
    { timeout: 30_000 },
    async () => {
      const { app, agent, server } = setup;
      const pairs = await inTurn(2, () => obtainTokens(app, agent));
      let answers: Response[] = [];
      await server.store.db.transaction().execute(async (trx) => {
        await sql`lock table refresh_tokens in access exclusive mode`.execute(trx);
        answers = await Promise.all(pairs.map(({ refresh_token }) => refreshRequest(app, refresh_token!)));
      });
      assert.deepEqual(
        answers.map((answer) => answer.status),
        [503, 503],
      );
      for (const answer of answers) assert.ok(answer.headers.get('retry-after'), 'a read did nothing: the client may try again');
      for (const { refresh_token } of pairs) assert.equal((await refreshRequest(app, refresh_token!)).status, 200);
    },
  );
});
