/**
 * The single-use links of password resets and email verification (SPEC §4.16,
 * AccountLinksTable): at most one live link per person and purpose, taken by one conditional
 * delete.
 */
import type { Kysely, Selectable, Transaction } from 'kysely';
import type { AccountLinkPurpose, AccountLinksTable, Database } from './schema.ts';

export type AccountLink = Selectable<AccountLinksTable>;

/**
 * Stores a link, replacing the person's last one of its purpose (that one stops working): one
 * upsert on the unique (person, purpose), so two instances composing at once leave one link.
 */
export async function putLink(db: Kysely<Database>, link: AccountLink): Promise<void> {
  await db
    .insertInto('account_links')
    .values(link)
    .onConflict((conflict) =>
      conflict.columns(['user_id', 'purpose']).doUpdateSet({
        id_hash: link.id_hash,
        email: link.email,
        password_fingerprint: link.password_fingerprint,
        created_at: link.created_at,
        expires_at: link.expires_at,
      }),
    )
    .execute();
}

/** The live link of `purpose` with this hash, left in place (a page that shows the form the link opens). */
export async function findLink(db: Kysely<Database>, purpose: AccountLinkPurpose, idHash: string, now: number): Promise<AccountLink | undefined> {
  return db
    .selectFrom('account_links')
    .selectAll()
    .where('id_hash', '=', idHash)
    .where('purpose', '=', purpose)
    .where('expires_at', '>', now)
    .executeTakeFirst();
}

/** Takes the live link of `purpose` with this hash: of concurrent takers, one gets it, and it is gone. */
export async function takeLink(trx: Transaction<Database>, purpose: AccountLinkPurpose, idHash: string, now: number): Promise<AccountLink | undefined> {
  return trx
    .deleteFrom('account_links')
    .where('id_hash', '=', idHash)
    .where('purpose', '=', purpose)
    .where('expires_at', '>', now)
    .returningAll()
    .executeTakeFirst();
}

/** Voids every link of the person (of one purpose, when given). */
export async function deleteLinks(db: Kysely<Database> | Transaction<Database>, userId: string, purpose?: AccountLinkPurpose): Promise<void> {
  await db
    .deleteFrom('account_links')
    .where('user_id', '=', userId)
    .$if(purpose !== undefined, (query) => query.where('purpose', '=', purpose!))
    .execute();
}

/**
 * Takes a password reset link and sets the new password it was for, in one transaction: the
 * link is taken (of concurrent uses, one gets it), the person's password must still be the one
 * it was made for (`fingerprint` of their stored hash equals the link's) and is swapped only if
 * unchanged since read, and every other reset link of theirs goes. The person's id, or
 * undefined (and nothing changed but the link's use) when the link is unknown, expired, used,
 * or its password changed meanwhile, or the account is disabled.
 */
export async function resetPasswordWithLink(
  db: Kysely<Database>,
  idHash: string,
  now: number,
  newHash: string,
  fingerprint: (storedHash: string) => string,
): Promise<string | undefined> {
  return db.transaction().execute(async (trx) => {
    const link = await takeLink(trx, 'password_reset', idHash, now);
    if (!link) return undefined;
    const user = await trx.selectFrom('users').select(['id', 'password_hash', 'disabled']).where('id', '=', link.user_id).executeTakeFirst();
    if (!user || user.disabled === 1 || fingerprint(user.password_hash) !== link.password_fingerprint) return undefined;
    const swapped = await trx
      .updateTable('users')
      .set({ password_hash: newHash })
      .where('id', '=', user.id)
      .where('password_hash', '=', user.password_hash)
      .executeTakeFirst();
    if (swapped.numUpdatedRows !== 1n) return undefined;
    await deleteLinks(trx, user.id, 'password_reset');
    return user.id;
  });
}

/**
 * Takes an email verification link and verifies its address, in one transaction: the
 * person's own address is marked verified; another (a change they asked for) becomes their
 * address, verified, and their reset links go (they were sent to the old one). What happened,
 * or undefined when the link is unknown, expired or used, or the account disabled. A unique
 * violation (another account took the address meanwhile) rolls it back and is thrown.
 */
export async function verifyEmailWithLink(
  db: Kysely<Database>,
  idHash: string,
  now: number,
  keyOf: (email: string) => string,
): Promise<{ userId: string; changed: boolean } | undefined> {
  return db.transaction().execute(async (trx) => {
    const link = await takeLink(trx, 'verify_email', idHash, now);
    if (!link || link.email === null) return undefined;
    const user = await trx.selectFrom('users').select(['id', 'email_key', 'disabled']).where('id', '=', link.user_id).executeTakeFirst();
    if (!user || user.disabled === 1) return undefined;
    const changed = keyOf(link.email) !== user.email_key;
    await trx
      .updateTable('users')
      .set(changed ? { email: link.email, email_key: keyOf(link.email), email_verified: 1 } : { email_verified: 1 })
      .where('id', '=', user.id)
      .execute();
    if (changed) await deleteLinks(trx, user.id, 'password_reset');
    return { userId: user.id, changed };
  });
}
