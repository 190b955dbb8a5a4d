/**
 * OpenID Connect (SPEC §3, §4.10, issue 21):
 * - users get `email_verified` (0/1, set by an administrator) and groups (`groups`, and
 *   `group_members` linking them to users);
 * - clients get their OIDC settings: `post_logout_redirect_uris` (JSON array, exact match),
 *   `backchannel_logout_uri` and `id_token_alg` ('RS256' by default, or 'ES256');
 * - sessions get `sid`, a random public identifier (128 bits, base64url) distinct from the
 *   cookie's secret; codes, device codes and grants carry the `sid` of the session that
 *   approved them, and codes the request's `nonce`;
 * - the identity scopes (which belong to no resource server, so they are not rows of `scopes`)
 *   join every existing client's scope list, so nothing that worked stops working and every
 *   registered client may ask for `openid`.
 * Frozen in time.
 */
import { randomBytes } from 'node:crypto';
import type { Kysely } from 'kysely';

const IDENTITY_SCOPES = ['email', 'groups', 'offline_access', 'openid', 'profile'];

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('users')
    .addColumn('email_verified', 'integer', (c) => c.notNull().defaultTo(0))
    .execute();
  await db.schema
    .createTable('groups')
    .addColumn('name', 'text', (c) => c.primaryKey())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema
    .createTable('group_members')
    .addColumn('group_name', 'text', (c) => c.notNull().references('groups.name').onDelete('cascade'))
    .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addPrimaryKeyConstraint('group_members_pk', ['group_name', 'user_id'])
    .execute();
  await db.schema.createIndex('group_members_user_id').on('group_members').column('user_id').execute();

  await db.schema
    .alterTable('clients')
    .addColumn('post_logout_redirect_uris', 'text', (c) => c.notNull().defaultTo('[]'))
    .execute();
  await db.schema.alterTable('clients').addColumn('backchannel_logout_uri', 'text').execute();
  await db.schema
    .alterTable('clients')
    .addColumn('id_token_alg', 'text', (c) => c.notNull().defaultTo('RS256'))
    .execute();

  await db.schema.alterTable('sessions').addColumn('sid', 'text').execute();
  for (const { id_hash } of await db.selectFrom('sessions').select('id_hash').execute())
    await db
      .updateTable('sessions')
      .set({ sid: randomBytes(16).toString('base64url') })
      .where('id_hash', '=', id_hash)
      .execute();
  for (const table of ['auth_codes', 'device_codes', 'grants']) await db.schema.alterTable(table).addColumn('sid', 'text').execute();
  await db.schema.createIndex('grants_sid').on('grants').column('sid').execute();
  await db.schema.alterTable('auth_codes').addColumn('nonce', 'text').execute();

  for (const { id, scopes } of await db.selectFrom('clients').select(['id', 'scopes']).execute()) {
    const joined = [...new Set([...String(scopes).split(' '), ...IDENTITY_SCOPES])].filter((s) => s !== '').sort();
    await db
      .updateTable('clients')
      .set({ scopes: joined.join(' ') })
      .where('id', '=', id)
      .execute();
  }
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const { id, scopes } of await db.selectFrom('clients').select(['id', 'scopes']).execute()) {
    const kept = String(scopes)
      .split(' ')
      .filter((s) => !IDENTITY_SCOPES.includes(s));
    await db
      .updateTable('clients')
      .set({ scopes: kept.join(' ') })
      .where('id', '=', id)
      .execute();
  }
  await db.schema.alterTable('auth_codes').dropColumn('nonce').execute();
  await db.schema.dropIndex('grants_sid').execute();
  for (const table of ['grants', 'device_codes', 'auth_codes', 'sessions']) await db.schema.alterTable(table).dropColumn('sid').execute();
  for (const column of ['id_token_alg', 'backchannel_logout_uri', 'post_logout_redirect_uris'])
    await db.schema.alterTable('clients').dropColumn(column).execute();
  await db.schema.dropTable('group_members').execute();
  await db.schema.dropTable('groups').execute();
  await db.schema.alterTable('users').dropColumn('email_verified').execute();
}
