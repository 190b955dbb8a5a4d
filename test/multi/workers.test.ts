/**
 * `WORKERS=2`: `gatehouse serve` as a primary and two worker processes on one port, on both
 * backends, without Redis. Every request here opens a connection of its own, which the
 * primary hands to the workers in turn; which worker answered is read from the `pid` of the
 * request's log line (found by the X-Request-Id the test sends), and which worker holds a
 * WebSocket from the kernel's table of TCP connections (/proc), so nothing in the server
 * exists for the test's sake.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { request } from 'node:http';
import { after, before, describe, test } from 'node:test';
import { createAccount } from '../../src/accounts/users.ts';
import { createClient } from '../../src/clients/clients.ts';
import { loadConfig } from '../../src/config.ts';
import { migrate, openStore, type Store } from '../../src/store/database.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { authorizationUrl, discover, type App } from '../support/oauth-client.ts';
import { freePort } from '../support/ports.ts';
import { serve, type Serving } from '../support/processes.ts';
import { PASSWORD, type TestServer } from '../support/server.ts';
import { UserAgent, formFields } from '../support/user-agent.ts';
import { connect, timeToClose, type Connection } from '../support/ws-client.ts';
import { until } from '../support/waits.ts';

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  /** The worker that answered, from its log line. */
  pid: number;
}

for (const backend of BACKENDS) {
  describe(`WORKERS=2 (${backend.name}, no Redis)`, backendOptions(backend), () => {
    let database: { url: string; drop(): Promise<void> };
    let store: Store;
    let server: Serving;
    let app: App;
    let cookie: string;

    /** Log lines so far, parsed. */
    const logLines = () =>
      server.stdout
        .join('')
        .split('\n')
        .filter((line) => line.startsWith('{'))
        .map((line) => JSON.parse(line) as { pid: number; reqId?: string; msg: string });

    /** The pid on the log line of the request with this id (it may take a moment to arrive). */
    async function pidOf(requestId: string): Promise<number> {
      for (let attempt = 0; attempt < 100; attempt++) {
        const line = logLines().find((entry) => entry.reqId === requestId && entry.msg === 'request completed');
        if (line) return line.pid;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      throw new Error(`no log line for request ${requestId}`);
    }

    /** One request on a connection of its own (so the primary picks a worker for it). */
    function send(method: string, path: string, options: { headers?: Record<string, string>; form?: Record<string, string> } = {}): Promise<Answer> {
      const id = randomUUID();
      const body = options.form ? new URLSearchParams(options.form).toString() : undefined;
      const headers = { 'x-request-id': id, ...(body ? { 'content-type': 'application/x-www-form-urlencoded' } : {}), ...options.headers };
      return new Promise((resolve, reject) => {
        const outgoing = request(new URL(path, server.url), { method, headers, agent: false }, (response) => {
          let text = '';
          response.on('data', (chunk) => (text += chunk));
          response.on('end', () => pidOf(id).then((pid) => resolve({ status: response.statusCode!, headers: response.headers, body: text, pid }), reject));
        });
        outgoing.on('error', reject);
        outgoing.end(body);
      });
    }

    /** A fresh code for alice, and the worker that issued it. */
    async function authorize() {
      const authorization = await authorizationUrl(app);
      const answer = await send('GET', authorization.url.pathname + authorization.url.search, { headers: { cookie } });
      assert.equal(answer.status, 302);
      const code = new URL(answer.headers.location as string).searchParams.get('code')!;
      return { code, verifier: authorization.verifier, pid: answer.pid };
    }

    const exchange = (code: { code: string; verifier: string }) =>
      send('POST', '/api/token', {
        form: {
          grant_type: 'authorization_code',
          code: code.code,
          code_verifier: code.verifier,
          client_id: app.client.client_id,
          redirect_uri: app.redirectUri,
        },
      });

    const workerPids = () => [
      ...new Set(
        logLines()
          .filter((line) => line.pid !== server.process.pid)
          .map((line) => line.pid),
      ),
    ];

    before(async () => {
      database = await backend.create();
      store = openStore(loadConfig({ DATABASE_URL: database.url }).database);
      await migrate(store);
      await createAccount(store.db, { username: 'alice', email: 'alice@example.com', password: PASSWORD, isAdmin: false }, Date.now());
      await createAccount(store.db, { username: 'mallory', email: 'mallory@example.com', password: PASSWORD, isAdmin: false }, Date.now());
      const { client } = await createClient(
        store.db,
        {
          name: 'Workers',
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
        WORKERS: '2',
        LOG_LEVEL: 'info',
        LOGIN_FAILURES_PER_ACCOUNT: '4',
      });
      app = await discover({ url: server.url } as TestServer, client.id);
      const agent = new UserAgent(server.url);
      await agent.login('alice');
      cookie = [...agent.cookies].map(([name, value]) => `${name}=${value}`).join('; ');
    });
    after(async () => {
      if (server?.process.exitCode === null) {
        server.process.kill('SIGKILL');
        await server.exited;
      }
      await store?.close();
      await database?.drop();
    });

    test('both workers answer, and the primary serves nothing', async () => {
      // The server counts as started once one worker answers; on a loaded machine the other may
      // still be starting, so the requests go on (ten at a time) until both have answered.
      const pids = new Set<number>();
      await until(
        'both workers have answered',
        async () => {
          const answers = await Promise.all(Array.from({ length: 10 }, () => send('GET', '/_status')));
          assert.deepEqual(new Set(answers.map((answer) => answer.status)), new Set([200]));
          for (const answer of answers) pids.add(answer.pid);
          return pids.size >= 2;
        },
        20,
      );
      assert.equal(pids.size, 2, `answered by ${[...pids].join(', ')}`);
      assert.ok(!pids.has(server.process.pid!));
    });

    test('a code issued by one worker is exchanged at the other', async () => {
      let across = 0;
      for (let attempt = 0; attempt < 10 && across === 0; attempt++) {
        const code = await authorize();
        const exchanged = await exchange(code);
        assert.equal(exchanged.status, 200, exchanged.body);
        if (exchanged.pid !== code.pid) across++;
      }
      assert.equal(across, 1, 'no exchange landed on the other worker in 10 tries');
    });

    test('20 simultaneous exchanges of one code, spread over both workers: exactly one 200', async () => {
      const code = await authorize();
      const answers = await Promise.all(Array.from({ length: 20 }, () => exchange(code)));
      assert.deepEqual(answers.map((answer) => answer.status).sort(), [200, ...Array(19).fill(400)]);
      assert.equal(new Set(answers.map((answer) => answer.pid)).size, 2);
    });

    test('a revocation through one worker closes the WebSockets held by both within 2 s', async () => {
      const tokens = JSON.parse((await exchange(await authorize())).body) as { access_token: string };
      // Open sockets until each worker holds one (the primary alternates, so two usually do).
      const held = new Map<number, Connection>();
      const extra: Connection[] = [];
      for (let attempt = 0; attempt < 10 && held.size < 2; attempt++) {
        const socket = await connect(server.url, tokens.access_token);
        const pid = holderOf(socket, Number(new URL(server.url).port), workerPids());
        if (held.has(pid)) extra.push(socket);
        else held.set(pid, socket);
      }
      assert.equal(held.size, 2, 'both workers hold a socket');
      const revoked = await send('POST', '/oauth/revoke', { form: { token: tokens.access_token, client_id: app.client.client_id } });
      assert.equal(revoked.status, 200);
      for (const [pid, socket] of held) {
        const { code, ms } = await timeToClose(socket, 2000);
        assert.equal(code, 4001, `socket on ${pid === revoked.pid ? 'the revoking' : 'the other'} worker`);
        assert.ok(ms < 2000);
      }
      await Promise.all(extra.map((socket) => timeToClose(socket, 2000)));
    });

    test('failed logins are counted once for all workers', async () => {
      // One form for every attempt: each post then goes to whichever worker is next.
      const page = await send('GET', '/login');
      const fields = formFields(page.body, '/login');
      fields.set('username', 'mallory');
      fields.set('password', 'wrong password!');
      const csrf = (page.headers['set-cookie'] as string[]).map((line) => line.split(';')[0]).join('; ');
      const attempt = () => send('POST', '/login', { headers: { cookie: csrf }, form: Object.fromEntries(fields) });
      const answers = [];
      for (let i = 0; i < 5; i++) answers.push(await attempt());
      assert.deepEqual(
        answers.map((answer) => answer.status),
        [401, 401, 401, 401, 429],
      );
      assert.equal(new Set(answers.map((answer) => answer.pid)).size, 2, 'the failures were spread over both workers');
    });

    test('a killed worker is replaced; SIGTERM stops them all and the primary exits 0', async () => {
      const [victim] = workerPids();
      process.kill(victim!, 'SIGKILL');
      let replaced = false;
      for (let attempt = 0; attempt < 100 && !replaced; attempt++) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        const answers = await Promise.all(Array.from({ length: 4 }, () => send('GET', '/_status')));
        const pids = new Set(answers.map((answer) => answer.pid));
        replaced = pids.size === 2 && !pids.has(victim!) && answers.every((answer) => answer.status === 200);
      }
      assert.ok(replaced, 'two workers answer again, neither of them the killed one');
      assert.ok(logLines().some((line) => line.pid === server.process.pid && /a worker exited .*starting another/.test(line.msg)));

      server.process.kill('SIGTERM');
      assert.equal(await server.exited, 0);
      const stopped = logLines().filter((line) => /SIGTERM: finishing in-flight requests/.test(line.msg));
      assert.equal(stopped.length, 2, 'both workers stopped in order');
    });
  });
}

