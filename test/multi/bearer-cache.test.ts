/**
 * Issue 35, item 3: on PostgreSQL an instance keeps its bearer checks' answers in memory
 * (src/bearer-token-cache.ts), and still "revoked at one instance is dead at all of them at
 * once" (SPEC §1). Each test first has instance B answer a token from a read, so that B holds
 * it; then changes it elsewhere — a revocation at instance A, the command line in a process of
 * its own — and calls B in the same moment, with no wait. Also with every LISTEN connection of
 * the fan-out cut, and after they reconnect: the kept answers do not depend on the fan-out.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'kysely';
import * as oauth from 'oauth4webapi';
import { backendOptions, postgres } from '../support/backends.ts';
import { startCluster, type Cluster } from '../support/instances.ts';
import { authorizationUrl, insecure, type App } from '../support/oauth-client.ts';
import { gatehouse } from '../support/processes.ts';
import { UserAgent } from '../support/user-agent.ts';
import { until } from '../support/waits.ts';
import { purgeAfterFor } from '../../src/store/grants.ts';

const A = 0;
const B = 1;

describe('instances on PostgreSQL keep bearer answers, and a revocation anywhere reaches them at once', backendOptions(postgres), () => {
  let cluster: Cluster;
  let databaseUrl: string;
  let clientId: string;
  let apps: App[];

  before(async () => {
    cluster = await startCluster(2, { REFRESH_GRACE_SECONDS: '0' }, (url) => (databaseUrl = url));
    await cluster.createUser('alice');
    await cluster.createUser('bob');
    clientId = (await cluster.createClient()).client.id;
    apps = await Promise.all(cluster.instances.map((instance) => appAt(instance.url)));
  });
  after(() => cluster?.close());

  async function appAt(base: string): Promise<App> {
    const issuer = new URL(cluster.publicUrl);
    const as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }));
    return {
      as: { ...as, token_endpoint: `${base}/api/token`, revocation_endpoint: `${base}/oauth/revoke` },
      client: { client_id: clientId },
      auth: oauth.None(),
      redirectUri: 'http://127.0.0.1:8765/callback',
    };
  }

  /** Tokens for `username`, the code obtained and exchanged at A (by the cluster's client, or another). */
  async function tokensFor(username: string, client = clientId) {
    const app = { ...apps[A]!, client: { client_id: client } };
    const authorization = await authorizationUrl(app);
    const outcome = await new UserAgent(cluster.instances[A]!.url).authorize(authorization.url.pathname + authorization.url.search, { username });
    const callback = oauth.validateAuthResponse(app.as, app.client, outcome.redirect!, authorization.state);
    const response = await oauth.authorizationCodeGrantRequest(app.as, app.client, app.auth, callback, app.redirectUri, authorization.verifier, insecure);
    return oauth.processAuthorizationCodeResponse(app.as, app.client, response);
  }

  const profileAt = async (instance: number, token: string, signal?: AbortSignal) => {
    const response = await fetch(`${cluster.instances[instance]!.url}/api/profile`, { headers: { authorization: `Bearer ${token}` }, signal });
    return { status: response.status, body: response.status === 200 ? ((await response.json()) as { username: string; display_name?: string }) : null };
  };

  /** B answers the token from a read, then from what it kept. */
  async function heldByB(token: string) {
    for (let call = 0; call < 2; call++) assert.equal((await profileAt(B, token)).status, 200);
  }

  const command = async (...args: string[]) => {
    const run = await gatehouse(args, { DATABASE_URL: databaseUrl, PUBLIC_URL: cluster.publicUrl });
    assert.equal(run.code, 0, run.stderr);
  };

  /** The statements an instance has sent to the database so far, from its /metrics. */
  async function statementsOf(instance: number): Promise<number> {
    const text = await (await fetch(`${cluster.instances[instance]!.url}/metrics`)).text();
    return Number(/^gatehouse_database_statements_total (\d+)$/m.exec(text)![1]);
  }

  async function revokedAtAThenRefusedAtB(rounds: number) {
    for (let round = 0; round < rounds; round++) {
      const tokens = await tokensFor('alice');
      await heldByB(tokens.access_token);
      const app = apps[A]!;
      await oauth.processRevocationResponse(await oauth.revocationRequest(app.as, app.client, app.auth, tokens.refresh_token!, insecure));
      assert.equal((await profileAt(B, tokens.access_token)).status, 401, `round ${round}: B still answered a token revoked at A`);
    }
  }

  test('a token revoked at A is refused at B in the same moment, round after round', () => revokedAtAThenRefusedAtB(10));

  test('with the fan-out cut, and after it reconnects, a token revoked at A is still refused at B at once', async () => {
    const { db } = cluster.store;
    // This cluster's database only: other suites' servers and commands listen on the same PostgreSQL.
    const listeners = async () =>
      (await sql<{ pid: number }>`select pid from pg_stat_activity where datname = current_database() and query ilike 'LISTEN%'`.execute(db)).rows;
    const cut = await listeners();
    assert.ok(cut.length >= 2, 'each instance listens');
    for (const { pid } of cut) await sql`select pg_terminate_backend(${pid})`.execute(db);
    await revokedAtAThenRefusedAtB(3); // while they reconnect (a second later)
    await until('the LISTEN connections are back', async () => (await listeners()).length >= cut.length);
    await revokedAtAThenRefusedAtB(3);
  });

  test('a person disabled from the command line is refused at B at once, and a renamed one answered with the new name', async () => {
    const bobs = await tokensFor('bob');
    await heldByB(bobs.access_token);
    await command('user', 'update', 'bob', '--name', 'Robert');
    assert.equal((await profileAt(B, bobs.access_token)).body?.display_name, 'Robert');
    await command('user', 'disable', 'bob');
    assert.equal((await profileAt(B, bobs.access_token)).status, 401);
  });

  test('a client deleted from the command line: its tokens, in several shards, are refused at B at once', async () => {
    const other = (await cluster.createClient()).client.id;
    const tokens = await Promise.all([1, 2, 3, 4].map(() => tokensFor('alice', other)));
    for (const { access_token } of tokens) await heldByB(access_token);
    await command('client', 'delete', other);
    for (const { access_token } of tokens) assert.equal((await profileAt(B, access_token)).status, 401);
  });

  test("a grant deleted past its expiry (the purge's work) grows no counter; one deleted while live grows its shard's", async () => {
    const db = cluster.store.db;
    const alice = await db.selectFrom('users').select('id').where('username', '=', 'alice').executeTakeFirstOrThrow();
    const counted = async () => Number((await sql<{ n: string }>`select sum(epoch) as n from token_epochs`.execute(db)).rows[0]!.n);
    const now = Date.now();
    const grant = (expiresAt: number) => ({
      id: randomUUID(),
      client_id: clientId,
      user_id: alice.id,
      resource_id: 'builtin',
      scopes: 'annotation:read',
      created_at: now - 1000,
      last_used_at: now - 1000,
      expires_at: expiresAt,
      purge_after: purgeAfterFor(expiresAt),
    });
    const [expired, live] = [grant(now - 1000), grant(now + 60_000)];
    await db.insertInto('grants').values([expired, live]).execute();
    const before = await counted();
    await db.deleteFrom('grants').where('id', '=', expired.id).execute();
    assert.equal(await counted(), before, 'an expired grant deleted');
    await db.deleteFrom('grants').where('id', '=', live.id).execute();
    assert.equal(await counted(), before + 1, 'a live grant deleted');
  });

  test('a refresh token replayed at A revokes its grant, and B refuses the access token it held at once', async () => {
    const app = apps[A]!;
    const first = await tokensFor('alice');
    const refreshed = await oauth.processRefreshTokenResponse(
      app.as,
      app.client,
      await oauth.refreshTokenGrantRequest(app.as, app.client, app.auth, first.refresh_token!, insecure),
    );
    await heldByB(refreshed.access_token);
    const replay = await oauth.refreshTokenGrantRequest(app.as, app.client, app.auth, first.refresh_token!, insecure);
    assert.equal(replay.status, 400);
    assert.equal((await profileAt(B, refreshed.access_token)).status, 401);
  });

  test('while B answers a stream of requests for the token, every one sent after A answered its revocation is refused', async () => {
    const tokens = await tokensFor('alice');
    await heldByB(tokens.access_token);
    let revokedAt = Infinity;
    const sentLater: number[] = [];
    // Each stream sends until it has sent five requests after the revocation was answered.
    const stream = async () => {
      for (let later = 0; later < 5;) {
        const sentAt = performance.now();
        const { status } = await profileAt(B, tokens.access_token);
        if (sentAt > revokedAt) {
          sentLater.push(status);
          later++;
        }
      }
    };
    const streams = Array.from({ length: 8 }, stream);
    await sleep(200);
    const app = apps[A]!;
    await oauth.processRevocationResponse(await oauth.revocationRequest(app.as, app.client, app.auth, tokens.refresh_token!, insecure));
    revokedAt = performance.now();
    await Promise.all(streams);
    assert.deepEqual([...new Set(sentLater)], [401]);
  });

  test('a kept answer does not read the token again: B answers a token it holds while the tokens table is locked', async () => {
    const [held, fresh] = await Promise.all([tokensFor('alice'), tokensFor('alice')]);
    await heldByB(held.access_token);
    await cluster.store.db.transaction().execute(async (trx) => {
      await sql`lock table access_tokens in access exclusive mode`.execute(trx);
      const waited = await fetch(`${cluster.instances[B]!.url}/api/profile`, {
        headers: { authorization: `Bearer ${fresh.access_token}` },
        signal: AbortSignal.timeout(1000),
      }).then(
        () => false,
        (error: Error) => error.name === 'TimeoutError',
      );
      assert.ok(waited, 'a token B does not hold waits for the table');
      assert.equal((await profileAt(B, held.access_token, AbortSignal.timeout(5000))).status, 200);
    });
    assert.equal((await profileAt(B, fresh.access_token)).status, 200);
  });

  test('a database slow to answer gets at most two reads of the counters at once; the requests after them read their tokens, and all are answered', async () => {
    const tokens = await tokensFor('alice');
    await heldByB(tokens.access_token);
    /** B's statements waiting for the lock held below: reads of the counters, or of a token (which joins its counter). */
    const waiting = async (statement: 'counters' | 'token') => {
      const pattern = statement === 'counters' ? 'select "shard", "epoch" from "token_epochs"%' : '%from "access_tokens"%';
      const { rows } = await sql<{ n: number }>`select count(*)::int as n from pg_stat_activity
        where datname = current_database() and wait_event_type = 'Lock' and query like ${pattern}`.execute(cluster.store.db);
      return rows[0]!.n;
    };
    const answers: Array<Promise<{ status: number }>> = [];
    await cluster.store.db.transaction().execute(async (trx) => {
      await sql`lock table token_epochs in access exclusive mode`.execute(trx);
      answers.push(profileAt(B, tokens.access_token));
      await until('the first read of the counters waits', async () => (await waiting('counters')) === 1);
      // Not waited for past 50 ms: the next request's read starts beside it.
      answers.push(profileAt(B, tokens.access_token));
      await until('a second read of the counters waits beside it', async () => (await waiting('counters')) === 2);
      // With two under way, the database is slow: these requests read their tokens, as without kept answers.
      for (let n = 0; n < 4; n++) answers.push(profileAt(B, tokens.access_token));
      await until('the four later requests read their tokens', async () => (await waiting('token')) === 4);
      assert.equal(await waiting('counters'), 2, 'no third read of the counters');
    });
    assert.deepEqual(
      (await Promise.all(answers)).map((answer) => answer.status),
      Array(6).fill(200),
    );
  });

  test('requests for kept tokens that arrive together share their reads of the database', async () => {
    const tokens = await Promise.all([tokensFor('alice'), tokensFor('alice')]);
    for (const { access_token } of tokens) await heldByB(access_token);
    const before = await statementsOf(B);
    const calls = 50;
    const answers = await Promise.all(Array.from({ length: calls }, (_, n) => profileAt(B, tokens[n % 2]!.access_token)));
    assert.deepEqual(
      answers.map((answer) => answer.status),
      Array(calls).fill(200),
    );
    const sent = (await statementsOf(B)) - before;
    assert.ok(sent < calls, `${calls} checks sent ${sent} statements`);
  });
});
