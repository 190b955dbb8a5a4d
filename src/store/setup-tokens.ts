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
 * Uses the link up: one conditional DELETE, so of several concurrent submissions exactly one
 * gets true. Inside the transaction that creates the administrator, a failure rolls it back.
 */
export async function consumeSetupToken(db: Kysely<Database>, hash: string, now: number): Promise<boolean> {
  const result = await db.deleteFrom('setup_tokens').where('hash', '=', hash).where('expires_at', '>', now).executeTakeFirst();
  return result.numDeletedRows === 1n;
}

/** Once an administrator exists, no setup link may create another. */
export async function deleteSetupTokens(db: Kysely<Database>): Promise<void> {
  await db.deleteFrom('setup_tokens').execute();
}
