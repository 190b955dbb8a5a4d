/**
 * Crash safety (SPEC §1, §4.2): `gatehouse serve` killed with SIGKILL in the middle of a
 * load of code exchanges and refreshes, then restarted on the same database. Every token
 * a client was answered 200 for must still work, and no half-written state may be left —
 * each exchange and rotation commits whole or not at all. And SIGTERM lets the requests in
 * flight finish, then exits 0 — those whose clients hung up too.
 */
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { createAccount } from '../../src/accounts/users.ts';
import { loadConfig } from '../../src/config.ts';
import { createClient } from '../../src/clients/clients.ts';
import { migrate, openStore, type Store } from '../../src/store/database.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { discover, exchangeRequest, obtainCallback, profile, refreshRequest, type App } from '../support/oauth-client.ts';
import { serve, type Serving } from '../support/processes.ts';
import { freePort } from '../support/ports.ts';
import { PASSWORD, type TestServer } from '../support/server.ts';
import { UserAgent, formFields } from '../support/user-agent.ts';
import { until } from '../support/waits.ts';

interface TokenBody {
  access_token: string;
  refresh_token: string;
}

/** A grant as its client holds it: every access token it was given, and its newest refresh token. */
interface Chain {
  accessTokens: string[];
  refreshToken: string;
}

