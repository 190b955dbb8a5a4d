/**
 * Passkeys and WebAuthn challenges (SPEC §4.12). A challenge is accepted by the one statement
 * that deletes it (DELETE … RETURNING on both backends): of two answers to one challenge, one
 * deletes the row and the other finds nothing — there is no read-then-write to race.
 */
import { sql, type Kysely } from 'kysely';
import type { ChallengePurpose, Database, PasskeyRow } from './schema.ts';
import { insertAuditRowQuery, type AuditEventRow } from './audit-events.ts';
import type { ThenInTransaction } from './second-factors.ts';

export async function insertChallenge(
  db: Kysely<Database>,
  row: { challengeHash: string; bindingHash: string; purpose: ChallengePurpose; userId: string | null; now: number; expiresAt: number },
): Promise<void> {
  await db
    .insertInto('webauthn_challenges')
    .values({
      challenge_hash: row.challengeHash,
      binding_hash: row.bindingHash,
      purpose: row.purpose,
      user_id: row.userId,
      created_at: row.now,
      expires_at: row.expiresAt,
    })
    .execute();
}

/**
 * Takes the challenge if it was handed to this browser for this purpose and has not expired:
 * deletes it and returns whose it was (`userId` null for a login), or undefined when there is
 * no such challenge (never issued, issued to another browser, already answered, or expired).
 */
export async function consumeChallenge(
  db: Kysely<Database>,
  p: { challengeHash: string; bindingHash: string; purpose: ChallengePurpose; now: number },
): Promise<{ userId: string | null } | undefined> {
  const row = await db
    .deleteFrom('webauthn_challenges')
    .where('challenge_hash', '=', p.challengeHash)
    .where('binding_hash', '=', p.bindingHash)
    .where('purpose', '=', p.purpose)
    .where('expires_at', '>', p.now)
    .returning('user_id')
    .executeTakeFirst();
  return row === undefined ? undefined : { userId: row.user_id };
}

export async function listPasskeys(db: Kysely<Database>, userId: string): Promise<PasskeyRow[]> {
  return db.selectFrom('passkeys').selectAll().where('user_id', '=', userId).orderBy('created_at').orderBy('id').execute();
}

export async function findPasskey(db: Kysely<Database>, id: string): Promise<PasskeyRow | undefined> {
  return db.selectFrom('passkeys').selectAll().where('id', '=', id).executeTakeFirst();
}

/**
 * Stores a new passkey with its audit row and `then` (the adding session's record of it), in one
 * transaction. Nothing is written when a passkey with that credential ID is already stored —
 * this person's or anyone's (`duplicate`) — or when `then` says no (`refused`).
 */
export async function insertPasskey(
  db: Kysely<Database>,
  row: { id: string; userId: string; publicKey: string; signCount: number; transports: string; name: string; now: number },
  audit: AuditEventRow,
  then: ThenInTransaction = async () => true,
): Promise<'stored' | 'duplicate' | 'refused'> {
  const refused = new Error('refused');
  try {
    return await db.transaction().execute(async (trx) => {
      const inserted = await trx
        .insertInto('passkeys')
        .values({
          id: row.id,
          user_id: row.userId,
          public_key: row.publicKey,
          sign_count: row.signCount,
          transports: row.transports,
          name: row.name,
          created_at: row.now,
          last_used_at: null,
        })
        .onConflict((oc) => oc.column('id').doNothing())
        .returning('id')
        .executeTakeFirst();
      if (inserted === undefined) return 'duplicate';
      await insertAuditRowQuery(trx, audit).execute();
      if (!(await then(trx))) throw refused;
      return 'stored';
    });
  } catch (error) {
    if (error === refused) return 'refused';
    throw error;
  }
}

/**
 * Records an accepted use: the new sign count and the time, on the condition that the count
 * is still the one the signature was checked against — a concurrent use of the same
 * credential that got there first makes this one fail. Returns whether it was recorded.
 */
export async function recordPasskeyUse(db: Kysely<Database>, p: { id: string; checkedCount: number; newCount: number; now: number }): Promise<boolean> {
  const updated = await db
    .updateTable('passkeys')
    .set({ sign_count: p.newCount, last_used_at: p.now })
    .where('id', '=', p.id)
    .where('sign_count', '=', p.checkedCount)
    .executeTakeFirst();
  return Number(updated.numUpdatedRows) === 1;
}

export async function renamePasskey(db: Kysely<Database>, p: { userId: string; id: string; name: string }, audit: AuditEventRow): Promise<boolean> {
  return db.transaction().execute(async (trx) => {
    const updated = await trx.updateTable('passkeys').set({ name: p.name }).where('id', '=', p.id).where('user_id', '=', p.userId).executeTakeFirst();
    if (Number(updated.numUpdatedRows) === 0) return false;
    await insertAuditRowQuery(trx, audit).execute();
    return true;
  });
}

/**
 * Removes one of the user's passkeys, with its audit row, in one transaction. With
 * `keepASecondFactor` (REQUIRE_SECOND_FACTOR applies to the person) the delete carries the
 * condition that another second factor remains, so two removals at once cannot together
 * take away the last one. Returns whether it was removed.
 */
export async function deletePasskey(
  db: Kysely<Database>,
  p: { userId: string; id: string; keepASecondFactor: boolean },
  audit: AuditEventRow,
): Promise<boolean> {
  return db.transaction().execute(async (trx) => {
    let remove = trx.deleteFrom('passkeys').where('id', '=', p.id).where('user_id', '=', p.userId);
    if (p.keepASecondFactor) remove = remove.where(otherSecondFactor(p.userId, p.id));
    const removed = await remove.executeTakeFirst();
    if (Number(removed.numDeletedRows) === 0) return false;
    await insertAuditRowQuery(trx, audit).execute();
    return true;
  });
}

/** That the user keeps a second factor besides passkey `passkeyId`: another passkey, or a confirmed authenticator app. */
function otherSecondFactor(userId: string, passkeyId: string) {
  return sql<boolean>`(exists (select 1 from passkeys as other where other.user_id = ${userId} and other.id <> ${passkeyId})
    or exists (select 1 from authenticator_apps as app where app.user_id = ${userId} and app.confirmed_at is not null))`;
}

export async function countPasskeys(db: Kysely<Database>, userId: string): Promise<number> {
  const row = await db
    .selectFrom('passkeys')
    .select((eb) => eb.fn.countAll<number | string>().as('n'))
    .where('user_id', '=', userId)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}
