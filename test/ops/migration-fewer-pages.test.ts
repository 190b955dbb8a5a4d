/**
 * The migration that makes token writes touch fewer pages (issue 14) keeps everything: a
 * database written by the schema before it keeps every row of every table, every foreign
 * key (declared, checked clean, and still cascading), and its tokens still work. On SQLite
 * it rebuilds the audit trail without AUTOINCREMENT, with foreign keys off as SQLite's
 * procedure asks; on both backends it replaces the audit trail's and two partial indexes.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { Migrator, sql, type Kysely } from 'kysely';
import * as oauth from 'oauth4webapi';
import { parseDatabaseUrl } from '../../src/config.ts';
import { migrations, openStore, type Store } from '../../src/store/database.ts';
import { hashToken, mintToken } from '../../src/tokens.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { insertOldUser } from '../support/old-rows.ts';
import { discover, insecure, profile, refreshRequest, tokenResult } from '../support/oauth-client.ts';
import { PASSWORD, startServer, type TestServer } from '../support/server.ts';

const THIS = '20261123_003_fewer_pages_per_write';

/** Every table the migration touches, with the columns that order its rows. */
const TABLES: Record<string, string> = {
  grants: 'id',
  access_tokens: 'hash',
  refresh_tokens: 'hash',
  auth_codes: 'hash',
  device_codes: 'hash',
  sessions: 'id_hash',
  consents: 'user_id, client_id, resource_id',
  audit_events: 'id',
};
/** The tables whose rows hang off a client (or, for sessions, a user) by foreign keys. */
const KEYED = Object.keys(TABLES).filter((table) => table !== 'audit_events');

async function count(db: Kysely<any>, table: string): Promise<number> {
  return Number((await sql.raw<{ n: number }>(`select count(*) as n from ${table}`).execute(db)).rows[0]!.n);
}

async function contents(db: Kysely<any>): Promise<Record<string, unknown[]>> {
  const all: Record<string, unknown[]> = {};
  for (const [table, order] of Object.entries(TABLES)) all[table] = (await sql.raw(`select * from ${table} order by ${order}`).execute(db)).rows;
  return all;
}

/** SQLite's declared foreign keys of every table, as `pragma foreign_key_list` gives them. */
async function foreignKeys(db: Kysely<any>): Promise<Record<string, unknown[]>> {
  const all: Record<string, unknown[]> = {};
  for (const table of Object.keys(TABLES)) all[table] = (await sql.raw(`pragma foreign_key_list(${table})`).execute(db)).rows;
  return all;
}

