/**
 * Consent to a client that no administrator checked is remembered per redirect origin
 * (SPEC §4.1, issue 18): `consents` gains `redirect_origin`, part of its key. It is '' for
 * an administrator's client, whose consent holds for all its redirect URLs as before, and
 * the origin the person was sent to for a metadata-document or dynamically registered
 * client. Frozen in time: it must not import application types.
 *
 * The key changes, so the table is rebuilt and its rows carried over — those of
 * administrators' clients only: for the others nobody knows which redirect URL was
 * approved, so their people are asked once more. On SQLite, where Kysely runs migrations
 * outside a transaction, the rebuild makes its own; no table references `consents`, so it
 * may be dropped with foreign keys on.
 */
import { PostgresAdapter, sql, type CreateTableBuilder, type Kysely, type RawBuilder } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await inOneTransaction(db, async (trx) => {
    await rebuild(
      trx,
      true,
      sql`select c.user_id, c.client_id, c.resource_id, '', c.scopes, c.created_at, c.expires_at
      from consents c join clients on clients.id = c.client_id where clients.kind = 'registered'`,
    );
  });
}

export async function down(db: Kysely<any>): Promise<void> {
  await inOneTransaction(db, async (trx) => {
    await rebuild(trx, false, sql`select user_id, client_id, resource_id, scopes, created_at, expires_at from consents where redirect_origin = ''`);
  });
}

/** Replaces `consents` by a table with (`byOrigin`) or without the redirect origin in its key, filled by `rows`. */
async function rebuild(trx: Kysely<any>, byOrigin: boolean, rows: RawBuilder<unknown>): Promise<void> {
  let table: CreateTableBuilder<'consents_rebuilt', string> = trx.schema
    .createTable('consents_rebuilt')
    .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('client_id', 'text', (c) => c.notNull().references('clients.id').onDelete('cascade'))
    .addColumn('resource_id', 'text', (c) => c.notNull().references('resources.id').onDelete('cascade'));
  if (byOrigin) table = table.addColumn('redirect_origin', 'text', (c) => c.notNull());
  await table
    .addColumn('scopes', 'text', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    // Named apart from the old key's constraint, which lives until the old table is dropped (PostgreSQL).
    .addPrimaryKeyConstraint(
      byOrigin ? 'consents_user_client_resource_origin_pkey' : 'consents_user_client_resource_pkey',
      byOrigin ? ['user_id', 'client_id', 'resource_id', 'redirect_origin'] : ['user_id', 'client_id', 'resource_id'],
    )
    .execute();
  await sql`insert into consents_rebuilt ${rows}`.execute(trx);
  await trx.schema.dropTable('consents').execute();
  await trx.schema.alterTable('consents_rebuilt').renameTo('consents').execute();
  await trx.schema.createIndex('consents_client_id').on('consents').column('client_id').execute();
  await trx.schema.createIndex('consents_expires_at').on('consents').column('expires_at').execute();
}

/** PostgreSQL runs each migration in a transaction already; SQLite gets one here. */
async function inOneTransaction(db: Kysely<any>, change: (trx: Kysely<any>) => Promise<void>): Promise<void> {
  if (db.getExecutor().adapter instanceof PostgresAdapter) return change(db);
  await db.transaction().execute(change);
}
