/**
 * Signing keys (SPEC §3, §4.9): the key pairs Gatehouse signs JWTs with, their state and
 * dates. The private JWK is stored as JSON, or as a JWE under a key derived from KEYS_SECRET
 * (`encrypted` = 1). At most one active key per algorithm, enforced here too: two instances
 * deciding at once cannot both leave an active key behind. Frozen in time.
 */
import { sql, type Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('signing_keys')
    .addColumn('kid', 'text', (c) => c.primaryKey())
    .addColumn('alg', 'text', (c) => c.notNull())
    .addColumn('state', 'text', (c) => c.notNull())
    .addColumn('public_jwk', 'text', (c) => c.notNull())
    .addColumn('private_jwk', 'text', (c) => c.notNull())
    .addColumn('encrypted', 'integer', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('activates_at', 'bigint', (c) => c.notNull())
    .addColumn('retires_at', 'bigint')
    .execute();
  await db.schema.createIndex('signing_keys_one_active').on('signing_keys').column('alg').unique().where(sql.ref('state'), '=', 'active').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('signing_keys').execute();
}
