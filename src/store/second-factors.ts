/**
 * Second factors after a password (SPEC §4.12): the authenticator app, recovery codes and
 * the logins waiting for their second step. Every "once" here is one conditional write: a
 * time step accepted once (`last_step` only grows), a recovery code used once (its row
 * deleted), a pending login completed once (its row deleted) — composed with their audit rows
 * into one transaction (allOrNothing), so two concurrent submissions of one code give one login.
 */
import { sql, type Kysely, type Transaction } from 'kysely';
import { insertAuditEvent, type AuditEventRow } from './audit-events.ts';
import type { Database } from './schema.ts';

export interface StoredApp {
  secret: string;
  encrypted: number;
  confirmed_at: number | null;
  last_step: number | null;
  created_at: number;
}

/** The person's app: the confirmed one, or a set-up still waiting for its code (and not expired). */
export async function findApp(db: Kysely<Database>, userId: string, now: number): Promise<StoredApp | undefined> {
  return db
    .selectFrom('authenticator_apps')
    .select(['secret', 'encrypted', 'confirmed_at', 'last_step', 'created_at'])
    .where('user_id', '=', userId)
    .where((eb) => eb.or([eb('expires_at', 'is', null), eb('expires_at', '>', now)]))
    .executeTakeFirst();
}

/**
 * Starts (or starts again) an app's set-up with a new secret; false when a confirmed app
 * exists, which is never replaced this way (one app per person: remove it first).
 */
export async function putUnconfirmedApp(
  db: Kysely<Database>,
  row: { userId: string; secret: string; encrypted: number; now: number; expiresAt: number },
): Promise<boolean> {
  const values = { secret: row.secret, encrypted: row.encrypted, created_at: row.now, confirmed_at: null, last_step: null, expires_at: row.expiresAt };
  const result = await db
    .insertInto('authenticator_apps')
    .values({ user_id: row.userId, ...values })
    .onConflict((oc) => oc.column('user_id').doUpdateSet(values).where('authenticator_apps.confirmed_at', 'is', null))
    .executeTakeFirst();
  return Number(result.numInsertedOrUpdatedRows ?? 0n) > 0;
}

/**
 * One step of a transaction: true when it did what it must (a single-use write changed exactly
 * its one row), false to roll the whole transaction back.
 */
export type ThenInTransaction = (trx: Transaction<Database>) => Promise<boolean>;

/**
 * Confirms the set-up whose secret is `secret` (as stored: another tab may have started a
 * new one meanwhile) at time step `step`: false when it was confirmed, replaced or expired meanwhile.
 */
