/**
 * `fan_out_messages`: the fan-out's transport between the processes that share one SQLite
 * file — `gatehouse serve`, its workers (WORKERS=n) and the command line (events/fan-out.ts).
 * Each row is one message as Redis or PostgreSQL NOTIFY would carry it (`payload`), from one
 * process (`origin`, random per process, so it skips its own); `id` grows with every insert
 * and is never reused (AUTOINCREMENT), so a reader keeps its place by the last id it read.
 * Rows older than a minute are deleted by the next sender. Created on PostgreSQL too, so that
 * both backends have one schema; it stays empty there, where LISTEN/NOTIFY or Redis carries
 * the messages.
 */
import { PostgresAdapter, type Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
  await db.schema
    .createTable('fan_out_messages')
    .addColumn('id', postgres ? 'bigint' : 'integer', (c) => (postgres ? c.primaryKey().generatedAlwaysAsIdentity() : c.primaryKey().autoIncrement()))
    .addColumn('origin', 'text', (c) => c.notNull())
    .addColumn('payload', 'text', (c) => c.notNull())
    .addColumn('sent_at', 'bigint', (c) => c.notNull())
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('fan_out_messages').execute();
}
