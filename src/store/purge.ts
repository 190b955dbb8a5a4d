import { channel } from 'node:diagnostics_channel';
import { setImmediate, setTimeout as sleep } from 'node:timers/promises';
import { sql, type Kysely } from 'kysely';
import type { Store } from './database.ts';
import type { Database } from './schema.ts';

/** Every table whose rows expire, with the key that identifies a row. */
const EXPIRING: Record<string, string[]> = {
  auth_codes: ['hash'],
  device_codes: ['hash'],
  access_tokens: ['hash'],
  refresh_tokens: ['hash'],
  grants: ['id'],
  sessions: ['id_hash'],
  consents: ['user_id', 'client_id', 'resource_id', 'redirect_origin'],
  setup_tokens: ['hash'],
  audit_events: ['id'],
  backchannel_logouts: ['sid', 'client_id'],
  consumed_assertions: ['key'],
  pending_logins: ['id_hash'],
  authenticator_apps: ['user_id'],
  webauthn_challenges: ['challenge_hash'],
  upstream_logins: ['state_hash'],
  pending_identities: ['id_hash'],
  mail_outbox: ['id'],
  account_links: ['id_hash'],
  pushed_requests: ['hash'],
};

/**
 * Expired access tokens are kept a day longer: a client that logs out by revoking an access
 * token that has just expired must still revoke its grant (SPEC §4.3: nothing left alive).
 */
const KEEP_AFTER_EXPIRY_MS: Partial<Record<string, number>> = { access_tokens: 24 * 3600 * 1000 };

/**
 * A grant is found by its purge day, which a refresh moves only when the day changes, not by
 * its exact expiry, which every refresh moves and no index holds (GrantsTable): it goes at the
 * first purge after the end of the day its last token expired.
 */
const FOUND_BY: Partial<Record<string, string>> = { grants: 'purge_after' };

export type PurgeCounts = Record<string, number>;

/** The most rows one statement deletes or wipes. */
const MAX_BATCH = 1000;
/**
 * On SQLite, how long one batch may hold the database's only write lock, which the server
 * (another process, for `gatehouse purge`) waits for. Batches grow while they take less and
 * shrink when they take more, down to SMALLEST_BATCH: a row costs from microseconds to a
 * millisecond, with its indexes and cascades, depending on the table, the page cache and
 * the machine's load.
 */
const BATCH_MS = 10;
const SMALLEST_BATCH = 50;

/**
 * How a purge spaces its batches. `one writer` (SQLite): batches sized to BATCH_MS, each
 * followed by a rest twice as long as it took, so that the purge holds the write lock at
 * most a third of the time and the server's writes get in between. `row locks` (PostgreSQL): nobody
 * else touches expired rows, so full batches, with a turn of the event loop between them.
 */
export type Pacing = 'one writer' | 'row locks';

/**
 * Runs `statement` (which affects at most `size` rows and returns how many) until it
 * affects fewer than asked, paced as `pacing` says. Returns the rows affected.
 */
async function inBatches(maxSize: number, pacing: Pacing, statement: (size: number) => Promise<number>): Promise<number> {
  const smallest = Math.min(SMALLEST_BATCH, maxSize);
  let total = 0;
  for (let size = pacing === 'row locks' ? maxSize : smallest; ;) {
    const started = performance.now();
    const affected = await statement(size);
    total += affected;
    if (affected < size) return total;
    if (pacing === 'row locks') {
      await setImmediate();
      continue;
    }
    const took = performance.now() - started;
    await sleep(2 * took);
    if (took < BATCH_MS / 2) size = Math.min(size * 2, maxSize);
    else if (took > BATCH_MS) size = Math.max(Math.floor(size / 2), smallest);
  }
}

/**
 * Deletes rows whose `expires_at` has passed (grants once their purge day has come too:
 * `FOUND_BY`), and wipes sealed successor pairs whose grace window is over, in batches of at
 * most `batchSize` rows paced as `pacing` says, each its own transaction: the server's
 * requests interleave with a purge of millions of rows.
 */
