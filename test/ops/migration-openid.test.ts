/**
 * The OpenID Connect migration (SPEC §3 identity scopes, §4.10), on a database that holds a
 * client, two sessions and a grant from before it, on both backends: the old client may now
 * ask for `openid`, and its ID token names the old session by the `sid` the migration gave it;
 * the old grant still refreshes, without an ID token (it never held `openid`); each old
 * session got its own `sid`.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { createRemoteJWKSet, jwtVerify } from 'jose';
import type { Kysely } from 'kysely';
import { parseDatabaseUrl } from '../../src/config.ts';
import { openStore } from '../../src/store/database.ts';
import { mintToken } from '../../src/tokens.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { openIdLogin } from '../support/backchannel.ts';
import { insertOldGrant, insertOldUser, migrateToBefore } from '../support/old-rows.ts';
import { discover, refresh } from '../support/oauth-client.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';

const THIS = '20261126_006_openid';
const REDIRECT = 'http://127.0.0.1:8765/callback';

for (const backend of BACKENDS) {
  describe(`the OpenID Connect migration (${backend.name})`, backendOptions(backend), () => {
    let database: { url: string; drop(): Promise<void> };
    let server: TestServer;
    const old = { clientId: randomUUID(), sessions: [mintToken('session'), mintToken('session')], refresh: mintToken('refresh') };

    /** The `sid` the migration gave an old session. */
    const sidOf = async (session: { hash: string }) =>
      (await server.store.db.selectFrom('sessions').select('sid').where('id_hash', '=', session.hash).executeTakeFirstOrThrow()).sid;

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
      // Rows as the code before this migration wrote them: no identity scopes, no sid.
      const db = store.db as unknown as Kysely<any>;
      await db
        .insertInto('clients')
        .values({
          id: old.clientId,
          name: 'Old app',
          grant_type: 'authorization_code',
          redirect_uris: JSON.stringify([REDIRECT]),
          secret_hash: null,
          trusted: 0,
          require_pkce: 0,
          scopes: 'annotation:read annotation:write',
          created_at: now,
        })
        .execute();
      for (const session of old.sessions)
        await db
          .insertInto('sessions')
          .values({ id_hash: session.hash, user_id: alice.id, created_at: now, expires_at: now + 3_600_000, amr: 'pwd' })
          .execute();
      await insertOldGrant(db, { clientId: old.clientId, userId: alice.id, scopes: 'annotation:read', refreshHash: old.refresh.hash }, now);
      await store.close();

      server = await startServer(backend, { DATABASE_URL: database.url });
    });
    after(async () => {
      await server?.close();
      await database?.drop();
    });

    test('each session from before got a sid of its own', async () => {
      const sids = await Promise.all(old.sessions.map(sidOf));
      for (const sid of sids) assert.match(sid ?? '', /^[A-Za-z0-9_-]{22}$/);
      assert.notEqual(sids[0], sids[1]);
    });

    test('a client from before may ask for openid: its ID token names the old session by its new sid', async () => {
      const agent = new UserAgent(server.url);
      agent.cookies.set('gatehouse_session', old.sessions[0]!.token);
      const app = await discover(server, old.clientId, { redirectUri: REDIRECT });
      const { sid, idToken } = await openIdLogin(app, agent, 'alice');
      assert.equal(sid, await sidOf(old.sessions[0]!));
      const { payload } = await jwtVerify(idToken, createRemoteJWKSet(new URL('/oauth/jwks', server.url)), { issuer: server.url, audience: old.clientId });
      assert.equal(payload.sub, 'acct:alice@127.0.0.1');
    });

    test('a grant from before still refreshes, without an ID token: it never held openid', async () => {
      const app = await discover(server, old.clientId, { redirectUri: REDIRECT });
      const tokens = await refresh(app, old.refresh.token);
      assert.ok(tokens.access_token);
      assert.equal(tokens.scope, 'annotation:read');
      assert.equal(tokens.id_token, undefined);
    });
  });
}