for (const backend of BACKENDS) {
  describe(`crash safety (${backend.name})`, backendOptions(backend), () => {
    let database: { url: string; drop(): Promise<void> };
    let store: Store;
    let env: Record<string, string>;
    let clientId: string;
    let server: Serving | null = null;

    const asTestServer = () => ({ url: server!.url }) as TestServer;

    before(async () => {
      database = await backend.create();
      store = openStore(loadConfig({ DATABASE_URL: database.url }).database);
      await migrate(store);
      await createAccount(store.db, { username: 'alice', email: 'alice@example.com', password: PASSWORD, isAdmin: false }, Date.now());
      // Trusted: no consent page, so each authorization is one request.
      const { client } = await createClient(
        store.db,
        {
          name: 'Loader',
          grantType: 'authorization_code',
          redirectUris: ['http://127.0.0.1:8765/callback'],
          confidential: false,
          trusted: true,
          requirePkce: true,
          scope: '',
        },
        Date.now(),
      );
      clientId = client.id;
      const port = String(await freePort());
      env = {
        DATABASE_URL: database.url,
        PORT: port,
        PUBLIC_URL: `http://127.0.0.1:${port}`,
        LOG_LEVEL: 'warn',
        TOKEN_REQUESTS_PER_CLIENT: '0',
        TOKEN_REQUESTS_PER_ADDRESS: '0',
      };
    });
    after(async () => {
      if (server && server.process.exitCode === null && server.process.signalCode === null) {
        server.process.kill('SIGKILL');
        await server.exited;
      }
      await store?.close();
      await database?.drop();
    });

    test('SIGKILL under load: every token answered with 200 still works after a restart, and nothing is half-written', async () => {
      server = await serve(env);
      const app: App = await discover(asTestServer(), clientId);
      const agent = new UserAgent(server.url);
      await agent.login('alice');

      const chains: Chain[] = [];
      let answered = 0;
      let killed = false;
      const exchangeAndRefresh = async () => {
        while (!killed) {
          try {
            const authorized = await obtainCallback(app, agent);
            const exchanged = await exchangeRequest(app, authorized);
            if (exchanged.status !== 200) throw new Error(`exchange answered ${exchanged.status}`);
            const first = (await exchanged.json()) as TokenBody;
            const chain: Chain = { accessTokens: [first.access_token], refreshToken: first.refresh_token };
            chains.push(chain);
            answered++;
            for (let i = 0; i < 3 && !killed; i++) {
              const refreshed = await refreshRequest(app, chain.refreshToken);
              if (refreshed.status !== 200) throw new Error(`refresh answered ${refreshed.status}`);
              const next = (await refreshed.json()) as TokenBody;
              chain.accessTokens.push(next.access_token);
              chain.refreshToken = next.refresh_token;
              answered++;
            }
          } catch (error) {
            if (killed) return; // the connection died with the server: that answer never came
            throw error;
          }
        }
      };
      const load = Array.from({ length: 6 }, exchangeAndRefresh);
      while (answered < 60) await new Promise((resolve) => setTimeout(resolve, 10));
      killed = true;
      server.process.kill('SIGKILL'); // workers are mid-request
      assert.equal(await server.exited, null);
      await Promise.all(load);

      server = await serve(env);
      const accessTokens = chains.flatMap((chain) => chain.accessTokens);
      assert.ok(accessTokens.length >= 60);
      const statuses = await Promise.all(accessTokens.map(async (token) => (await profile(asTestServer(), token)).status));
      assert.deepEqual(
        statuses.filter((status) => status !== 200),
        [],
        'an access token answered with 200 was lost',
      );
      // The newest refresh token of each chain refreshes. If its own refresh was in flight
      // and committed, the grace window hands the same successor pair out again.
      for (const chain of chains) {
        const refreshed = await refreshRequest(app, chain.refreshToken);
        assert.equal(refreshed.status, 200, JSON.stringify(await refreshed.clone().json()));
        await refreshed.body?.cancel();
      }

      const count = async (query: ReturnType<typeof sql<{ n: number | string }>>) => Number((await query.execute(store.db)).rows[0]!.n);
      assert.equal(
        await count(sql`select count(*) as n from grants g where not exists (select 1 from access_tokens a where a.grant_id = g.id)`),
        0,
        'a grant without an access token',
      );
      assert.equal(
        await count(sql`select count(*) as n from grants g where not exists (select 1 from refresh_tokens r where r.grant_id = g.id)`),
        0,
        'a grant without a refresh token',
      );
      assert.equal(
        await count(sql`select count(*) as n from auth_codes where consumed_at is not null and grant_id is null`),
        0,
        'a consumed code without its grant',
      );
      assert.equal(
        await count(
          sql`select count(*) as n from refresh_tokens r where r.rotated_at is not null and not exists (select 1 from refresh_tokens s where s.hash = r.successor_hash)`,
        ),
        0,
        'a rotation without its successor',
      );
      assert.equal(await count(sql`select count(*) as n from grants where revoked_at is not null`), 0, 'a grant was revoked: some token was seen twice');
      if (backend.name === 'sqlite') {
        const { rows } = await sql<{ integrity_check: string }>`pragma integrity_check`.execute(store.db);
        assert.deepEqual(
          rows.map((row) => row.integrity_check),
          ['ok'],
        );
      }
    });

    test('SIGTERM lets the request in flight finish, then exits 0', async () => {
      const app: App = await discover(asTestServer(), clientId);
      const agent = new UserAgent(server!.url);
      await agent.login('alice');
      const authorized = await obtainCallback(app, agent);
      const body = new URLSearchParams({
        grant_type: 'authorization_code',
        code: authorized.callback.get('code')!,
        redirect_uri: app.redirectUri,
        code_verifier: authorized.verifier,
        client_id: clientId,
      }).toString();

      // The request starts — headers and half the body — before the signal, and ends after it.
      const socket = connect(Number(env.PORT), '127.0.0.1');
      await new Promise((resolve) => socket.once('connect', resolve));
      let answer = '';
      socket.on('data', (chunk) => (answer += chunk));
      const closed = new Promise((resolve) => socket.once('close', resolve));
      socket.write(
        `POST /api/token HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: ${body.length}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n`,
      );
      socket.write(body.slice(0, 20));
      // The server says 100 Continue once it has read the headers: from then on the request is in flight, not an idle connection.
      const CONTINUE = 'HTTP/1.1 100 Continue\r\n\r\n';
      await until('the server has read the headers', () => answer.startsWith(CONTINUE));
      server!.process.kill('SIGTERM');
      await new Promise((resolve) => setTimeout(resolve, 200));
      assert.equal(server!.process.exitCode, null, 'it waits for the request in flight');
      socket.write(body.slice(20)); // not end(): a client that half-closes has given up on the answer
      await closed;
      assert.equal(await server!.exited, 0);

      const final = answer.slice(CONTINUE.length);
      assert.match(
        final,
        /^HTTP\/1\.1 200 /,
        server!.output
          .join('')
          .split('\n')
          .filter((l) => !/"(GET|POST)"/.test(l))
          .join('\n')
          .slice(-3000),
      );
      const tokens = JSON.parse(final.slice(final.indexOf('\r\n\r\n') + 4)) as TokenBody;
      server = await serve(env);
      assert.equal((await profile(asTestServer(), tokens.access_token)).status, 200);
    });

    test('SIGTERM while logins whose clients hung up are still being checked: each is finished and audited before the database closes', async () => {
      server?.process.kill('SIGTERM'); // the one the test before restarted
      await server?.exited;
      const port = String(await freePort());
      // Every attempt is a full password check (no throttle refuses one early): 12 of them queue behind 4 at a time —
      // few enough to finish within the shutdown's 10-second grace on a loaded machine.
      server = await serve({
        ...env,
        PORT: port,
        PUBLIC_URL: `http://127.0.0.1:${port}`,
        LOG_LEVEL: 'info',
        LOGIN_FAILURES_PER_ACCOUNT: '0',
        LOGIN_FAILURES_PER_ADDRESS: '0',
      });
      const agent = new UserAgent(server.url);
      const form = formFields((await agent.visit('/login')).html, '/login');
      const failedBefore = await auditedLoginFailures();
      const attempts = 12;
      const cookie = [...agent.cookies].map(([name, value]) => `${name}=${value}`).join('; ');
      const sockets = Array.from({ length: attempts }, (_, i) => {
        const body = new URLSearchParams(form);
        body.set('username', 'alice');
        body.set('password', `not the password ${i}`);
        const socket = connect(Number(port), '127.0.0.1');
        socket.on('error', () => {});
        const request = `POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: ${cookie}\r\nContent-Type: application/x-www-form-urlencoded\r\n`;
        socket.write(`${request}Content-Length: ${String(body).length}\r\n\r\n${body}`);
        return socket;
      });
      // Once the first check is done every request has long been read, and most still wait for theirs.
      while (!server.stdout.join('').includes('"login failed"')) await new Promise((resolve) => setTimeout(resolve, 5));
      for (const socket of sockets) socket.destroy(); // the clients hang up
      server.process.kill('SIGTERM');
      assert.equal(await server.exited, 0);

      const log = server.stdout
        .join('')
        .split('\n')
        .filter(Boolean)
        .map((line) => JSON.parse(line) as { level: number; msg: string; handlers?: number });
      assert.deepEqual(
        log.filter((line) => line.level >= 50),
        [],
        'nothing failed: the store was open for every handler',
      );
      const waited = log.find((line) => line.msg === 'the handlers under way have finished');
      assert.ok(waited && waited.handlers! > 0, 'shutdown waited for handlers still running');
      assert.equal((await auditedLoginFailures()) - failedBefore, attempts, 'every attempt was checked and audited');
    });

    const auditedLoginFailures = async () =>
      Number(
        (
          await store.db
            .selectFrom('audit_events')
            .select((eb) => eb.fn.countAll().as('n'))
            .where('type', '=', 'login_failed')
            .executeTakeFirstOrThrow()
        ).n,
      );
  });
}
