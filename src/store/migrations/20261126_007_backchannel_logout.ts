/**
 * Back-channel logout deliveries (SPEC §4.10): one row per ended session and client that got
 * an ID token in it, written in the transaction that ends the session. The key (sid,
 * client_id) makes a second end of the same session queue nothing, and instances claim a due
 * row with one conditional update (`claimed_until`), so each is delivered by one of them.
 * `state`: 'pending' until delivered ('delivered') or given up ('failed'); `expires_at` lets
 * the purge remove rows a day old. Frozen in time.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('backchannel_logouts')
    .addColumn('sid', 'text', (c) => c.notNull())
    .addColumn('client_id', 'text', (c) => c.notNull().references('clients.id').onDelete('cascade'))
    .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('state', 'text', (c) => c.notNull())
    .addColumn('attempts', 'integer', (c) => c.notNull())
    .addColumn('next_attempt_at', 'bigint', (c) => c.notNull())
    .addColumn('claimed_until', 'bigint')
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint('backchannel_logouts_pk', ['sid', 'client_id'])
    .execute();
  await db.schema.createIndex('backchannel_logouts_due').on('backchannel_logouts').columns(['state', 'next_attempt_at']).execute();
  await db.schema.createIndex('backchannel_logouts_expires_at').on('backchannel_logouts').column('expires_at').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('backchannel_logouts').execute();
}
