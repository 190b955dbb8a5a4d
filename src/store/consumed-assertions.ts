/**
 * Assertions accepted once (SPEC §4.11): the one conditional write that consumes one.
 */
import type { Kysely } from 'kysely';
import type { Database } from './schema.ts';

/**
 * Records the assertion `key` as used until `expiresAt`; true when this call recorded it,
 * false when it was already recorded and has not expired. One statement: an insert that does
 * nothing on a live row (and takes over a row whose assertion has expired but the purge has
 * not yet removed), with `returning` telling whether it wrote. Of any number of concurrent
 * calls with one key, on one instance or several sharing PostgreSQL, exactly one gets true:
 * the primary key serializes them in the database, not in application code.
 */
export async function recordConsumedAssertion(db: Kysely<Database>, key: string, expiresAt: number, now: number): Promise<boolean> {
  const row = await db
    .insertInto('consumed_assertions')
    .values({ key, expires_at: expiresAt })
    .onConflict((oc) =>
      oc
        .column('key')
        .doUpdateSet({ expires_at: (eb) => eb.ref('excluded.expires_at') })
        .where('consumed_assertions.expires_at', '<=', now),
    )
    .returning('key')
    .executeTakeFirst();
  return row !== undefined;
}
