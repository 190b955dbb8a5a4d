/**
 * JWT grants (SPEC §4.11).
 * - `client_grant_secrets`: the secret of a jwt-bearer (publisher) client, kept so it can be
 *   read back to verify the HS256 grant tokens it signs — its hash alone (clients.secret_hash)
 *   cannot verify an HMAC. Sealed as a JWE under KEYS_SECRET when set (`encrypted` 1), like
 *   signing keys' private JWKs; deleted with its client.
 * - `trusted_issuers`: the external issuers whose signed assertions the grant accepts, by
 *   profile (`id-jag` or `workload`), with where their keys are (`jwks_uri`, null: discovered),
 *   how their subject maps (`subject_claim`, `subject`), and what they may obtain (`clients`,
 *   a JSON array of client IDs; `scopes`, null for no restriction; `resource`, a URI).
 * Frozen in time.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('client_grant_secrets')
    .addColumn('client_id', 'text', (c) => c.primaryKey().references('clients.id').onDelete('cascade'))
    .addColumn('secret', 'text', (c) => c.notNull())
    .addColumn('encrypted', 'integer', (c) => c.notNull())
    .execute();
  await db.schema
    .createTable('trusted_issuers')
    .addColumn('issuer', 'text', (c) => c.primaryKey())
    .addColumn('profile', 'text', (c) => c.notNull())
    .addColumn('jwks_uri', 'text')
    .addColumn('allow_private_address', 'integer', (c) => c.notNull())
    .addColumn('subject_claim', 'text', (c) => c.notNull())
    .addColumn('subject', 'text')
    .addColumn('clients', 'text', (c) => c.notNull())
    .addColumn('scopes', 'text')
    .addColumn('resource', 'text')
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('trusted_issuers').execute();
  await db.schema.dropTable('client_grant_secrets').execute();
}