for (const backend of BACKENDS) {
  describe(`the fewer-pages migration keeps every row and foreign key (${backend.name})`, backendOptions(backend), () => {
    let database: { url: string; drop(): Promise<void> };
    let store: Store;
    let db: Kysely<any>;
    let was: { rows: Record<string, unknown[]>; foreignKeys: Record<string, unknown[]> };
    const access = mintToken('access');
    const refresh = mintToken('refresh');
    const grantId = randomUUID();
    let clientId: string;
    let clientSecret: string;
    let userId: string;

    before(async () => {
      database = await backend.create();
      store = openStore(parseDatabaseUrl(database.url));
      db = store.db as unknown as Kysely<any>;
      const older = Object.fromEntries(Object.entries(migrations).filter(([name]) => name < THIS));
      assert.equal((await new Migrator({ db: store.db, provider: { getMigrations: async () => older } }).migrateToLatest()).error, undefined);

      // A little of everything, through the schema as it was, parents and children.
      const now = Date.now();
      const later = now + 3600_000;
      userId = (await insertOldUser(store.db, { username: 'alice', email: 'alice@example.com', password: PASSWORD, isAdmin: false }, now)).id;
      const admin = (await insertOldUser(store.db, { username: 'root', email: 'root@example.com', password: PASSWORD, isAdmin: true }, now)).id;
      const secret = mintToken('clientSecret');
      clientId = randomUUID();
      clientSecret = secret.token;
      await db
        .insertInto('clients')
        .values({
          id: clientId,
          name: 'Old app',
          grant_type: 'authorization_code',
          redirect_uris: '["http://127.0.0.1:8765/callback"]',
          secret_hash: secret.hash,
          trusted: 0,
          require_pkce: 0,
          scopes: 'annotation:read',
          created_at: now,
        })
        .execute();
      const grant = {
        client_id: clientId,
        user_id: userId,
        resource_id: 'builtin',
        scopes: 'annotation:read',
        created_at: now,
        last_used_at: now,
        revoked_at: null,
        expires_at: later,
      };
      const otherGrant = randomUUID();
      await db
        .insertInto('grants')
        .values([
          { id: grantId, ...grant },
          { id: otherGrant, ...grant, revoked_at: now },
        ])
        .execute();
      await db
        .insertInto('access_tokens')
        .values([
          { hash: access.hash, grant_id: grantId, scopes: 'annotation:read', created_at: now, expires_at: later },
          { hash: hashToken('other access'), grant_id: otherGrant, scopes: 'annotation:read', created_at: now, expires_at: later },
        ])
        .execute();
      await db
        .insertInto('refresh_tokens')
        .values([
          { hash: refresh.hash, grant_id: grantId, created_at: now, expires_at: later },
          {
            hash: hashToken('rotated'),
            grant_id: otherGrant,
            created_at: now,
            expires_at: later,
            rotated_at: now,
            successor_hash: hashToken('successor'),
            successor_box: 'sealed',
          },
        ])
        .execute();
      const code = {
        client_id: clientId,
        user_id: userId,
        redirect_uri: 'http://127.0.0.1:8765/callback',
        resource_id: 'builtin',
        scopes: 'annotation:read',
        code_challenge: null,
        created_at: now,
        expires_at: later,
      };
      await db
        .insertInto('auth_codes')
        .values([
          { hash: hashToken('fresh code'), ...code, consumed_at: null, grant_id: null },
          { hash: hashToken('used code'), ...code, consumed_at: now, grant_id: otherGrant },
        ])
        .execute();
      const device = {
        client_id: clientId,
        scopes: 'annotation:read',
        resource_id: 'builtin',
        created_at: now,
        expires_at: later,
        poll_interval: 5,
        last_polled_at: now,
        decided_at: null,
        consumed_at: null,
        grant_id: null,
      };
      await db
        .insertInto('device_codes')
        .values([
          { hash: hashToken('pending device'), user_code_hash: hashToken('BCDFGHJK'), ...device, decision: null, user_id: null },
          { hash: hashToken('approved device'), user_code_hash: hashToken('LMNPQRST'), ...device, decision: 'approved', user_id: userId, decided_at: now },
        ])
        .execute();
      await db
        .insertInto('sessions')
        .values({ id_hash: hashToken('session'), user_id: userId, created_at: now, expires_at: later })
        .execute();
      await db
        .insertInto('consents')
        .values({ user_id: userId, client_id: clientId, resource_id: 'builtin', scopes: 'annotation:read', created_at: now, expires_at: later })
        .execute();
      const event = { at: now, address: '127.0.0.1', detail: null, expires_at: later };
      await db
        .insertInto('audit_events')
        .values([
          { ...event, type: 'login_succeeded', actor_id: null, user_id: userId, client_id: null },
          { ...event, type: 'token_issued', actor_id: null, user_id: userId, client_id: clientId, detail: JSON.stringify({ grant_id: grantId }) },
          { ...event, type: 'client_created', actor_id: admin, user_id: null, client_id: clientId },
          { ...event, type: 'user_created', actor_id: null, user_id: null, client_id: null, address: null },
        ])
        .execute();
      was = { rows: await contents(db), foreignKeys: backend.name === 'sqlite' ? await foreignKeys(db) : {} };
      assert.ok(Object.values(was.rows).every((rows) => rows.length > 0));
      await store.close();

      store = openStore(parseDatabaseUrl(database.url));
      db = store.db as unknown as Kysely<any>;
      // Up to this migration, not past it: later ones may change these tables (the server started below takes the rest).
      const upToThis = Object.fromEntries(Object.entries(migrations).filter(([name]) => name <= THIS));
      assert.equal((await new Migrator({ db: store.db, provider: { getMigrations: async () => upToThis } }).migrateToLatest()).error, undefined);
    });
    after(async () => {
      await store?.close();
      await database?.drop();
    });

    test('every row of every table is kept, as it was', async () => {
      assert.deepEqual(await contents(db), was.rows);
    });

    test('new audit events come after the old ones', async () => {
      await db
        .insertInto('audit_events')
        .values({ at: Date.now(), type: 'logout', actor_id: null, user_id: userId, client_id: null, address: null, detail: null, expires_at: Date.now() })
        .execute();
      const ids = (await sql<{ id: number }>`select id from audit_events order by id`.execute(db)).rows.map((row) => row.id);
      assert.equal(ids.at(-1), Math.max(...(was.rows.audit_events as Array<{ id: number }>).map((row) => row.id)) + 1);
      await db.deleteFrom('audit_events').where('type', '=', 'logout').execute();
    });

    test('the audit trail has the indexes its readers use, and no other', async () => {
      const indexes =
        backend.name === 'sqlite'
          ? (await sql<{ name: string; sql: string }>`select name, sql from sqlite_schema where type = 'index' and tbl_name = 'audit_events'`.execute(db)).rows
          : (
              await sql<{
                name: string;
                sql: string;
              }>`select indexname as name, indexdef as sql from pg_indexes where tablename = 'audit_events' and indexname <> 'audit_events_pkey'`.execute(db)
            ).rows;
      assert.deepEqual(indexes.map((index) => index.name).sort(), [
        'audit_events_actor_id',
        'audit_events_client_id',
        'audit_events_expires_at',
        'audit_events_type',
        'audit_events_user_id',
      ]);
      for (const who of ['user_id', 'actor_id', 'client_id']) {
        assert.match(
          indexes.find((index) => index.name === `audit_events_${who}`)!.sql,
          new RegExp(`\\("?${who}"?, "?id"?\\).*where.*${who}"?\\)? is not null`, 'i'),
        );
      }
    });

    // What only SQLite has (rowid tables, AUTOINCREMENT, a foreign-key pragma): asked of SQLite only, not skipped elsewhere.
    if (backend.name === 'sqlite') {
      test('SQLite: the audit trail has no AUTOINCREMENT; foreign keys are on, declared as before and all satisfied', async () => {
        const { rows } = await sql<{ name: string; sql: string }>`select name, sql from sqlite_schema where type = 'table'`.execute(db);
        assert.doesNotMatch(rows.find((row) => row.name === 'audit_events')!.sql, /autoincrement/i);
        assert.equal((await sql<{ foreign_keys: number }>`pragma foreign_keys`.execute(db)).rows[0]!.foreign_keys, 1);
        assert.deepEqual((await sql`pragma foreign_key_check`.execute(db)).rows, []);
        assert.deepEqual(await foreignKeys(db), was.foreignKeys);
      });

      test('SQLite: run again, the migration changes nothing', async () => {
        const schema = async () => (await sql`select type, name, sql from sqlite_schema order by name`.execute(db)).rows;
        const schemaWas = await schema();
        await migrations[THIS]!.up(db);
        assert.deepEqual(await schema(), schemaWas);
        assert.deepEqual(await contents(db), was.rows);
      });
    }

    describe('and then', () => {
      let server: TestServer;
      before(async () => {
        await store.close();
        server = await startServer(backend, { DATABASE_URL: database.url });
        store = server.store;
        db = store.db as unknown as Kysely<any>;
      });
      after(async () => {
        await server.close();
        store = openStore(parseDatabaseUrl(database.url)); // closed again by the outer `after`
      });

      test('the old tokens work: the access token at the API, the refresh token rotates', async () => {
        assert.equal((await profile(server, access.token)).status, 200);
        const app = await discover(server, clientId, { secret: clientSecret });
        assert.equal((await tokenResult(await refreshRequest(app, refresh.token))).status, 200);
        const info = await oauth.processIntrospectionResponse(
          app.as,
          app.client,
          await oauth.introspectionRequest(app.as, app.client, app.auth, access.token, insecure),
        );
        assert.equal(info.active, true);
      });

      test('the foreign keys still cascade: deleting the client takes its grants, tokens, codes, requests and consents', async () => {
        await db.deleteFrom('clients').where('id', '=', clientId).execute();
        for (const table of KEYED.filter((table) => table !== 'sessions')) {
          assert.equal(await count(db, table), 0, table);
        }
        await db.deleteFrom('users').where('id', '=', userId).execute();
        assert.equal(await count(db, 'sessions'), 0);
      });
    });
  });
}
