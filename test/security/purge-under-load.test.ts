/**
 * A purge of many expired rows by `gatehouse purge` — a second process, as cron runs it —
 * while the server works (issue 11, "Also"). The purge deletes in short batches with rests
 * between them, and on SQLite the server waits for another connection's write lock without
 * blocking its thread, so requests keep completing during the purge and none fails.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { DatabaseSync } from 'node:sqlite';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import type { Insertable } from 'kysely';
import type { AccessTokensTable, GrantsTable, RefreshTokensTable } from '../../src/store/schema.ts';
import { purgeAfterFor } from '../../src/store/grants.ts';
import { mintToken } from '../../src/tokens.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { discover, obtainTokens, profile, refreshRequest, type App } from '../support/oauth-client.ts';
import { databaseUrl } from '../support/processes.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';

const MAIN = fileURLToPath(new URL('../../bin/gatehouse.js', import.meta.url));
const EXPIRED_GRANTS = 10_000; // 30,000 expired rows: a grant with an access and a refresh token each
const WORKERS = 4;
/** Requests that must complete while the purge process runs. */
const DURING = 50;
const DAY = 24 * 3600_000;

for (const backend of BACKENDS) {
  describe(`a purge from another process under load (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let app: App;

    before(async () => {
      server = await startServer(backend, { TOKEN_REQUESTS_PER_CLIENT: '0', TOKEN_REQUESTS_PER_ADDRESS: '0' });
      const user = await server.createUser('alice');
      const client = (await server.createClient({ name: 'Annotator' })).client;
      app = await discover(server, client.id);
      const expiredAt = Date.now() - 2 * DAY; // past the access tokens' extra day too
      for (let done = 0; done < EXPIRED_GRANTS; done += 500) {
        const grants: Insertable<GrantsTable>[] = [];
        const access: Insertable<AccessTokensTable>[] = [];
        const refresh: Insertable<RefreshTokensTable>[] = [];
        for (let i = 0; i < 500; i++) {
          const id = randomUUID();
          grants.push({
            id,
            client_id: client.id,
            user_id: user.id,
            resource_id: 'builtin',
            scopes: '',
            created_at: expiredAt - DAY,
            last_used_at: expiredAt - DAY,
            revoked_at: null,
            expires_at: expiredAt,
            purge_after: purgeAfterFor(expiredAt),
          });
          access.push({ hash: mintToken('access').hash, grant_id: id, scopes: '', created_at: expiredAt - DAY, expires_at: expiredAt });
          refresh.push({ hash: mintToken('refresh').hash, grant_id: id, created_at: expiredAt - DAY, expires_at: expiredAt });
        }
        await server.store.db.transaction().execute(async (trx) => {
          await trx.insertInto('grants').values(grants).execute();
          await trx.insertInto('access_tokens').values(access).execute();
          await trx.insertInto('refresh_tokens').values(refresh).execute();
        });
      }
    });
    after(() => server?.close());

    if (backend.name === 'sqlite') {
      test('a write that meets another connection’s write lock waits without holding the thread', async () => {
        const tokens = await obtainTokens(app, new UserAgent(server.url));
        // What a purge batch does while it runs: hold the database's only write lock. Here the
        // holder shares the server's thread, so it can let go only if that thread is free.
        const holder = new DatabaseSync(server.config.database.kind === 'sqlite' ? server.config.database.path : '');
        holder.exec('begin immediate');
        const rotated = refreshRequest(app, tokens.refresh_token!);
        await sleep(200); // the refresh reaches the lock meanwhile
        holder.exec('commit');
        holder.close();
        assert.equal((await rotated).status, 200);
      });

      test(
        'a write that meets a write lock held past 5 seconds is answered 503 with Retry-After, and the token it carried still works',
        { timeout: 20_000 },
        async () => {
          const tokens = await obtainTokens(app, new UserAgent(server.url));
          const holder = new DatabaseSync(server.config.database.kind === 'sqlite' ? server.config.database.path : '');
          holder.exec('begin immediate');
          try {
            const refused = await refreshRequest(app, tokens.refresh_token!);
            assert.equal(refused.status, 503);
            assert.ok(Number(refused.headers.get('retry-after')) > 0, 'Retry-After');
            assert.equal(((await refused.json()) as { error: string }).error, 'temporarily_unavailable');
          } finally {
            holder.exec('commit');
            holder.close();
          }
          assert.equal((await refreshRequest(app, tokens.refresh_token!)).status, 200);
          assert.ok(server.logs.some((line) => line.includes('"msg":"database unavailable"')));
        },
      );
    }

    test('requests keep completing while gatehouse purge runs, none fails, and the expired rows are gone', async (t) => {
      const chains = await Promise.all(Array.from({ length: WORKERS }, () => obtainTokens(app, new UserAgent(server.url))));
      const purge = spawn(process.execPath, [MAIN, 'purge', '--json'], {
        env: { PATH: process.env.PATH, DATABASE_URL: databaseUrl(server.config) },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stdout = '';
      purge.stdout.on('data', (chunk) => (stdout += chunk));
      let running = true;
      const exited = new Promise<number | null>((resolve) => purge.once('close', (code) => resolve(code)));
      void exited.then(() => (running = false));

      let completed = 0;
      const statuses: number[] = [];
      // Each worker refreshes its chain (a write) and reads its profile (a bearer check) in turn.
      await Promise.all(
        chains.map(async (tokens) => {
          let { access_token: access, refresh_token: refresh } = tokens;
          while (running) {
            const rotated = await refreshRequest(app, refresh!);
            statuses.push(rotated.status);
            if (rotated.status !== 200) break;
            ({ access_token: access, refresh_token: refresh } = (await rotated.json()) as typeof tokens);
            statuses.push((await profile(server, access)).status);
            if (running) completed += 2;
          }
        }),
      );
      assert.equal(await exited, 0);
      t.diagnostic(`${completed} requests completed while the purge ran`);
      assert.deepEqual(
        statuses.filter((status) => status !== 200),
        [],
        'every request during the purge succeeded',
      );
      assert.ok(completed >= DURING, `only ${completed} requests completed while the purge ran`);

      const purged = JSON.parse(stdout) as Record<string, number>;
      assert.deepEqual(
        { grants: purged.grants, access_tokens: purged.access_tokens, refresh_tokens: purged.refresh_tokens },
        { grants: EXPIRED_GRANTS, access_tokens: EXPIRED_GRANTS, refresh_tokens: EXPIRED_GRANTS },
      );
      const left = await server.store.db
        .selectFrom('grants')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .where('expires_at', '<=', Date.now())
        .executeTakeFirstOrThrow();
      assert.equal(Number(left.n), 0);
    });
  });
}
