/**
 * Second factors after a password (SPEC §4.12). Frozen in time.
 *
 * - `authenticator_apps`: at most one per person (the key). `secret` is the TOTP secret in
 *   base32, stored as a JWE under KEYS_SECRET when `encrypted` is 1 (as signing keys are);
 *   `confirmed_at` is NULL while the set-up waits for its first code (such a row expires:
 *   `expires_at`, NULL once confirmed); `last_step` is the last accepted 30-second time step,
 *   so that one conditional update accepts a code once.
 * - `recovery_codes`: SHA-256 of each code (they are random, like tokens); a code is used by
 *   deleting its row, once.
 * - `pending_logins`: a login whose password was right and whose second step (a code, or
 *   setting a factor up) is still to come, held by the hash of a cookie's token; it expires
 *   after minutes and is consumed once, by the step that completes it.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('authenticator_apps')
    .addColumn('user_id', 'text', (c) => c.primaryKey().references('users.id').onDelete('cascade'))
    .addColumn('secret', 'text', (c) => c.notNull())
    .addColumn('encrypted', 'integer', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('confirmed_at', 'bigint')
    .addColumn('last_step', 'bigint')
    .addColumn('expires_at', 'bigint')
    .execute();
  await db.schema.createIndex('authenticator_apps_expires_at').on('authenticator_apps').column('expires_at').execute();
  await db.schema
    .createTable('recovery_codes')
    .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('code_hash', 'text', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint('recovery_codes_pk', ['user_id', 'code_hash'])
    .execute();
  await db.schema
    .createTable('pending_logins')
    .addColumn('id_hash', 'text', (c) => c.primaryKey())
    .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('amr', 'text', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('pending_logins_expires_at').on('pending_logins').column('expires_at').execute();
  await db.schema.createIndex('pending_logins_user_id').on('pending_logins').column('user_id').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('pending_logins').execute();
  await db.schema.dropTable('recovery_codes').execute();
  await db.schema.dropTable('authenticator_apps').execute();
}