export async function purgeExpired(
  db: Kysely<Database>,
  now: number,
  graceMs: number,
  batchSize = MAX_BATCH,
  pacing: Pacing = 'one writer',
): Promise<PurgeCounts> {
  const counts: PurgeCounts = {};
  for (const [table, key] of Object.entries(EXPIRING)) {
    const columns = sql.join(key.map((column) => sql.ref(column)));
    const cutoff = now - (KEEP_AFTER_EXPIRY_MS[table] ?? 0);
    const foundBy = FOUND_BY[table];
    const found = foundBy === undefined ? sql`` : sql`${sql.ref(foundBy)} <= ${cutoff} and`;
    counts[table] = await inBatches(batchSize, pacing, async (size) => {
      const result = await sql`
        delete from ${sql.table(table)} where (${columns}) in
          (select ${columns} from ${sql.table(table)} where ${found} expires_at <= ${cutoff} limit ${size})`.execute(db);
      return Number(result.numAffectedRows ?? 0n);
    });
  }
  counts.unused_clients = await inBatches(batchSize, pacing, (size) => purgeUnusedClients(db, now, size));
  counts.successor_boxes = await inBatches(batchSize, pacing, async (size) => {
    const wiped = await db
      .updateTable('refresh_tokens')
      .set({ replay_box: null })
      .where('hash', 'in', (eb) =>
        eb
          .selectFrom('refresh_tokens')
          .select('hash')
          .where('replay_box', 'is not', null)
          .where('created_at', '<=', now - graceMs)
          .limit(size),
      )
      .executeTakeFirst();
    return Number(wiped.numUpdatedRows);
  });
  return counts;
}

/**
 * A client no administrator registered — dynamically registered, or recorded from its
 * metadata document when a person first approved it — that obtained no token this long after
 * it was stored is purged (SPEC §4.8).
 */
export const UNUSED_CLIENT_MS = 24 * 3600 * 1000;

/**
 * Deletes (at most `size`) clients that no administrator registered, stored more than a day
 * ago, that hold no grant alive: none obtained a token within the day, or their last token
 * expired (a grant expires with its last refresh token, REFRESH_TOKEN_TTL after it was
 * issued). What they held goes with them. Kept: a client someone approved within the day
 * (their consent is that recent: a code follows it, and the client is obtaining a token — the
 * purge does not pull the row from under an approval), and a blocked or disabled one — its row is the
 * administrator's decision, and a metadata document, unlike a registration, can come back under
 * the same id.
 */
async function purgeUnusedClients(db: Kysely<Database>, now: number, size: number): Promise<number> {
  const result = await sql`
    delete from clients where id in
      (select id from clients where kind in ('dynamic', 'metadata_document') and blocked = 0 and disabled = 0 and created_at <= ${now - UNUSED_CLIENT_MS}
        and not exists (select 1 from grants where grants.client_id = clients.id and grants.expires_at > ${now})
        and not exists (select 1 from consents where consents.client_id = clients.id and consents.created_at > ${now - UNUSED_CLIENT_MS})
        limit ${size})`.execute(db);
  return Number(result.numAffectedRows ?? 0n);
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
  if (!purges.hasSubscribers) return purgeRun(store, now, graceMs, batchSize);
  const started = performance.now();
  const counts = await purgeRun(store, now, graceMs, batchSize);
  purges.publish({ ms: performance.now() - started, rows: counts === null ? null : Object.values(counts).reduce((a, b) => a + b, 0) });
  return counts;
}

/** Each purge run's duration (ms, start to end, rests between batches included) and rows deleted, for whoever subscribes (bench/probe.ts). */
const purges = channel('gatehouse:purge');

async function purgeRun(store: Store, now: number, graceMs: number, batchSize?: number): Promise<PurgeCounts | null> {
  if (store.kind !== 'postgres') return purgeExpired(store.db, now, graceMs, batchSize, 'one writer');
  return store.db.connection().execute(async (connection) => {
    const { rows } = await sql<{ locked: boolean }>`select pg_try_advisory_lock(${PURGE_LOCK}) as locked`.execute(connection);
    if (rows[0]?.locked !== true) return null;
    try {
      return await purgeExpired(connection, now, graceMs, batchSize, 'row locks');
    } finally {
      await sql`select pg_advisory_unlock(${PURGE_LOCK})`.execute(connection);
    }
  });
}
