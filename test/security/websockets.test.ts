/**
 * Attacks on and faults of the real-time API (SPEC §4.4, issue 11 items 4, 10 and 15):
 * revocations made by the command line in another process, one token opening sockets
 * without end, oversized messages, message floods, and access tokens that live longer
 * than a timer can wait.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { discover, obtainTokens, type App } from '../support/oauth-client.ts';
import { databaseUrl, gatehouse } from '../support/processes.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';
import { connect, timeToClose } from '../support/ws-client.ts';

const SOCKETS_PER_GRANT = 20;

for (const backend of BACKENDS) {
  describe(`WebSockets under attack (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let app: App;

    before(async () => {
      server = await startServer(backend);
      await server.createUser('alice');
      app = await discover(server, (await server.createClient()).client.id);
    });
    after(() => server?.close());

    const accessToken = async () => (await obtainTokens(app, new UserAgent(server.url), 'alice')).access_token;

    test(`one grant opens at most ${SOCKETS_PER_GRANT} sockets: the next is refused with 429 before the upgrade, until one closes`, async () => {
      const token = await accessToken();
      const attempts = await Promise.allSettled(Array.from({ length: SOCKETS_PER_GRANT + 1 }, () => connect(server.url, token)));
      const opened = attempts.filter((a) => a.status === 'fulfilled').map((a) => a.value);
      const refused = attempts.filter((a) => a.status === 'rejected').map((a) => a.reason as { status: number });
      assert.equal(opened.length, SOCKETS_PER_GRANT);
      assert.deepEqual(
        refused.map((r) => r.status),
        [429],
      );
      await assert.rejects(connect(server.url, token, 'query'), { status: 429 });

      // A closed socket gives its place back.
      opened.pop()!.socket.close();
      const replacement = await retry(() => connect(server.url, token));
      assert.equal((await replacement.ask({ type: 'whoami', id: 1 })).ok, true);
      for (const connection of [...opened, replacement]) connection.socket.close();
    });

    test('a message over 16 KiB closes the socket with 1009; one of 16 KiB is answered', async () => {
      const connection = await connect(server.url, await accessToken());
      // A whoami padded to exactly `bytes` bytes of JSON.
      const padded = (bytes: number) => ({ type: 'whoami', id: 1, padding: 'x'.repeat(bytes - JSON.stringify({ type: 'whoami', id: 1, padding: '' }).length) });
      assert.equal((await connection.ask(padded(16 * 1024))).ok, true);
      connection.socket.send(JSON.stringify(padded(17 * 1024)));
      assert.equal((await timeToClose(connection, 2000)).code, 1009);
    });

    test('100 messages in 10 seconds are answered; the 101st closes the socket with 1008', async () => {
      const connection = await connect(server.url, await accessToken());
      const answers: unknown[] = [];
      connection.socket.on('message', (data) => answers.push(JSON.parse(String(data))));
      for (let id = 1; id <= 100; id++) connection.socket.send(JSON.stringify({ type: 'ping', id }));
      while (answers.length < 100) await sleep(10);
      connection.socket.send(JSON.stringify({ type: 'ping', id: 101 }));
      assert.equal((await timeToClose(connection, 2000)).code, 1008);
      assert.equal(answers.length, 100);
    });

    test('a flood of 2,000 messages at once is cut off at 100 answers', async () => {
      const connection = await connect(server.url, await accessToken());
      let answers = 0;
      connection.socket.on('message', () => answers++);
      for (let id = 1; id <= 2000; id++) connection.socket.send(JSON.stringify({ type: 'whoami', id }));
      assert.equal((await timeToClose(connection, 2000)).code, 1008);
      assert.ok(answers <= 100, `${answers} messages answered`);
    });

    test('the command line disabling the user, in another process, closes their sockets with 4001 within two seconds', async () => {
      await server.createUser('carol');
      const connection = await connect(server.url, (await obtainTokens(app, new UserAgent(server.url), 'carol')).access_token);
      const run = await gatehouse(['user', 'disable', 'carol'], { DATABASE_URL: databaseUrl(server.config) });
      assert.equal(run.code, 0, run.stderr);
      const { code, ms } = await timeToClose(connection, 3000);
      assert.equal(code, 4001);
      assert.ok(ms < 2500, `closed after ${Math.round(ms)} ms`);
    });

    test('a revocation whose fan-out message was lost (written to the database alone) closes the socket with 4001 within two seconds', async () => {
      const dave = await server.createUser('dave');
      const connection = await connect(server.url, (await obtainTokens(app, new UserAgent(server.url), 'dave')).access_token);
      const bystander = await connect(server.url, await accessToken());
      await server.store.db.updateTable('grants').set({ revoked_at: Date.now() }).where('user_id', '=', dave.id).execute();
      const { code, ms } = await timeToClose(connection, 3000);
      assert.equal(code, 4001);
      assert.ok(ms < 2500, `closed after ${Math.round(ms)} ms`);
      assert.equal((await bystander.ask({ type: 'whoami', id: 1 })).ok, true);
      bystander.socket.close();
    });

    test('the command line deleting the client, in another process, closes its sockets with 4001 within two seconds', async () => {
      const { client } = await server.createClient();
      const doomed = await discover(server, client.id);
      const connection = await connect(server.url, (await obtainTokens(doomed, new UserAgent(server.url), 'alice')).access_token);
      const bystander = await connect(server.url, await accessToken());
      const run = await gatehouse(['client', 'delete', client.id], { DATABASE_URL: databaseUrl(server.config) });
      assert.equal(run.code, 0, run.stderr);
      const { code, ms } = await timeToClose(connection, 3000);
      assert.equal(code, 4001);
      assert.ok(ms < 2500, `closed after ${Math.round(ms)} ms`);
      assert.equal((await bystander.ask({ type: 'whoami', id: 1 })).ok, true);
      bystander.socket.close();
    });
  });

  describe(`a socket of a long-lived access token (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    before(async () => {
      server = await startServer(backend, { ACCESS_TOKEN_TTL: String(30 * 24 * 3600) });
      await server.createUser('alice');
    });
    after(() => server?.close());

    test('stays open and answers when the token lives 30 days (longer than a timer can wait)', async () => {
      const app = await discover(server, (await server.createClient()).client.id);
      const connection = await connect(server.url, (await obtainTokens(app, new UserAgent(server.url))).access_token);
      const closedEarly = connection.closed.then((code) => assert.fail(`closed with ${code}`));
      await Promise.race([sleep(1500), closedEarly]);
      assert.equal((await Promise.race([connection.ask({ type: 'whoami', id: 1 }), closedEarly])).ok, true);
      connection.socket.close();
    });
  });
}

/** The server frees a closed socket's place when it sees the close: try again briefly. */
async function retry<T>(attempt: () => Promise<T>): Promise<T> {
  for (let tries = 1; ; tries++) {
    try {
      return await attempt();
    } catch (error) {
      if (tries === 20) throw error;
      await sleep(50);
    }
  }
}
