/**
 * Redis going away under a running server (issue 11 item 12, SPEC §5): the throttled
 * endpoints (login, token) answer 503 at once — not after ioredis has queued and retried for
 * seconds — every other endpoint keeps working, the errors are logged as JSON lines through
 * the app's logger (nothing on stderr, no stack trace), a revocation whose fan-out cannot be
 * sent does not crash the process, the server recovers by itself when Redis is back, and
 * SIGTERM still exits 0.
 *
 * The test runs a Redis of its own (`redis-server` on a free port) and kills it; when the
 * binary is missing the suite is skipped with the reason, or fails under CI=true.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { connect } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { createAccount } from '../../src/accounts/users.ts';
import { loadConfig } from '../../src/config.ts';
import { createClient } from '../../src/clients/clients.ts';
import { migrate, openStore, type Store } from '../../src/store/database.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { discover, obtainTokens, postForm, profile, type App } from '../support/oauth-client.ts';
import { freePort } from '../support/ports.ts';
import { serve, type Serving } from '../support/processes.ts';
import { PASSWORD, type TestServer } from '../support/server.ts';
import { UserAgent, formFields } from '../support/user-agent.ts';

const REDIS_SERVER = 'redis-server';
const redisMissing = spawnSync(REDIS_SERVER, ['--version']).error
  ? `${REDIS_SERVER} is not on PATH (install it with: apt-get install -y redis-server)`
  : undefined;
if (redisMissing && process.env.CI === 'true') throw new Error(`CI=true: a missing test service is a failure: ${redisMissing}`);

/** Answers within this long, Redis down (SPEC §5: "quickly (within a second)"). */
const QUICKLY_MS = 1000;

