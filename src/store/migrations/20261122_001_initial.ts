/**
 * The initial schema. Frozen in time: it must not import application types.
 * Every row that can go stale carries one indexed `expires_at` (epoch milliseconds) that
 * `purge` deletes by; foreign keys cascade so a purged grant takes its tokens with it.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('users')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('username', 'text', (c) => c.notNull())
    .addColumn('username_key', 'text', (c) => c.notNull().unique())
    .addColumn('email', 'text', (c) => c.notNull())
    .addColumn('email_key', 'text', (c) => c.notNull().unique())
    .addColumn('display_name', 'text')
    .addColumn('password_hash', 'text', (c) => c.notNull())
    .addColumn('is_admin', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('disabled', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .execute();

  await db.schema
    .createTable('clients')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('grant_type', 'text', (c) => c.notNull())
    .addColumn('redirect_uri', 'text')
    .addColumn('secret_hash', 'text')
    .addColumn('trusted', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('require_pkce', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('scopes', 'text', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .execute();

  await db.schema
    .createTable('sessions')
    .addColumn('id_hash', 'text', (c) => c.primaryKey())
    .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('sessions_user_id').on('sessions').column('user_id').execute();
  await db.schema.createIndex('sessions_expires_at').on('sessions').column('expires_at').execute();

  await db.schema
    .createTable('grants')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('client_id', 'text', (c) => c.notNull().references('clients.id').onDelete('cascade'))
    .addColumn('user_id', 'text', (c) => c.references('users.id').onDelete('cascade'))
    .addColumn('scopes', 'text', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('last_used_at', 'bigint', (c) => c.notNull())
    .addColumn('revoked_at', 'bigint')
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('grants_user_id').on('grants').column('user_id').execute();
  await db.schema.createIndex('grants_client_id').on('grants').column('client_id').execute();
  await db.schema.createIndex('grants_expires_at').on('grants').column('expires_at').execute();

  await db.schema
    .createTable('auth_codes')
    .addColumn('hash', 'text', (c) => c.primaryKey())
    .addColumn('client_id', 'text', (c) => c.notNull().references('clients.id').onDelete('cascade'))
    .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('redirect_uri', 'text', (c) => c.notNull())
    .addColumn('scopes', 'text', (c) => c.notNull())
    .addColumn('code_challenge', 'text')
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .addColumn('consumed_at', 'bigint')
    .addColumn('grant_id', 'text', (c) => c.references('grants.id').onDelete('set null'))
    .execute();
  await db.schema.createIndex('auth_codes_expires_at').on('auth_codes').column('expires_at').execute();
  await db.schema.createIndex('auth_codes_grant_id').on('auth_codes').column('grant_id').execute();

  await db.schema
    .createTable('access_tokens')
    .addColumn('hash', 'text', (c) => c.primaryKey())
    .addColumn('grant_id', 'text', (c) => c.notNull().references('grants.id').onDelete('cascade'))
    .addColumn('scopes', 'text', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('access_tokens_grant_id').on('access_tokens').column('grant_id').execute();
  await db.schema.createIndex('access_tokens_expires_at').on('access_tokens').column('expires_at').execute();

  await db.schema
    .createTable('refresh_tokens')
    .addColumn('hash', 'text', (c) => c.primaryKey())
    .addColumn('grant_id', 'text', (c) => c.notNull().references('grants.id').onDelete('cascade'))
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .addColumn('rotated_at', 'bigint')
    .addColumn('successor_hash', 'text')
    .addColumn('successor_box', 'text')
    .execute();
  await db.schema.createIndex('refresh_tokens_grant_id').on('refresh_tokens').column('grant_id').execute();
  await db.schema.createIndex('refresh_tokens_expires_at').on('refresh_tokens').column('expires_at').execute();

  await db.schema
    .createTable('consents')
    .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('client_id', 'text', (c) => c.notNull().references('clients.id').onDelete('cascade'))
    .addColumn('scopes', 'text', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint('consents_pkey', ['user_id', 'client_id'])
    .execute();
  await db.schema.createIndex('consents_client_id').on('consents').column('client_id').execute();
  await db.schema.createIndex('consents_expires_at').on('consents').column('expires_at').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const table of ['consents', 'refresh_tokens', 'access_tokens', 'auth_codes', 'grants', 'sessions', 'clients', 'users']) {
    await db.schema.dropTable(table).execute();
  }
}
