/**
 * One-time first-run setup links (SPEC §1). Frozen in time: it must not import application
 * types. Only the SHA-256 of a link's token is kept; `expires_at` is indexed like every
 * other expiring row so that `purge` removes stale links.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('setup_tokens')
    .addColumn('hash', 'text', (c) => c.primaryKey())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('setup_tokens_expires_at').on('setup_tokens').column('expires_at').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('setup_tokens').execute();
}
