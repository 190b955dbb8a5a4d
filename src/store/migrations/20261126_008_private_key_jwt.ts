/**
 * Assertions from others (SPEC §4.11). `consumed_assertions`: one row per assertion accepted
 * (a client assertion of `private_key_jwt`, or a JWT grant), keyed by SHA-256 of its issuer and
 * `jti` (or of the whole assertion when it has none), kept until the assertion's `exp`; one
 * conditional insert consumes it, so a replay — concurrent, or at another instance — finds
 * the row. `expires_at` lets the purge remove rows whose assertion could no longer be used.
 * `clients.jwks` (a JWK Set as JSON text) and `clients.jwks_uri`: the public keys of a client
 * that authenticates with `private_key_jwt` instead of a secret. Frozen in time.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('consumed_assertions')
    .addColumn('key', 'text', (c) => c.primaryKey())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('consumed_assertions_expires_at').on('consumed_assertions').column('expires_at').execute();
  await db.schema.alterTable('clients').addColumn('jwks', 'text').execute();
  await db.schema.alterTable('clients').addColumn('jwks_uri', 'text').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('clients').dropColumn('jwks_uri').execute();
  await db.schema.alterTable('clients').dropColumn('jwks').execute();
  await db.schema.dropTable('consumed_assertions').execute();
}
