/**
 * Device authorization requests (RFC 8628). Frozen in time: it must not import application
 * types. Keyed by the SHA-256 of the device code; the user code's hash is unique, so one
 * typed code names one request. Like every expiring row, an indexed `expires_at` for purge;
 * the client and the user who answered cascade, like codes.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('device_codes')
    .addColumn('hash', 'text', (c) => c.primaryKey())
    .addColumn('user_code_hash', 'text', (c) => c.notNull().unique())
    .addColumn('client_id', 'text', (c) => c.notNull().references('clients.id').onDelete('cascade'))
    .addColumn('scopes', 'text', (c) => c.notNull())
    // The resource server the tokens will be for (RFC 8707); 'builtin' is the service's own API.
    .addColumn('resource_id', 'text', (c) => c.notNull().defaultTo('builtin'))
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .addColumn('poll_interval', 'integer', (c) => c.notNull())
    .addColumn('last_polled_at', 'bigint', (c) => c.notNull())
    .addColumn('decision', 'text')
    .addColumn('user_id', 'text', (c) => c.references('users.id').onDelete('cascade'))
    .addColumn('decided_at', 'bigint')
    .addColumn('consumed_at', 'bigint')
    .addColumn('grant_id', 'text')
    .execute();
  await db.schema.createIndex('device_codes_client_id').on('device_codes').column('client_id').execute();
  await db.schema.createIndex('device_codes_user_id').on('device_codes').column('user_id').execute();
  await db.schema.createIndex('device_codes_expires_at').on('device_codes').column('expires_at').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('device_codes').execute();
}
