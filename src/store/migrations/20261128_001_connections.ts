/**
 * Upstream identity providers (SPEC §4.13).
 * - `connections`: one provider an administrator registered. `id` is a slug made from its
 *   name (it is part of the callback URL registered at the provider, so it never changes);
 *   `kind` `oidc` (endpoints from `issuer`'s discovery document) or `oauth2` (the three URLs);
 *   `preset` the provider it was made for, with `base_url` / `tenant` where the preset takes
 *   them; the provider's client secret sealed under KEYS_SECRET when set (`encrypted` 1), like
 *   the other secrets Gatehouse reads back; `domains` a JSON array of email domains;
 *   `groups_claim` null for no group sync.
 * - `user_identities`: a person's identity at a connection, by the provider's `sub` (GitHub:
 *   its numeric id). One per person and connection. `groups` (JSON array) are the group
 *   memberships the connection granted at the last login, so that the next one removes only
 *   those it granted.
 * - `upstream_logins`: a login under way at a provider, keyed by the SHA-256 of its `state`,
 *   bound to the browser that started it (the SHA-256 of a cookie's value), with the PKCE
 *   verifier and the nonce, where to go after, for **Connect** the person to link to, and
 *   `max_age` when the provider was asked to authenticate the person afresh.
 *   Deleted when its callback arrives (single use) or after ten minutes.
 * - `pending_identities`: an identity whose email belongs to an account it may not take over
 *   (SPEC §4.13), waiting — ten minutes, by the SHA-256 of a cookie's token — for the person
 *   to log in to that account and confirm the link.
 * - `sessions.connection_id` and `pending_logins.connection_id`: the connection a login came
 *   through, so that disabling or deleting it ends its sessions.
 * Frozen in time.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('connections')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('kind', 'text', (c) => c.notNull())
    .addColumn('preset', 'text')
    .addColumn('issuer', 'text')
    .addColumn('authorization_url', 'text')
    .addColumn('token_url', 'text')
    .addColumn('userinfo_url', 'text')
    .addColumn('base_url', 'text')
    .addColumn('tenant', 'text')
    .addColumn('client_id', 'text', (c) => c.notNull())
    .addColumn('client_secret', 'text', (c) => c.notNull())
    .addColumn('encrypted', 'integer', (c) => c.notNull())
    .addColumn('scope', 'text', (c) => c.notNull())
    .addColumn('domains', 'text', (c) => c.notNull())
    .addColumn('required', 'integer', (c) => c.notNull())
    .addColumn('create_accounts', 'integer', (c) => c.notNull())
    .addColumn('link_verified_email', 'integer', (c) => c.notNull())
    .addColumn('groups_claim', 'text')
    .addColumn('trust_mfa', 'integer', (c) => c.notNull())
    .addColumn('allow_private_address', 'integer', (c) => c.notNull())
    .addColumn('enabled', 'integer', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('updated_at', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema
    .createTable('user_identities')
    .addColumn('connection_id', 'text', (c) => c.notNull().references('connections.id').onDelete('cascade'))
    .addColumn('subject', 'text', (c) => c.notNull())
    .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('email', 'text')
    .addColumn('groups', 'text', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('last_login_at', 'bigint')
    .addPrimaryKeyConstraint('user_identities_pkey', ['connection_id', 'subject'])
    .addUniqueConstraint('user_identities_one_per_person', ['connection_id', 'user_id'])
    .execute();
  await db.schema.createIndex('user_identities_by_user').on('user_identities').column('user_id').execute();
  await db.schema
    .createTable('upstream_logins')
    .addColumn('state_hash', 'text', (c) => c.primaryKey())
    .addColumn('connection_id', 'text', (c) => c.notNull().references('connections.id').onDelete('cascade'))
    .addColumn('binding_hash', 'text', (c) => c.notNull())
    .addColumn('code_verifier', 'text', (c) => c.notNull())
    .addColumn('nonce', 'text', (c) => c.notNull())
    .addColumn('next', 'text', (c) => c.notNull())
    .addColumn('link_user_id', 'text', (c) => c.references('users.id').onDelete('cascade'))
    .addColumn('max_age', 'integer')
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema
    .createTable('pending_identities')
    .addColumn('id_hash', 'text', (c) => c.primaryKey())
    .addColumn('connection_id', 'text', (c) => c.notNull().references('connections.id').onDelete('cascade'))
    .addColumn('subject', 'text', (c) => c.notNull())
    .addColumn('email', 'text')
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema.alterTable('sessions').addColumn('connection_id', 'text').execute();
  await db.schema.alterTable('pending_logins').addColumn('connection_id', 'text').execute();
  await db.schema.createIndex('sessions_by_connection').on('sessions').column('connection_id').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('sessions_by_connection').execute();
  await db.schema.alterTable('pending_logins').dropColumn('connection_id').execute();
  await db.schema.alterTable('sessions').dropColumn('connection_id').execute();
  await db.schema.dropTable('pending_identities').execute();
  await db.schema.dropTable('upstream_logins').execute();
  await db.schema.dropTable('user_identities').execute();
  await db.schema.dropTable('connections').execute();
}
