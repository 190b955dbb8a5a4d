/**
 * Pushed authorization requests (SPEC §4.14, RFC 9126) and the FAPI 2.0 profile.
 * - `pushed_requests`: a request a client pushed, by the SHA-256 of its `request_uri`, with
 *   the parameters as checked; `opened_at` when a browser first brought it to the
 *   authorization endpoint, `consumed_at` when the client was answered (a code, a denial, an
 *   error): it answers once. Purged once expired.
 * - `clients.require_par`: 1 when its authorization requests must be pushed.
 * - `clients.profile`: 'fapi2' for a client held to the FAPI 2.0 Security Profile; null otherwise.
 * Frozen in time.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('pushed_requests')
    .addColumn('hash', 'text', (c) => c.primaryKey())
    .addColumn('client_id', 'text', (c) => c.notNull().references('clients.id').onDelete('cascade'))
    .addColumn('params', 'text', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .addColumn('opened_at', 'bigint')
    .addColumn('consumed_at', 'bigint')
    .execute();
  await db.schema.createIndex('pushed_requests_expires_at').on('pushed_requests').column('expires_at').execute();
  await db.schema.createIndex('pushed_requests_client_id').on('pushed_requests').column('client_id').execute();
  await db.schema
    .alterTable('clients')
    .addColumn('require_par', 'integer', (c) => c.notNull().defaultTo(0))
    .execute();
  await db.schema.alterTable('clients').addColumn('profile', 'text').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('clients').dropColumn('profile').execute();
  await db.schema.alterTable('clients').dropColumn('require_par').execute();
  await db.schema.dropTable('pushed_requests').execute();
}
