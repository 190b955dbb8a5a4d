/**
 * Clients an administrator can switch off and on, and people who can be deleted (SPEC §4.16).
 * - `clients.disabled`: 1 when an administrator disabled the client — any kind of client. A
 *   disabled client is refused like a blocked one; the flag is its own, apart from `blocked`,
 *   so that unblocking a URL prefix never enables a client an administrator disabled.
 * - `backchannel_logouts`: `user_id` no longer references `users` (it cascaded), and the
 *   person's `username` is kept with the row: deleting a person ends their sessions, whose
 *   back-channel logouts must still be delivered after the person's row is gone (the logout
 *   token's `sub` is made from the username). NULL in rows queued before this migration.
 * The table is rebuilt and its rows carried over: on SQLite, where Kysely runs migrations
 * outside a transaction, the rebuild makes its own; no table references
 * `backchannel_logouts`, so it may be dropped with foreign keys on. Frozen in time.
 */
import { PostgresAdapter, sql, type Kysely, type RawBuilder } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await inOneTransaction(db, async (trx) => {
    await trx.schema
      .alterTable('clients')
      .addColumn('disabled', 'integer', (c) => c.notNull().defaultTo(0))
      .execute();
    await rebuild(
      trx,
      true,
      sql`select b.sid, b.client_id, b.user_id, users.username, b.state, b.attempts, b.next_attempt_at, b.claimed_until, b.created_at, b.expires_at
      from backchannel_logouts b left join users on users.id = b.user_id`,
    );
  });
}

export async function down(db: Kysely<any>): Promise<void> {
  await inOneTransaction(db, async (trx) => {
    // A row whose person was deleted cannot reference them again.
    await rebuild(
      trx,
      false,
      sql`select b.sid, b.client_id, b.user_id, b.state, b.attempts, b.next_attempt_at, b.claimed_until, b.created_at, b.expires_at
      from backchannel_logouts b where exists (select 1 from users where users.id = b.user_id)`,
    );
    await trx.schema.alterTable('clients').dropColumn('disabled').execute();
  });
}

/** Replaces `backchannel_logouts` by a table that keeps the username (`up`) or references `users` (down), filled by `rows`. */
async function rebuild(trx: Kysely<any>, up: boolean, rows: RawBuilder<unknown>): Promise<void> {
  let table = trx.schema
    .createTable('backchannel_logouts_rebuilt')
    .addColumn('sid', 'text', (c) => c.notNull())
    .addColumn('client_id', 'text', (c) => c.notNull().references('clients.id').onDelete('cascade'));
  table = up
    ? table.addColumn('user_id', 'text', (c) => c.notNull()).addColumn('username', 'text')
    : table.addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'));
  await table
    .addColumn('state', 'text', (c) => c.notNull())
    .addColumn('attempts', 'integer', (c) => c.notNull())
    .addColumn('next_attempt_at', 'bigint', (c) => c.notNull())
    .addColumn('claimed_until', 'bigint')
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    // Named apart from the old key's constraint, which lives until the old table is dropped (PostgreSQL).
    .addPrimaryKeyConstraint(up ? 'backchannel_logouts_sid_client_pk' : 'backchannel_logouts_pk', ['sid', 'client_id'])
    .execute();
  await sql`insert into backchannel_logouts_rebuilt ${rows}`.execute(trx);
  await trx.schema.dropTable('backchannel_logouts').execute();
  await trx.schema.alterTable('backchannel_logouts_rebuilt').renameTo('backchannel_logouts').execute();
  await trx.schema.createIndex('backchannel_logouts_due').on('backchannel_logouts').columns(['state', 'next_attempt_at']).execute();
  await trx.schema.createIndex('backchannel_logouts_expires_at').on('backchannel_logouts').column('expires_at').execute();
}

/** PostgreSQL runs each migration in a transaction already; SQLite gets one here. */
export async function inOneTransaction(db: Kysely<any>, change: (trx: Kysely<any>) => Promise<void>): Promise<void> {
  if (db.getExecutor().adapter instanceof PostgresAdapter) return change(db);
  await db.transaction().execute(change);
}
