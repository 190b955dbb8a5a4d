import { sql, type Kysely } from 'kysely';
import type { Store } from './database.ts';
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
  audit_events: ['id'],
};

/**
 * Expired access tokens are kept a day longer: a client that logs out by revoking an access
 * token that has just expired must still revoke its grant (SPEC §4.3: nothing left alive).
 */
const KEEP_AFTER_EXPIRY_MS: Partial<Record<string, number>> = { access_tokens: 24 * 3600 * 1000 };

export type PurgeCounts = Record<string, number>;

/**
 * Deletes rows whose `expires_at` has passed, in batches of `batchSize` so that no single
 * statement holds locks for long, and wipes sealed successor pairs whose grace window is over.
 */
export async function purgeExpired(db: Kysely<Database>, now: number, graceMs: number, batchSize = 1000): Promise<PurgeCounts> {
  const counts: PurgeCounts = {};
  for (const [table, key] of Object.entries(EXPIRING)) {
    const columns = sql.join(key.map((column) => sql.ref(column)));
    const cutoff = now - (KEEP_AFTER_EXPIRY_MS[table] ?? 0);
    counts[table] = 0;
    for (;;) {
      const result = await sql`
        delete from ${sql.table(table)} where (${columns}) in
          (select ${columns} from ${sql.table(table)} where expires_at <= ${cutoff} limit ${batchSize})`.execute(db);
      const deleted = Number(result.numAffectedRows ?? 0n);
      counts[table] += deleted;
      if (deleted < batchSize) break;
    }
  }
  counts.unused_registrations = await purgeUnusedRegistrations(db, now, batchSize);
  const wiped = await db
    .updateTable('refresh_tokens')
    .set({ successor_box: null })
    .where('successor_box', 'is not', null)
    .where('rotated_at', '<=', now - graceMs)
    .executeTakeFirst();
  counts.successor_boxes = Number(wiped.numUpdatedRows);
  return counts;
}

/** A dynamically registered client that obtained no token this long after registering is purged (SPEC §4.8). */
export const UNUSED_REGISTRATION_MS = 24 * 3600 * 1000;

/**
 * Deletes dynamically registered clients older than a day that hold no grant alive: none
 * obtained a token within the day, or their last token expired (a grant expires with its
 * last refresh token, REFRESH_TOKEN_TTL after it was issued). What they held goes with them.
 */
async function purgeUnusedRegistrations(db: Kysely<Database>, now: number, batchSize: number): Promise<number> {
  let total = 0;
  for (;;) {
    const result = await sql`
      delete from clients where id in
        (select id from clients where kind = 'dynamic' and created_at <= ${now - UNUSED_REGISTRATION_MS}
          and not exists (select 1 from grants where grants.client_id = clients.id and grants.expires_at > ${now}) limit ${batchSize})`.execute(db);
    const deleted = Number(result.numAffectedRows ?? 0n);
    total += deleted;
    if (deleted < batchSize) return total;
  }
}

/** Names Gatehouse's purge among the PostgreSQL database's advisory locks (any fixed number would do). */
export const PURGE_LOCK = 7_463_289_001;

/**
 * One purge run, as the schedule on every instance and `gatehouse purge` do it. On
 * PostgreSQL the run holds a session advisory lock, taken without waiting: while one
 * instance purges, the others skip their turn (null) instead of racing it over the same
 * rows. The lock belongs to the connection, so a crashed instance cannot leave it held.
 * SQLite serves one instance, and serializes writers itself.
 */
export async function purgeOnce(store: Store, now: number, graceMs: number, batchSize?: number): Promise<PurgeCounts | null> {
  if (store.kind !== 'postgres') return purgeExpired(store.db, now, graceMs, batchSize);
  return store.db.connection().execute(async (connection) => {
    const { rows } = await sql<{ locked: boolean }>`select pg_try_advisory_lock(${PURGE_LOCK}) as locked`.execute(connection);
    if (rows[0]?.locked !== true) return null;
    try {
      return await purgeExpired(connection, now, graceMs, batchSize);
    } finally {
      await sql`select pg_advisory_unlock(${PURGE_LOCK})`.execute(connection);
    }
  });
}
