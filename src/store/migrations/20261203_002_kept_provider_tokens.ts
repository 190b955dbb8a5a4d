/**
 * A connection that keeps the provider's tokens (SPEC §4.15, `--keep-tokens`), for the
 * resource servers allowed to exchange a person's token for them (`--token-resource`).
 * - `connections.keep_tokens`: 1 when the provider's tokens are kept at each login.
 * - `connections.token_resources`: a JSON array of those resource servers, `{"id", "uri"}` each.
 * - `user_identities.provider_tokens`: the provider's tokens of the identity's last login, as
 *   JSON sealed under KEYS_SECRET (always: they are never kept otherwise); null when none are
 *   kept. They go with the identity (unlinked, its person deleted, its connection deleted).
 * - `user_identities.provider_tokens_refreshing_until`: while an instance refreshes them at the
 *   provider, until when the others wait for its result (epoch ms); null otherwise.
 * Frozen in time.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('connections')
    .addColumn('keep_tokens', 'integer', (c) => c.notNull().defaultTo(0))
    .execute();
  await db.schema
    .alterTable('connections')
    .addColumn('token_resources', 'text', (c) => c.notNull().defaultTo('[]'))
    .execute();
  await db.schema.alterTable('user_identities').addColumn('provider_tokens', 'text').execute();
  await db.schema.alterTable('user_identities').addColumn('provider_tokens_refreshing_until', 'bigint').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('user_identities').dropColumn('provider_tokens_refreshing_until').execute();
  await db.schema.alterTable('user_identities').dropColumn('provider_tokens').execute();
  await db.schema.alterTable('connections').dropColumn('token_resources').execute();
  await db.schema.alterTable('connections').dropColumn('keep_tokens').execute();
}
