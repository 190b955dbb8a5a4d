/** Signing keys' rows (src/identity/keys.ts decides what they hold). */
import { sql, type Insertable, type Kysely, type Transaction } from 'kysely';
import type { Store } from './database.ts';
import type { Database, SigningKeyRow, SigningKeyState, SigningKeysTable } from './schema.ts';

/** Names the signing keys' decisions among the PostgreSQL database's advisory locks (any fixed number other than purge's would do). */
const KEYS_LOCK = 7_261_126_003;

export function listSigningKeys(db: Kysely<Database>): Promise<SigningKeyRow[]> {
  return db.selectFrom('signing_keys').selectAll().orderBy('alg').orderBy('activates_at').execute();
}

/**
 * Runs `decide` in one transaction that no other process's decision about keys runs beside:
 * on PostgreSQL it first takes a transaction-scoped advisory lock, which every instance's
 * decision waits for; on SQLite the transaction begins IMMEDIATE (database.ts), taking the
 * database's write lock. What `decide` reads inside is therefore what it changes.
 */
export function withKeysLocked<T>(store: Store, decide: (trx: Transaction<Database>) => Promise<T>): Promise<T> {
  return store.db.transaction().execute(async (trx) => {
    if (store.kind === 'postgres') await sql`select pg_advisory_xact_lock(${KEYS_LOCK})`.execute(trx);
    return decide(trx);
  });
}

export async function insertSigningKey(db: Kysely<Database>, row: Insertable<SigningKeysTable>): Promise<void> {
  await db.insertInto('signing_keys').values(row).execute();
}

export async function setSigningKeyState(
  db: Kysely<Database>,
  kid: string,
  change: { state: SigningKeyState; activates_at?: number; retires_at?: number | null },
): Promise<void> {
  await db.updateTable('signing_keys').set(change).where('kid', '=', kid).execute();
}

export async function deleteSigningKey(db: Kysely<Database>, kid: string): Promise<void> {
  await db.deleteFrom('signing_keys').where('kid', '=', kid).execute();
}
