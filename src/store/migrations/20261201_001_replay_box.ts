/**
 * The sealed successor pair of the refresh grace window moves from the rotated token's row to
 * its successor's (issue 35): written once, with the new row, which is appended at the end of
 * the table and its time-ordered key, instead of growing an old row at rotation — an old row on
 * a full page, which then splits (npm run bench:wal: 0.35–0.5 pages of every refresh). Each row
 * now holds its own pair as `replay_box`, sealed under the key of the token it replaced, until
 * the purge clears it after the window; the rotated row keeps only `successor_hash`. Rows in
 * the window when this runs keep theirs (copied to the successor). The purge finds the pairs to
 * clear by the successor's `created_at` (the time of the rotation), through a partial index.
 * Both backends run it in one transaction. The copy goes from the rotated rows, found through
 * the old partial index, to their successors by primary key: no scan of the table per pair.
 * SQLite records a migration apart from its transaction: run again after a crash between the
 * two, it finds `replay_box` there and changes nothing. Frozen in time.
 */
import { sql, type Kysely } from 'kysely';
import { inOneTransaction } from './20261128_002_switches.ts';

export async function up(db: Kysely<any>): Promise<void> {
  const columns = (await db.introspection.getTables()).find((table) => table.name === 'refresh_tokens')?.columns ?? [];
  if (columns.some((column) => column.name === 'replay_box')) return;
  await inOneTransaction(db, async (trx) => {
    await trx.schema.alterTable('refresh_tokens').addColumn('replay_box', 'text').execute();
    await sql`
      update refresh_tokens set replay_box = rotated.successor_box
      from refresh_tokens as rotated
      where rotated.successor_box is not null and refresh_tokens.hash = rotated.successor_hash`.execute(trx);
    await trx.schema.dropIndex('refresh_tokens_sealed_rotated_at').execute();
    await trx.schema.alterTable('refresh_tokens').dropColumn('successor_box').execute();
    await trx.schema
      .createIndex('refresh_tokens_sealed_created_at')
      .on('refresh_tokens')
      .column('created_at')
      .where(sql.ref('replay_box'), 'is not', null)
      .execute();
  });
}

export async function down(db: Kysely<any>): Promise<void> {
  await inOneTransaction(db, async (trx) => {
    await trx.schema.alterTable('refresh_tokens').addColumn('successor_box', 'text').execute();
    await sql`
      update refresh_tokens set successor_box = successor.replay_box
      from refresh_tokens as successor
      where successor.replay_box is not null and refresh_tokens.successor_hash = successor.hash`.execute(trx);
    await trx.schema.dropIndex('refresh_tokens_sealed_created_at').execute();
    await trx.schema.alterTable('refresh_tokens').dropColumn('replay_box').execute();
    await trx.schema
      .createIndex('refresh_tokens_sealed_rotated_at')
      .on('refresh_tokens')
      .column('rotated_at')
      .where(sql.ref('successor_box'), 'is not', null)
      .execute();
  });
}