/** A throw-away Redis: no persistence, loopback only. */
async function startRedis(port: number): Promise<ChildProcess> {
  const child = spawn(REDIS_SERVER, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
  await redisReady(port);
  return child;
}

async function stopRedis(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGKILL');
  await new Promise((resolve) => child.once('exit', resolve));
}

/** Resolves once a Redis on `port` answers PING. */
async function redisReady(port: number): Promise<void> {
  for (let attempt = 0; attempt < 100; attempt++) {
    const pong = await new Promise<boolean>((resolve) => {
      const socket = connect({ host: '127.0.0.1', port });
      socket.once('connect', () => socket.write('PING\r\n'));
      socket.once('data', (data) => (socket.destroy(), resolve(String(data).startsWith('+PONG'))));
      socket.once('error', () => (socket.destroy(), resolve(false)));
    });
    if (pong) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`redis-server on port ${port} did not come up`);
}

/** Sends a request and measures how long the whole answer took. */
async function timed(send: () => Promise<Response>): Promise<{ status: number; ms: number }> {
  const start = performance.now();
  const response = await send();
  await response.arrayBuffer();
  return { status: response.status, ms: Math.round(performance.now() - start) };
}

for (const backend of BACKENDS) {
  describe(`Redis outage (${backend.name})`, redisMissing ? { skip: `redis unavailable: ${redisMissing}` } : backendOptions(backend), () => {
    let database: { url: string; drop(): Promise<void> };
    let store: Store;
    let redis: ChildProcess | undefined;
    let redisPort: number;
    let server: Serving | undefined;
    let app: App;

    before(async () => {
      redisPort = await freePort();
      redis = await startRedis(redisPort);

      database = await backend.create();
      store = openStore(loadConfig({ DATABASE_URL: database.url }).database);
      await migrate(store);
      await createAccount(store.db, { username: 'alice', email: 'alice@example.com', password: PASSWORD, isAdmin: true }, Date.now());
      const { client } = await createClient(
        store.db,
        {
          name: 'Reader',
          grantType: 'authorization_code',
          redirectUris: ['http://127.0.0.1:8765/callback'],
          confidential: false,
          trusted: true,
          requirePkce: true,
          scope: '',
        },
        Date.now(),
      );
      const port = String(await freePort());
      server = await serve({
        DATABASE_URL: database.url,
        PORT: port,
        PUBLIC_URL: `http://127.0.0.1:${port}`,
        REDIS_URL: `redis://127.0.0.1:${redisPort}`,
        LOG_LEVEL: 'info',
        PURGE_INTERVAL_SECONDS: '0',
      });
      app = await discover({ url: server.url } as TestServer, client.id);
    });
    after(async () => {
      if (server && server.process.exitCode === null && server.process.signalCode === null) {
        server.process.kill('SIGKILL');
        await server.exited;
      }
      if (redis) await stopRedis(redis);
      await store?.close();
      await database?.drop();
    });

    test('throttled endpoints answer 503 within a second, the rest keeps working, the log stays JSON, it recovers when Redis is back, SIGTERM exits 0', async (t) => {
      const asTestServer = { url: server!.url } as TestServer;
      const agent = new UserAgent(server!.url);
      const tokens = await obtainTokens(app, agent); // logs in and exchanges a code while Redis is up
      const stranger = new UserAgent(server!.url);
      const login = async () => {
        const page = await stranger.visit('/login');
        const form = formFields(page.html, '/login');
        form.set('username', 'nobody');
        form.set('password', 'not the password');
        return timed(() => stranger.fetch('/login', { method: 'POST', body: form }));
      };
      const tokenRequest = () =>
        timed(() => postForm(asTestServer, '/api/token', { grant_type: 'authorization_code', code: `gac_${'A'.repeat(43)}`, client_id: app.client.client_id }));
      assert.equal((await login()).status, 401, 'Redis up: a wrong password is refused as such');
      assert.equal((await tokenRequest()).status, 400, 'Redis up: an unknown code is refused as such');

      await stopRedis(redis!);

      // Right after the connection dropped, and later while ioredis keeps trying to reconnect.
      const diedAt = performance.now();
      const answers: Array<{ request: string; after: number; status: number; ms: number }> = [];
      const requests = [
        ['POST /login', login, 503],
        ['POST /api/token', tokenRequest, 503],
        ['GET /_status', () => timed(() => fetch(`${server!.url}/_status`)), 200],
        ['GET /.well-known/oauth-authorization-server', () => timed(() => fetch(`${server!.url}/.well-known/oauth-authorization-server`)), 200],
      ] as const;
      for (const pause of [0, 1500, 1500]) {
        await new Promise((resolve) => setTimeout(resolve, pause));
        for (const [request, send] of requests) answers.push({ request, after: Math.round(performance.now() - diedAt), ...(await send()) });
      }
      t.diagnostic(`answers with Redis down (after: ms since it died): ${JSON.stringify(answers)}`);
      assert.deepEqual(
        answers.map(({ request, status, ms }) => ({ request, status, quick: ms < QUICKLY_MS })),
        answers.map(({ request }) => ({ request, status: requests.find(([name]) => name === request)![2], quick: true })),
        `answers with Redis down (after: ms since it died): ${JSON.stringify(answers)}`,
      );
      // A bearer check reads the database alone; a revocation whose fan-out cannot reach
      // Redis is still made (and logged), and the process lives on.
      assert.equal((await profile(asTestServer, tokens.access_token)).status, 200);
      assert.equal((await postForm(asTestServer, '/oauth/revoke', { token: tokens.refresh_token!, client_id: app.client.client_id })).status, 200);
      assert.equal((await profile(asTestServer, tokens.access_token)).status, 401);
      assert.equal((await fetch(`${server!.url}/_status`)).status, 200);

      // Redis back: the server reconnects by itself, and throttling answers as before.
      redis = await startRedis(redisPort);
      const backBy = performance.now() + 5000;
      while ((await tokenRequest()).status !== 400) {
        assert.ok(performance.now() < backBy, 'the token endpoint works again within 5 s of Redis coming back');
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
      assert.equal((await login()).status, 401);

      server!.process.kill('SIGTERM');
      assert.equal(await server!.exited, 0, `exit code; output:\n${server!.output.join('')}`);
      const output = server!.output.join('');
      assert.doesNotMatch(output, /^\s+at /m, 'no stack trace');
      assert.doesNotMatch(output, /\[ioredis\]/, 'ioredis writes nothing of its own');
      const lines = server!.stdout
        .join('')
        .split('\n')
        .filter((line) => line !== '');
      const log = lines.map((line) => {
        try {
          return JSON.parse(line) as { level: number; msg: string };
        } catch {
          return assert.fail(`stdout has a line that is not JSON: ${line}`);
        }
      });
      assert.ok(
        log.some((line) => line.level >= 40 && /redis/i.test(line.msg)),
        'the outage is logged',
      );
      assert.ok(
        log.some((line) => line.level === 30 && /redis is reachable again/i.test(line.msg)),
        'and the recovery',
      );
    });
  });
}
