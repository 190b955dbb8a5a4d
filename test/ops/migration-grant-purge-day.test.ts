/**
 * The migration that gives grants a purge day (20261205_001): a grant written before it gets the
 * end of the day its expiry falls in, the purge's index moves from the exact expiry to that day,
 * and on PostgreSQL the grants' pages keep room for a refresh's update. Run again it changes
 * nothing; down puts the index on the expiry back; up again. Both backends.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Migrator, sql, type Kysely } from 'kysely';
import { migrations, type Store } from '../../src/store/database.ts';
import { mintToken } from '../../src/tokens.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { grantedBefore } from '../support/old-rows.ts';

const THIS = '20261205_001_grant_purge_day';
const DAY_MS = 86_400_000;

for (const backend of BACKENDS) {
  describe(`the grant purge-day migration (${backend.name})`, backendOptions(backend), () => {
    let database: { url: string; drop(): Promise<void> };
    let store: Store;
    let db: Kysely<any>;
    const grant = async () => (await sql`select * from grants`.execute(db)).rows[0] as Record<string, number | string>;
    const indexes = async () => {
      const query = backend.name === 'sqlite' ? sql`select name from sqlite_schema where type = 'index'` : sql`select indexname as name from pg_indexes`;
      return (await query.execute(db)).rows.map((row) => (row as { name: string }).name).filter((name) => /^grants_(expires_at|purge_after)$/.test(name));
    };
    const fillfactor = async () =>
      ((await sql`select reloptions from pg_class where relname = 'grants'`.execute(db)).rows[0] as { reloptions: string[] | null }).reloptions;
    const migrator = () => new Migrator({ db, provider: { getMigrations: async () => migrations } });

    before(async () => {
      ({ database, store, db } = await grantedBefore(backend, THIS, mintToken('refresh').hash, Date.now()));
    });
    after(async () => {
      await store?.close();
      await database?.drop();
    });

    test('up: a grant written before gets the end of the day it expires in, and the purge’s index is on that day', async () => {
      assert.equal((await migrator().migrateToLatest()).error, undefined);
      const row = await grant();
      const expiresAt = Number(row.expires_at);
      assert.equal(Number(row.purge_after), Math.ceil(expiresAt / DAY_MS) * DAY_MS);
      assert.ok(Number(row.purge_after) >= expiresAt);
      assert.deepEqual(await indexes(), ['grants_purge_after']);
      if (backend.name === 'postgres') assert.deepEqual(await fillfactor(), ['fillfactor=70']);
    });

    test('run again (SQLite records a migration apart from its transaction: a crash between the two), it changes nothing', async () => {
      const before = await grant();
      await migrations[THIS]!.up(db);
      assert.deepEqual(await grant(), before);
      assert.deepEqual(await indexes(), ['grants_purge_after']);
    });

    test('down puts the index on the exact expiry back, and up again moves it', async () => {
      const previous = Object.keys(migrations)
        .filter((name) => name < THIS)
        .at(-1)!;
      assert.equal((await migrator().migrateTo(previous)).error, undefined);
      assert.ok(!('purge_after' in (await grant())));
      assert.deepEqual(await indexes(), ['grants_expires_at']);
      if (backend.name === 'postgres') assert.equal(await fillfactor(), null);
      assert.equal((await migrator().migrateToLatest()).error, undefined);
      assert.deepEqual(await indexes(), ['grants_purge_after']);
      const row = await grant();
      assert.equal(Number(row.purge_after), Math.ceil(Number(row.expires_at) / DAY_MS) * DAY_MS);
    });
  });
}