/**
 * The worker (among `pids`) that holds the server end of this WebSocket's TCP connection:
 * the connection's socket inode from /proc/net/tcp{,6}, then the process with that inode
 * among its open files.
 */
function holderOf(connection: Connection, serverPort: number, pids: number[]): number {
  const clientPort = (connection.socket as unknown as { _socket: { localPort: number } })._socket.localPort;
  const hex = (port: number) => port.toString(16).toUpperCase().padStart(4, '0');
  const inodes = ['/proc/net/tcp', '/proc/net/tcp6'].flatMap((table) =>
    readFileSync(table, 'utf8')
      .split('\n')
      .slice(1)
      .map((row) => row.trim().split(/\s+/))
      .filter((fields) => fields[1]?.endsWith(`:${hex(serverPort)}`) && fields[2]?.endsWith(`:${hex(clientPort)}`))
      .map((fields) => fields[9]),
  );
  assert.equal(inodes.length, 1, `the server end of the connection from port ${clientPort}`);
  const target = (path: string) => {
    try {
      return readlinkSync(path);
    } catch {
      return null; // closed since the directory was read
    }
  };
  const holder = pids.find((pid) => readdirSync(`/proc/${pid}/fd`).some((fd) => target(`/proc/${pid}/fd/${fd}`) === `socket:[${inodes[0]}]`));
  assert.ok(holder !== undefined, 'a worker holds the connection');
  return holder;
}
