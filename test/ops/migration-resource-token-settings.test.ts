/**
 * The migration that gives resource servers token settings (issue 20): every resource server
 * that existed before — the built-in one and any registered — keeps today's behaviour:
 * opaque tokens of the default lifetime, ES256 for JWTs should it switch, no second-factor
 * rule. Down and up again, on both backends.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Migrator, sql, type Kysely } from 'kysely';
import { parseDatabaseUrl } from '../../src/config.ts';
import { migrations, openStore, type Store } from '../../src/store/database.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';

const THIS = '20261126_004_resource_token_settings';

const rows = async (db: Kysely<any>) => (await sql.raw('select * from resources order by id').execute(db)).rows as Array<Record<string, unknown>>;

for (const backend of BACKENDS) {
  describe(`the resource token settings migration (${backend.name})`, backendOptions(backend), () => {
    let database: { url: string; drop(): Promise<void> };
    let store: Store;
    let db: Kysely<any>;
    const migrator = (upTo: string) =>
      new Migrator({ db: store.db, provider: { getMigrations: async () => Object.fromEntries(Object.entries(migrations).filter(([name]) => name <= upTo)) } });
    const older = () =>
      Object.keys(migrations)
        .filter((name) => name < THIS)
        .at(-1)!;

    before(async () => {
      database = await backend.create();
      store = openStore(parseDatabaseUrl(database.url));
      db = store.db as unknown as Kysely<any>;
      assert.equal((await migrator(older()).migrateToLatest()).error, undefined);
      await db
        .insertInto('clients')
        .values({
          id: 'rs-client',
          name: 'Files (introspection)',
          grant_type: 'client_credentials',
          redirect_uris: '[]',
          secret_hash: 'x',
          trusted: 0,
          require_pkce: 0,
          scopes: '',
          created_at: 1,
        })
        .execute();
      await db.insertInto('resources').values({ id: 'files', uri: 'https://files.example', name: 'Files', client_id: 'rs-client', created_at: 1 }).execute();
      assert.equal((await migrator(THIS).migrateToLatest()).error, undefined);
    });
    after(async () => {
      await store?.close();
      await database?.drop();
    });

    test('existing resource servers stay opaque, with the default lifetime and no second-factor rule', async () => {
      assert.deepEqual(
        (await rows(db)).map((r) => [r.id, r.token_format, r.signing_alg, r.access_token_ttl, Number(r.require_second_factor)]),
        [
          ['builtin', 'opaque', 'ES256', null, 0],
          ['files', 'opaque', 'ES256', null, 0],
        ],
      );
    });

    test('down removes the columns and keeps the rows; up again restores the defaults', async () => {
      assert.equal((await migrator(THIS).migrateDown()).error, undefined);
      const down = await rows(db);
      assert.deepEqual(
        down.map((r) => r.id),
        ['builtin', 'files'],
      );
      assert.ok(!('token_format' in down[0]!));
      assert.equal((await migrator(THIS).migrateToLatest()).error, undefined);
      assert.deepEqual(
        (await rows(db)).map((r) => r.token_format),
        ['opaque', 'opaque'],
      );
    });
  });
}
