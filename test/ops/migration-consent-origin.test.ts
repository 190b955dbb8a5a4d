/**
 * The migration that keys consents by redirect origin (issue 18): an administrator's
 * client's consent is carried over for all its redirect URLs (origin ''); a consent to a
 * client no administrator checked is dropped, since nobody knows which redirect URL it was
 * given for, so the person is asked again. Down and up again, on both backends.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Migrator, sql, type Kysely } from 'kysely';
import { parseDatabaseUrl } from '../../src/config.ts';
import { migrations, openStore, type Store } from '../../src/store/database.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { insertOldUser } from '../support/old-rows.ts';
import { PASSWORD } from '../support/server.ts';

const THIS = '20261126_001_consent_redirect_origin';

const consents = async (db: Kysely<any>) => (await sql.raw('select * from consents order by client_id').execute(db)).rows as Array<Record<string, unknown>>;

for (const backend of BACKENDS) {
  describe(`the consent redirect origin migration (${backend.name})`, backendOptions(backend), () => {
    let database: { url: string; drop(): Promise<void> };
    let store: Store;
    let db: Kysely<any>;
    const migrator = (upTo: string) =>
      new Migrator({ db: store.db, provider: { getMigrations: async () => Object.fromEntries(Object.entries(migrations).filter(([name]) => name <= upTo)) } });
    const registered = '00000000-0000-4000-8000-000000000001';
    const dynamic = '00000000-0000-4000-8000-000000000002';
    let userId: string;

    before(async () => {
      database = await backend.create();
      store = openStore(parseDatabaseUrl(database.url));
      db = store.db as unknown as Kysely<any>;
      const before = Object.keys(migrations)
        .filter((name) => name < THIS)
        .at(-1)!;
      assert.equal((await migrator(before).migrateToLatest()).error, undefined);
      const now = Date.now();
      userId = (await insertOldUser(store.db, { username: 'alice', email: 'alice@example.com', password: PASSWORD, isAdmin: false }, now)).id;
      const client = { grant_type: 'authorization_code', secret_hash: null, trusted: 0, require_pkce: 1, scopes: 'annotation:read', created_at: now };
      await db
        .insertInto('clients')
        .values([
          { id: registered, name: 'Checked', kind: 'registered', redirect_uris: '["https://one.example/cb","https://two.example/cb"]', ...client },
          { id: dynamic, name: 'Unchecked', kind: 'dynamic', redirect_uris: '["http://127.0.0.1/cb","https://remote.example/cb"]', ...client },
        ])
        .execute();
      const consent = { user_id: userId, resource_id: 'builtin', scopes: 'annotation:read', created_at: now, expires_at: now + 3600_000 };
      await db
        .insertInto('consents')
        .values([
          { ...consent, client_id: registered },
          { ...consent, client_id: dynamic },
        ])
        .execute();
      assert.equal((await migrator(THIS).migrateToLatest()).error, undefined);
    });
    after(async () => {
      await store?.close();
      await database?.drop();
    });

    test("an administrator's client keeps its consent, for every redirect URL; the other client's is dropped", async () => {
      const rows = await consents(db);
      assert.deepEqual(
        rows.map((row) => [row.client_id, row.redirect_origin]),
        [[registered, '']],
      );
    });

    test('the key holds the origin: one consent per origin, a second for the same origin refused', async () => {
      const now = Date.now();
      const row = (redirectOrigin: string) => ({
        user_id: userId,
        client_id: dynamic,
        resource_id: 'builtin',
        redirect_origin: redirectOrigin,
        scopes: 'annotation:read',
        created_at: now,
        expires_at: now + 3600_000,
      });
      await db
        .insertInto('consents')
        .values([row('http://127.0.0.1'), row('https://remote.example')])
        .execute();
      await assert.rejects(db.insertInto('consents').values(row('https://remote.example')).execute());
      assert.equal((await consents(db)).length, 3);
    });

    test("down keeps the administrators' clients' consents, and up again works", async () => {
      assert.equal((await migrator(THIS).migrateDown()).error, undefined);
      const down = await consents(db);
      assert.deepEqual(
        down.map((row) => [row.client_id, 'redirect_origin' in row]),
        [[registered, false]],
      );
      assert.equal((await migrator(THIS).migrateToLatest()).error, undefined);
      assert.deepEqual(
        (await consents(db)).map((row) => [row.client_id, row.redirect_origin]),
        [[registered, '']],
      );
      // The foreign keys still cascade.
      await db.deleteFrom('clients').where('id', '=', registered).execute();
      assert.deepEqual(await consents(db), []);
    });
  });
}
