/**
 * The migration that records how a person logged in (`auth_time`, `amr`; SPEC §4.9, §4.12),
 * on a database that holds a session and a grant from before it, on both backends: the old
 * grant still refreshes, its tokens with neither claim (no login was recorded for it — its
 * creation time would be a guess); the old session was a password login, and a code it
 * approves now carries its login time and `["pwd"]`.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import type { Kysely } from 'kysely';
import * as oauth from 'oauth4webapi';
import { parseDatabaseUrl } from '../../src/config.ts';
import { openStore } from '../../src/store/database.ts';
import { mintToken } from '../../src/tokens.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { insertOldGrant, insertOldUser, migrateToBefore } from '../support/old-rows.ts';
import { discover, insecure, obtainTokens, type App } from '../support/oauth-client.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';

const THIS = '20261126_005_auth_time';
const REDIRECT = 'http://127.0.0.1:8765/callback';

for (const backend of BACKENDS) {
  describe(`the auth_time migration (${backend.name})`, backendOptions(backend), () => {
    let database: { url: string; drop(): Promise<void> };
    let server: TestServer;
    let introspector: App;
    const old = { clientId: '', session: mintToken('session'), refresh: mintToken('refresh'), loggedInAt: Date.now() - 10 * 60_000 };

    before(async () => {
      database = await backend.create();
      const store = openStore(parseDatabaseUrl(database.url));
      await migrateToBefore(store.db, THIS);
      const now = Date.now();
      const alice = await insertOldUser(
        store.db,
        { username: 'alice', email: 'alice@example.com', password: 'correct horse battery staple', isAdmin: false },
        now,
      );
      // Rows as the code before this migration wrote them: none of the new columns.
      const db = store.db as unknown as Kysely<any>;
      const client = { id: randomUUID(), name: 'Old app', grant_type: 'authorization_code', redirect_uris: JSON.stringify([REDIRECT]), secret_hash: null };
      await db
        .insertInto('clients')
        .values({ ...client, trusted: 0, require_pkce: 0, scopes: 'annotation:read', created_at: now })
        .execute();
      old.clientId = client.id;
      await db
        .insertInto('sessions')
        .values({ id_hash: old.session.hash, user_id: alice.id, created_at: old.loggedInAt, expires_at: now + 3_600_000 })
        .execute();
      await insertOldGrant(db, { clientId: client.id, userId: alice.id, scopes: 'annotation:read', refreshHash: old.refresh.hash }, now);
      await store.close();

      server = await startServer(backend, { DATABASE_URL: database.url });
      const registered = await server.createClient({ name: 'API', grantType: 'client_credentials', redirectUris: [], confidential: true });
      introspector = await discover(server, registered.client.id, { secret: registered.secret! });
    });
    after(async () => {
      await server?.close();
      await database?.drop();
    });

    const introspect = async (token: string) =>
      oauth.processIntrospectionResponse(
        introspector.as,
        introspector.client,
        await oauth.introspectionRequest(introspector.as, introspector.client, introspector.auth, token, insecure),
      );

    test('a grant from before still refreshes; its tokens carry no auth_time or amr', async () => {
      const response = await fetch(`${server.url}/api/token`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ grant_type: 'refresh_token', client_id: old.clientId, refresh_token: old.refresh.token }),
      });
      assert.equal(response.status, 200);
      const info = await introspect(((await response.json()) as { access_token: string }).access_token);
      assert.equal(info.active, true);
      assert.equal(info.username, 'alice');
      assert.equal(info.auth_time, undefined);
      assert.equal(info.amr, undefined);
    });

    test('a session from before was a password login: a code it approves carries its login time and ["pwd"]', async () => {
      const agent = new UserAgent(server.url);
      agent.cookies.set('gatehouse_session', old.session.token);
      const app = await discover(server, old.clientId, { redirectUri: REDIRECT });
      const tokens = await obtainTokens(app, agent);
      const info = await introspect(tokens.access_token);
      assert.equal(info.username, 'alice');
      assert.equal(info.auth_time, Math.floor(old.loggedInAt / 1000));
      assert.deepEqual(info.amr, ['pwd']);
    });
  });
}
