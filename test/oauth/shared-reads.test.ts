/**
 * Issue 35, item 3: on PostgreSQL, the reads of what a request redeems — a code, a refresh
 * token, the token a revocation names — are shared by the requests that arrive together
 * (src/store/shared-reads.ts): one statement reads the rows of many, and each request gets its
 * own row and its own answer. A read the database holds up holds only the requests that joined
 * it. (SQLite reads in process, one by one, as before: these suites are PostgreSQL's.)
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { backendOptions, postgres } from '../support/backends.ts';
import { scrape } from '../support/metrics.ts';
import { exchangeRequest, obtainCallback, obtainTokens, profile, refreshRequest, revokeToken, tokenResult } from '../support/oauth-client.ts';
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

  test('refreshes, exchanges, unknown tokens and revocations sent at once each get their own answer, in fewer statements than two each', async () => {
    const { app, agent, server } = setup;
    const pairs = await inTurn(12, () => obtainTokens(app, agent));
    const codes = await inTurn(6, () => obtainCallback(app, agent));
    const revoked = await inTurn(4, () => obtainTokens(app, agent));
    // Shaped like refresh tokens, issued by nobody.
    const unknown = pairs.slice(0, 4).map(({ refresh_token }) => refresh_token!.slice(0, -8) + randomBytes(6).toString('base64url'));

    const before = await statementsSoFar();
    const [refreshed, exchanged, refused] = await Promise.all([
      Promise.all(pairs.map(({ refresh_token }) => refreshRequest(app, refresh_token!).then(tokenResult))),
      Promise.all(codes.map((code) => exchangeRequest(app, code).then(tokenResult))),
      Promise.all(unknown.map((token) => refreshRequest(app, token).then(tokenResult))),
      Promise.all(revoked.map(({ refresh_token }) => revokeToken(app, refresh_token!))),
    ]);
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
    // Each refresh rotated its own token: the old one is spent, the new one works.
    for (const [n, pair] of pairs.entries()) {
      assert.equal((await profile(server, refreshed[n]!.body.access_token!)).status, 200);
      assert.notEqual(refreshed[n]!.body.refresh_token, pair.refresh_token);
    }
    await assertWorks(setup, exchanged[0]!.body);
    await assertDead(setup, revoked);
    // Alone, each would read and then write: two statements each, one for an unknown token.
    const alone = 12 * 2 + 6 * 2 + 4 * 1 + 4 * 2;
    assert.ok(sent < alone, `${alone} statements' worth of requests sent ${sent}`);
  });

  test('a read the database holds up holds only its requests: 50 ms later the next one reads beside it, and all are answered', async () => {
    const { app, agent, server } = setup;
    const pairs = await inTurn(3, () => obtainTokens(app, agent));
    const { db } = server.store;
    /**
     * This server's reads of refresh tokens waiting for the lock held below: the reads that begin with
     * the resource server's settings (pg_stat_activity keeps only a statement's first kilobyte).
     */
    const waiting = async () => {
      const { rows } = await sql<{ n: number }>`select count(*)::int as n from pg_stat_activity
        where datname = current_database() and wait_event_type = 'Lock' and query like 'select "resources"."token_format"%'`.execute(db);
      return rows[0]!.n;
    };
    const answers: Array<Promise<{ status: number }>> = [];
    await db.transaction().execute(async (trx) => {
      await sql`lock table refresh_tokens in access exclusive mode`.execute(trx);
      answers.push(refreshRequest(app, pairs[0]!.refresh_token!));
      await until('the first read waits', async () => (await waiting()) === 1);
      answers.push(refreshRequest(app, pairs[1]!.refresh_token!), refreshRequest(app, pairs[2]!.refresh_token!));
      await until('the two later requests read together, beside it', async () => (await waiting()) === 2);
    });
    assert.deepEqual(
      (await Promise.all(answers)).map((answer) => answer.status),
      [200, 200, 200],
    );
  });
});
