import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { COMMAND_LINE } from '../../src/audit.ts';
import { disableUser } from '../../src/accounts/users.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { discover, obtainTokens, revokeToken, type App } from '../support/oauth-client.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';
import { connect, timeToClose } from '../support/ws-client.ts';

for (const backend of BACKENDS) {
  describe(`the real-time API at /ws (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let app: App;

    before(async () => {
      server = await startServer(backend);
      await server.createUser('alice');
      await server.createUser('bob');
      app = await discover(server, (await server.createClient()).client.id);
    });
    after(() => server?.close());

    const tokensFor = (username = 'alice') => obtainTokens(app, new UserAgent(server.url), username);

    test('whoami answers whoyouare with the user id, with the token in the header or the query', async () => {
      const { access_token } = await tokensFor();
      for (const via of ['header', 'query'] as const) {
        const connection = await connect(server.url, access_token, via);
        assert.deepEqual(await connection.ask({ type: 'whoami', id: 7 }), {
          type: 'whoyouare',
          reply_to: 7,
          ok: true,
          userid: `acct:alice@${new URL(server.url).hostname}`,
        });
        assert.deepEqual(await connection.ask({ type: 'ping', id: 8 }), { type: 'pong', reply_to: 8, ok: true });
        assert.equal((await connection.ask('nonsense')).ok, false);
        connection.socket.close();
      }
    });

    test('an invalid, missing or revoked token is refused with 401 before the upgrade', async () => {
      const { access_token } = await tokensFor();
      await revokeToken(app, access_token);
      for (const token of ['gat_not-a-real-token', '', access_token]) {
        await assert.rejects(connect(server.url, token, 'query'), (error: { status: number; headers: Record<string, string> }) => {
          assert.equal(error.status, 401);
          assert.match(error.headers['www-authenticate']!, /error="invalid_token"/);
          return true;
        });
      }
    });

    test('revoking the token closes its sockets with 4001 within a second', async () => {
      const { access_token, refresh_token } = await tokensFor();
      const first = await connect(server.url, access_token);
      const second = await connect(server.url, access_token, 'query');
      await revokeToken(app, refresh_token!);
      for (const connection of [first, second]) {
        const { code, ms } = await timeToClose(connection, 1000);
        assert.equal(code, 4001);
        assert.ok(ms < 1000, `closed after ${Math.round(ms)} ms`);
      }
    });

    test('disabling the user closes their sockets, and only theirs', async () => {
      const bobs = await connect(server.url, (await tokensFor('bob')).access_token);
      const alices = await connect(server.url, (await tokensFor('alice')).access_token);
      const bob = await server.store.db.selectFrom('users').selectAll().where('username', '=', 'bob').executeTakeFirstOrThrow();
      await disableUser(server.app.gatehouse, bob, COMMAND_LINE);
      assert.equal((await timeToClose(bobs, 1000)).code, 4001);
      assert.equal((await alices.ask({ type: 'whoami', id: 1 })).ok, true);
      alices.socket.close();
    });
  });

  describe(`sockets end with their token (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    before(async () => {
      server = await startServer(backend, { ACCESS_TOKEN_TTL: '2' });
      await server.createUser('alice');
    });
    after(() => server?.close());

    test('a socket is closed with 4001 when its access token expires', async () => {
      const app = await discover(server, (await server.createClient()).client.id);
      const { access_token } = await obtainTokens(app, new UserAgent(server.url));
      const connection = await connect(server.url, access_token);
      const { code } = await timeToClose(connection, 3500);
      assert.equal(code, 4001);
    });
  });
}
