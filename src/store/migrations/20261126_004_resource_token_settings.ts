/**
 * Each resource server chooses how its access tokens are made (SPEC §2, §4.9, issue 20):
 * `token_format` ('opaque' or 'jwt'), `signing_alg` ('ES256' or 'RS256', for JWTs), its
 * access tokens' lifetime `access_token_ttl` (seconds; NULL: the default of its format,
 * ACCESS_TOKEN_TTL or JWT_ACCESS_TOKEN_TTL) and `require_second_factor` (0 or 1). Existing
 * rows get the defaults, which are what they had: opaque tokens of the default lifetime.
 * Frozen in time.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('resources')
    .addColumn('token_format', 'text', (c) => c.notNull().defaultTo('opaque'))
    .execute();
  await db.schema
    .alterTable('resources')
    .addColumn('signing_alg', 'text', (c) => c.notNull().defaultTo('ES256'))
    .execute();
  await db.schema.alterTable('resources').addColumn('access_token_ttl', 'integer').execute();
  await db.schema
    .alterTable('resources')
    .addColumn('require_second_factor', 'integer', (c) => c.notNull().defaultTo(0))
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const column of ['require_second_factor', 'access_token_ttl', 'signing_alg', 'token_format'])
    await db.schema.alterTable('resources').dropColumn(column).execute();
}
