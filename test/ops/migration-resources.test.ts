/**
 * The resources migration carries existing data over (issue 12): a grant, its tokens and a
 * consent made before it are, after it, for the built-in resource — the token still works at
 * the service's own API, introspection names PUBLIC_URL as its audience, the refresh token
 * still rotates, and the consent is still remembered.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { Migrator, type Kysely } from 'kysely';
import * as oauth from 'oauth4webapi';
import { parseDatabaseUrl } from '../../src/config.ts';
import { migrations, openStore } from '../../src/store/database.ts';
import { mintToken } from '../../src/tokens.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { insertOldUser } from '../support/old-rows.ts';
import { authorizationUrl, discover, insecure, profile, refreshRequest, tokenResult } from '../support/oauth-client.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';

const BEFORE = '20261122_004_successor_box_index';

for (const backend of BACKENDS) {
  describe(`the resources migration keeps existing grants (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let database: { url: string; drop(): Promise<void> };
    const access = mintToken('access');
    const refresh = mintToken('refresh');
    let clientId: string;
    let clientSecret: string;

    before(async () => {
      database = await backend.create();
      const store = openStore(parseDatabaseUrl(database.url));
      const older = Object.fromEntries(Object.entries(migrations).filter(([name]) => name <= BEFORE));
      const migrated = await new Migrator({ db: store.db, provider: { getMigrations: async () => older } }).migrateToLatest();
      assert.equal(migrated.error, undefined);
      // Written through the schema as it was: no resources, no resource_id anywhere.
      const db = store.db as unknown as Kysely<any>;
      const now = Date.now();
      const user = await insertOldUser(
        store.db,
        { username: 'alice', email: 'alice@example.com', password: 'correct horse battery staple', isAdmin: false },
        now,
      );
      // The clients table as it was then, too: one redirect URL, no kind.
      const secret = mintToken('clientSecret');
      clientId = randomUUID();
      clientSecret = secret.token;
      await db
        .insertInto('clients')
        .values({
          id: clientId,
          name: 'Old app',
          grant_type: 'authorization_code',
          redirect_uri: 'http://127.0.0.1:8765/callback',
          secret_hash: secret.hash,
          trusted: 0,
          require_pkce: 0,
          scopes: 'annotation:read annotation:write',
          created_at: now,
        })
        .execute();
      const grantId = randomUUID();
      const expires = now + 3600_000;
      await db
        .insertInto('grants')
        .values({
          id: grantId,
          client_id: clientId,
          user_id: user.id,
          scopes: 'annotation:read annotation:write',
          created_at: now,
          last_used_at: now,
          revoked_at: null,
          expires_at: expires,
        })
        .execute();
      await db
        .insertInto('access_tokens')
        .values({ hash: access.hash, grant_id: grantId, scopes: 'annotation:read annotation:write', created_at: now, expires_at: expires })
        .execute();
      await db.insertInto('refresh_tokens').values({ hash: refresh.hash, grant_id: grantId, created_at: now, expires_at: expires }).execute();
      await db
        .insertInto('consents')
        .values({ user_id: user.id, client_id: clientId, scopes: 'annotation:read annotation:write', created_at: now, expires_at: expires })
        .execute();
      await store.close();
      // The server migrates the rest of the way up as it starts.
      server = await startServer(backend, { DATABASE_URL: database.url });
    });
    after(async () => {
      await server?.close();
      await database?.drop();
    });

    test('the old access token works at the built-in API and is described with PUBLIC_URL as its audience', async () => {
      assert.equal((await profile(server, access.token)).status, 200);
      const app = await discover(server, clientId, { secret: clientSecret });
      const info = await oauth.processIntrospectionResponse(
        app.as,
        app.client,
        await oauth.introspectionRequest(app.as, app.client, app.auth, access.token, insecure),
      );
      assert.equal(info.aud, server.url);
    });

    test('the old refresh token rotates, and the old consent is remembered', async () => {
      const app = await discover(server, clientId, { secret: clientSecret });
      const refreshed = await tokenResult(await refreshRequest(app, refresh.token));
      assert.equal(refreshed.status, 200);
      const agent = new UserAgent(server.url);
      await agent.login('alice');
      const { url } = await authorizationUrl(app);
      assert.ok((await agent.visit(url.pathname + url.search)).redirect?.searchParams.get('code'), 'no consent page: approved before the migration');
    });
  });
}
