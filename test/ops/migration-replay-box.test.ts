/**
 * The migration that moves the grace window's sealed pair to the successor's row
 * (20261201_001): a rotation still inside its window when the upgrade runs keeps its pair —
 * the successor holds it now, and the predecessor token still opens it — and the rows outside
 * any window are untouched. Down puts the pair back on the rotated row; up again. Both backends.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Migrator, sql, type Kysely } from 'kysely';
import { migrations, type Store } from '../../src/store/database.ts';
import { mintToken, openWithToken, sealWithToken } from '../../src/tokens.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { grantedBefore } from '../support/old-rows.ts';

const THIS = '20261201_001_replay_box';
const PAIR = JSON.stringify({ response: { token_type: 'Bearer', access_token: 'gat_example', refresh_token: 'grt_example' }, accessExpiresAt: 0 });

for (const backend of BACKENDS) {
  describe(`the replay-box migration (${backend.name})`, backendOptions(backend), () => {
    let database: { url: string; drop(): Promise<void> };
    let store: Store;
    let db: Kysely<any>;
    const predecessor = mintToken('refresh');
    const successor = mintToken('refresh');
    const untouched = mintToken('refresh');
    const box = sealWithToken(predecessor.token, PAIR);
    const row = async (hash: string) => (await sql`select * from refresh_tokens where hash = ${hash}`.execute(db)).rows[0] as Record<string, unknown>;
    const indexes = async () => {
      const query = backend.name === 'sqlite' ? sql`select name from sqlite_schema where type = 'index'` : sql`select indexname as name from pg_indexes`;
      return (await query.execute(db)).rows.map((row) => (row as { name: string }).name).filter((name) => name.startsWith('refresh_tokens_sealed'));
    };
    const migrator = (upTo: string) =>
      new Migrator({ db, provider: { getMigrations: async () => Object.fromEntries(Object.entries(migrations).filter(([name]) => name <= upTo)) } });

    before(async () => {
      const now = Date.now();
      ({ database, store, db } = await grantedBefore(backend, THIS, predecessor.hash, now - 1000));
      const { grant_id } = await row(predecessor.hash);
      await db
        .updateTable('refresh_tokens')
        .set({ rotated_at: now, successor_hash: successor.hash, successor_box: box })
        .where('hash', '=', predecessor.hash)
        .execute();
      await db
        .insertInto('refresh_tokens')
        .values([
          { hash: successor.hash, grant_id, created_at: now, expires_at: now + 86_400_000 },
          { hash: untouched.hash, grant_id, created_at: now + 1, expires_at: now + 86_400_000 },
        ])
        .execute();
    });
    after(async () => {
      await store?.close();
      await database?.drop();
    });

    test('up: the successor holds the pair, which the predecessor token still opens; the rotated row keeps only its successor’s hash', async () => {
      assert.equal((await migrator(THIS).migrateToLatest()).error, undefined);
      const moved = await row(successor.hash);
      assert.equal(openWithToken(predecessor.token, moved.replay_box as string), PAIR);
      const rotated = await row(predecessor.hash);
      assert.equal(rotated.successor_hash, successor.hash);
      assert.ok(!('successor_box' in rotated), 'the rotated row has no box column any more');
      assert.equal(rotated.replay_box, null, 'a first token has no pair of its own');
      assert.equal((await row(untouched.hash)).replay_box, null);
      assert.deepEqual(await indexes(), ['refresh_tokens_sealed_created_at'], 'the purge finds the pairs by the successor’s creation');
    });

    test('run again (SQLite records a migration apart from its transaction: a crash between the two), it changes nothing', async () => {
      await migrations[THIS]!.up(db);
      assert.equal(openWithToken(predecessor.token, (await row(successor.hash)).replay_box as string), PAIR);
    });

    test('down puts the pair back on the rotated row, and up again moves it', async () => {
      const previous = Object.keys(migrations)
        .filter((name) => name < THIS)
        .at(-1)!;
      assert.equal((await migrator(THIS).migrateTo(previous)).error, undefined);
      assert.equal((await row(predecessor.hash)).successor_box, box);
      assert.ok(!('replay_box' in (await row(successor.hash))));
      assert.deepEqual(await indexes(), ['refresh_tokens_sealed_rotated_at']);
      assert.equal((await migrator(THIS).migrateToLatest()).error, undefined);
      assert.equal((await row(successor.hash)).replay_box, box);
    });
  });
}
