import { sql, type Kysely } from 'kysely';
import type { Database } from './schema.ts';

/** Every table whose rows expire, with the key that identifies a row. */
const EXPIRING: Record<string, string[]> = {
  auth_codes: ['hash'],
  access_tokens: ['hash'],
  refresh_tokens: ['hash'],
  grants: ['id'],
  sessions: ['id_hash'],
  consents: ['user_id', 'client_id'],
  setup_tokens: ['hash'],
};

export type PurgeCounts = Record<string, number>;

/**
 * Deletes rows whose `expires_at` has passed, in batches of `batchSize` so that no single
 * statement holds locks for long, and wipes sealed successor pairs whose grace window is over.
 */
export async function purgeExpired(db: Kysely<Database>, now: number, graceMs: number, batchSize = 1000): Promise<PurgeCounts> {
  const counts: PurgeCounts = {};
  for (const [table, key] of Object.entries(EXPIRING)) {
    const columns = sql.join(key.map((column) => sql.ref(column)));
    counts[table] = 0;
    for (;;) {
      const result = await sql`
        delete from ${sql.table(table)} where (${columns}) in
          (select ${columns} from ${sql.table(table)} where expires_at <= ${now} limit ${batchSize})`.execute(db);
      const deleted = Number(result.numAffectedRows ?? 0n);
      counts[table] += deleted;
      if (deleted < batchSize) break;
    }
  }
  const wiped = await db
    .updateTable('refresh_tokens')
    .set({ successor_box: null })
    .where('successor_box', 'is not', null)
    .where('rotated_at', '<=', now - graceMs)
    .executeTakeFirst();
  counts.successor_boxes = Number(wiped.numUpdatedRows);
  return counts;
}
