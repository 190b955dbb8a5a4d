/**
 * The audit trail (SPEC §4.6): one row per security event. Frozen in time: it must not
 * import application types. Rows name users and clients by id without foreign keys, so
 * the record of what happened outlives the user or client it is about; like every other
 * stored row, each carries an indexed `expires_at` (the retention period) that purge
 * deletes by.
 */
import { PostgresAdapter, type Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
  await db.schema
    .createTable('audit_events')
    // A sequence, so that events recorded in the same millisecond keep their order.
    .addColumn('id', postgres ? 'bigint' : 'integer', (c) => (postgres ? c.primaryKey().generatedAlwaysAsIdentity() : c.primaryKey().autoIncrement()))
    .addColumn('at', 'bigint', (c) => c.notNull())
    .addColumn('type', 'text', (c) => c.notNull())
    .addColumn('actor_id', 'text')
    .addColumn('user_id', 'text')
    .addColumn('client_id', 'text')
    .addColumn('address', 'text')
    .addColumn('detail', 'text')
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('audit_events_at').on('audit_events').column('at').execute();
  await db.schema.createIndex('audit_events_user_id').on('audit_events').columns(['user_id', 'at']).execute();
  await db.schema.createIndex('audit_events_actor_id').on('audit_events').columns(['actor_id', 'at']).execute();
  await db.schema.createIndex('audit_events_client_id').on('audit_events').columns(['client_id', 'at']).execute();
  await db.schema.createIndex('audit_events_type').on('audit_events').columns(['type', 'at']).execute();
  await db.schema.createIndex('audit_events_expires_at').on('audit_events').column('expires_at').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('audit_events').execute();
}
