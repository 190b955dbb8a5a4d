/** First-run setup links: only the SHA-256 of each link's token is stored. */
import type { Kysely } from 'kysely';
import type { Database } from './schema.ts';

export async function insertSetupToken(db: Kysely<Database>, token: { hash: string; now: number; expiresAt: number }): Promise<void> {
  await db.insertInto('setup_tokens').values({ hash: token.hash, created_at: token.now, expires_at: token.expiresAt }).execute();
}

export async function isLiveSetupToken(db: Kysely<Database>, hash: string, now: number): Promise<boolean> {
  const row = await db.selectFrom('setup_tokens').select('hash').where('hash', '=', hash).where('expires_at', '>', now).executeTakeFirst();
  return row !== undefined;
}

/**
 * Uses the link up and runs `create` (which makes the administrator) in one transaction.
 * Using it up is one conditional DELETE, so of several concurrent submissions exactly one
 * gets to `create`; the others get `{ used: false }`. A failure of `create` rolls the use
 * back, and the link stays usable.
 */
export async function useSetupToken<T>(
  db: Kysely<Database>,
  hash: string,
  now: number,
  create: (trx: Kysely<Database>) => Promise<T>,
): Promise<{ used: true; created: T } | { used: false }> {
  return db.transaction().execute(async (trx) => {
    const result = await trx.deleteFrom('setup_tokens').where('hash', '=', hash).where('expires_at', '>', now).executeTakeFirst();
    if (result.numDeletedRows !== 1n) return { used: false };
    return { used: true, created: await create(trx) };
  });
}

/** Once an administrator exists, no setup link may create another. */
export async function deleteSetupTokens(db: Kysely<Database>): Promise<void> {
  await db.deleteFrom('setup_tokens').execute();
}