export async function confirmApp(trx: Kysely<Database>, p: { userId: string; secret: string; step: number; now: number }): Promise<boolean> {
  const result = await trx
    .updateTable('authenticator_apps')
    .set({ confirmed_at: p.now, last_step: p.step, expires_at: null })
    .where('user_id', '=', p.userId)
    .where('secret', '=', p.secret)
    .where('confirmed_at', 'is', null)
    .where('expires_at', '>', p.now)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

/** Accepts time step `step` of the confirmed app once: false when it (or a later one) was accepted already. */
export async function acceptStep(trx: Kysely<Database>, p: { userId: string; step: number }): Promise<boolean> {
  const result = await trx
    .updateTable('authenticator_apps')
    .set({ last_step: p.step })
    .where('user_id', '=', p.userId)
    .where('confirmed_at', 'is not', null)
    .where((eb) => eb.or([eb('last_step', 'is', null), eb('last_step', '<', p.step)]))
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

/** Uses a recovery code once: false when it is not one of the person's, or was used already. */
export async function useRecoveryCode(trx: Kysely<Database>, p: { userId: string; codeHash: string }): Promise<boolean> {
  const result = await trx.deleteFrom('recovery_codes').where('user_id', '=', p.userId).where('code_hash', '=', p.codeHash).executeTakeFirst();
  return Number(result.numDeletedRows) === 1;
}

/**
 * The shape of every "once" of a second step: single-use writes, each of which must change
 * exactly its one row (else someone else got there first), and their audit rows, all in one
 * transaction. Runs `steps` in order; the name of the first that said no (everything rolled
 * back), or null when all of them committed.
 */
export async function allOrNothing<K extends string>(db: Kysely<Database>, steps: Record<K, ThenInTransaction>, audit: AuditEventRow[]): Promise<K | null> {
  let refused: K | null = null;
  await inTransaction(db, async (trx) => {
    for (const [name, step] of Object.entries(steps) as [K, ThenInTransaction][]) {
      if (!(await step(trx))) {
        refused = name;
        return false;
      }
    }
    for (const row of audit) await insertAuditEvent(db, row, trx);
    return true;
  });
  return refused;
}

/** Runs `steps` in one transaction, rolled back when they return false; their answer. */
async function inTransaction(db: Kysely<Database>, steps: (trx: Transaction<Database>) => Promise<boolean>): Promise<boolean> {
  const rolledBack = new Error('rolled back');
  try {
    return await db.transaction().execute(async (trx) => {
      if (!(await steps(trx))) throw rolledBack;
      return true;
    });
  } catch (error) {
    if (error === rolledBack) return false;
    throw error;
  }
}

/**
 * Removes the person's confirmed app, with its audit row; false when there was none, or (with
 * `keepASecondFactor`: REQUIRE_SECOND_FACTOR applies to them) when no passkey remains — the
 * condition is the delete's own, so a passkey removed at the same moment cannot leave them with
 * none. Their recovery codes go too when no passkey remains: alone they are not a second factor.
 */
export async function deleteApp(db: Kysely<Database>, userId: string, audit: AuditEventRow[], keepASecondFactor: boolean): Promise<boolean> {
  const aPasskey = sql<boolean>`exists (select 1 from passkeys where passkeys.user_id = ${userId})`;
  return db.transaction().execute(async (trx) => {
    let remove = trx.deleteFrom('authenticator_apps').where('user_id', '=', userId).where('confirmed_at', 'is not', null);
    if (keepASecondFactor) remove = remove.where(aPasskey);
    const result = await remove.executeTakeFirst();
    if (Number(result.numDeletedRows) === 0) return false;
    await trx
      .deleteFrom('recovery_codes')
      .where('user_id', '=', userId)
      .where((eb) => eb.not(aPasskey))
      .execute();
    for (const row of audit) await insertAuditEvent(db, row, trx);
    return true;
  });
}

/** Replaces the person's recovery codes with these (by hash): the old ones are void from the same commit. */
export async function replaceRecoveryCodes(db: Kysely<Database>, userId: string, hashes: string[], now: number, audit: AuditEventRow[]): Promise<void> {
  await db.transaction().execute(async (trx) => {
    await trx.deleteFrom('recovery_codes').where('user_id', '=', userId).execute();
    await trx
      .insertInto('recovery_codes')
      .values(hashes.map((code_hash) => ({ user_id: userId, code_hash, created_at: now })))
      .execute();
    for (const row of audit) await insertAuditEvent(db, row, trx);
  });
}

export async function countRecoveryCodes(db: Kysely<Database>, userId: string): Promise<number> {
  const row = await db
    .selectFrom('recovery_codes')
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .where('user_id', '=', userId)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

/** Removes every second factor of the person (the reset of `gatehouse user reset-second-factor`); how many were removed. */
export async function deleteAllFactors(
  db: Kysely<Database>,
  userId: string,
  audit: AuditEventRow[],
): Promise<{ passkeys: number; apps: number; recoveryCodes: number }> {
  return db.transaction().execute(async (trx) => {
    const passkeys = await trx.deleteFrom('passkeys').where('user_id', '=', userId).executeTakeFirst();
    await trx.deleteFrom('webauthn_challenges').where('user_id', '=', userId).execute();
    const apps = await trx.deleteFrom('authenticator_apps').where('user_id', '=', userId).where('confirmed_at', 'is not', null).executeTakeFirst();
    await trx.deleteFrom('authenticator_apps').where('user_id', '=', userId).execute();
    const codes = await trx.deleteFrom('recovery_codes').where('user_id', '=', userId).executeTakeFirst();
    await trx.deleteFrom('pending_logins').where('user_id', '=', userId).execute();
    for (const row of audit) await insertAuditEvent(db, row, trx);
    return { passkeys: Number(passkeys.numDeletedRows), apps: Number(apps.numDeletedRows), recoveryCodes: Number(codes.numDeletedRows) };
  });
}

/** The ids, among `userIds`, of people with a second factor: for the admin list. */
export async function usersWithApp(db: Kysely<Database>, userIds: readonly string[]): Promise<Set<string>> {
  if (userIds.length === 0) return new Set();
  const rows = await db
    .selectFrom('authenticator_apps')
    .select('user_id')
    .where('user_id', 'in', [...userIds])
    .where('confirmed_at', 'is not', null)
    .execute();
  return new Set(rows.map((row) => row.user_id));
}

/** The ids, among `userIds`, of people with a passkey. */
export async function usersWithPasskeys(db: Kysely<Database>, userIds: readonly string[]): Promise<Set<string>> {
  if (userIds.length === 0) return new Set();
  const rows = await db
    .selectFrom('passkeys')
    .select('user_id')
    .distinct()
    .where('user_id', 'in', [...userIds])
    .execute();
  return new Set(rows.map((row) => row.user_id));
}

// Pending logins

export async function insertPendingLogin(
  db: Kysely<Database>,
  row: { idHash: string; userId: string; amr: string; connectionId: string | null; now: number; expiresAt: number },
): Promise<void> {
  await db
    .insertInto('pending_logins')
    .values({ id_hash: row.idHash, user_id: row.userId, amr: row.amr, connection_id: row.connectionId, created_at: row.now, expires_at: row.expiresAt })
    .execute();
}

/** The live pending login of this hash, with its user (not disabled). */
export async function findPendingLogin(db: Kysely<Database>, idHash: string, now: number) {
  return db
    .selectFrom('pending_logins')
    .innerJoin('users', 'users.id', 'pending_logins.user_id')
    .selectAll('users')
    .select(['pending_logins.amr as pending_amr', 'pending_logins.connection_id as pending_connection_id'])
    .where('pending_logins.id_hash', '=', idHash)
    .where('pending_logins.expires_at', '>', now)
    .where('users.disabled', '=', 0)
    .executeTakeFirst();
}

/** Consumes the pending login in `trx`: true for the one caller that found it live. */
export async function consumePendingLogin(trx: Transaction<Database>, idHash: string, now: number): Promise<boolean> {
  const result = await trx.deleteFrom('pending_logins').where('id_hash', '=', idHash).where('expires_at', '>', now).executeTakeFirst();
  return Number(result.numDeletedRows) === 1;
}

/** Deletes every pending login of the person (their password changed, their account disabled): a half-done login with the old password must not finish. */
export async function deleteUserPendingLogins(db: Kysely<Database>, userId: string): Promise<void> {
  await db.deleteFrom('pending_logins').where('user_id', '=', userId).execute();
}
