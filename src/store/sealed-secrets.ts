/**
 * The rows that hold a secret under KEYS_SECRET (protocol/seal.ts), as one list for start-up:
 * which are still stored as they are, and sealing them.
 */
import type { Kysely } from 'kysely';
import type { SealedKind, StoredSecret } from '../protocol/seal.ts';
import type { Database } from './schema.ts';

/** Each kind's table, the column naming a row's owner and the column holding its secret. */
const COLUMNS = {
  signing_keys: { owner: 'kid', value: 'private_jwk' },
  client_grant_secrets: { owner: 'client_id', value: 'secret' },
  authenticator_apps: { owner: 'user_id', value: 'secret' },
  connections: { owner: 'id', value: 'client_secret' },
} as const satisfies Record<SealedKind, { owner: string; value: string }>;

/** The tables share the shape read and written here; Kysely cannot type a table chosen at run time. */
const sealedTables = (db: Kysely<Database>) => db as unknown as Kysely<Record<SealedKind, Record<string, string | number>>>;

/** The rows of one kind whose secret is stored as it is (`encrypted` 0). */
export async function listUnsealed(db: Kysely<Database>, kind: SealedKind): Promise<{ owner: string; value: string }[]> {
  const { owner, value } = COLUMNS[kind];
  const rows = await sealedTables(db).selectFrom(kind).select([owner, value]).where('encrypted', '=', 0).execute();
  return rows.map((row) => ({ owner: String(row[owner]), value: String(row[value]) }));
}

/**
 * Replaces a row's secret, stored as it is, by its sealed form — only if it is still the same
 * unsealed secret, so that instances starting together, or a secret changed meanwhile (a
 * rotated publisher secret, a new app set-up), are never overwritten. True when it replaced it.
 */
export async function replaceUnsealed(db: Kysely<Database>, kind: SealedKind, row: { owner: string; value: string }, sealed: StoredSecret): Promise<boolean> {
  const { owner, value } = COLUMNS[kind];
  const result = await sealedTables(db)
    .updateTable(kind)
    .set({ [value]: sealed.value, encrypted: sealed.encrypted })
    .where(owner, '=', row.owner)
    .where(value, '=', row.value)
    .where('encrypted', '=', 0)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}
