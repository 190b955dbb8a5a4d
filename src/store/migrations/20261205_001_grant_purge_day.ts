/**
 * `grants.purge_after`: the purge finds a grant by its expiry rounded up to the day, no longer
 * by `expires_at` itself (issue 35). A refresh moves the grant's `expires_at` to its newest
 * token's, and while that column was indexed the move wrote a new entry in each of the grant's
 * indexes: on PostgreSQL the update could never stay on its page (a heap-only tuple), on SQLite
 * it rewrote the index's entry. `expires_at` stays exact, unindexed, and is still what decides
 * whether a grant is alive; `purge_after` only moves when the day does. PostgreSQL's grants
 * leave room on each page (fillfactor 70) for a grant's next version, so that the update stays
 * there. Rows of an older instance during a rolling upgrade get 0, which the purge finds at
 * once and deletes only once their `expires_at` has passed. Both backends run it in one
 * transaction; run again after a crash between SQLite's commit and its record of the
 * migration, it finds the column there and changes nothing. Frozen in time.
 */
import { PostgresAdapter, sql, type Kysely } from 'kysely';
import { inOneTransaction } from './20261128_002_switches.ts';

const DAY_MS = 86_400_000;

export async function up(db: Kysely<any>): Promise<void> {
  const columns = (await db.introspection.getTables()).find((table) => table.name === 'grants')?.columns ?? [];
  if (columns.some((column) => column.name === 'purge_after')) return;
  await inOneTransaction(db, async (trx) => {
    // First, so that the rows the fill below writes already leave that room.
    if (db.getExecutor().adapter instanceof PostgresAdapter) await sql`alter table grants set (fillfactor = 70)`.execute(trx);
    await trx.schema
      .alterTable('grants')
      .addColumn('purge_after', 'bigint', (c) => c.notNull().defaultTo(0))
      .execute();
    // Literals, not parameters: integer division on both backends.
    await sql`update grants set purge_after = ((expires_at + ${sql.lit(DAY_MS - 1)}) / ${sql.lit(DAY_MS)}) * ${sql.lit(DAY_MS)}`.execute(trx);
    await trx.schema.dropIndex('grants_expires_at').execute();
    await trx.schema.createIndex('grants_purge_after').on('grants').column('purge_after').execute();
  });
}

export async function down(db: Kysely<any>): Promise<void> {
  await inOneTransaction(db, async (trx) => {
    if (db.getExecutor().adapter instanceof PostgresAdapter) await sql`alter table grants reset (fillfactor)`.execute(trx);
    await trx.schema.dropIndex('grants_purge_after').execute();
    await trx.schema.createIndex('grants_expires_at').on('grants').column('expires_at').execute();
    await trx.schema.alterTable('grants').dropColumn('purge_after').execute();
  });
}
