/**
 * The account life cycle (SPEC §4.16): the mail queue and the links mail carries.
 *
 * `mail_outbox`: one row per message to send, written by the request that asks for it and
 * sent later by whichever instance claims it (`claimed_until`, one conditional update), so a
 * request never waits for mail and each message is sent by one instance. A row holds what to
 * send (its `kind`, the recipient, the person it is about) and never the message itself: a
 * link's token is made when the message is composed, and only its hash is kept, in
 * `account_links`. `state`: 'pending' until 'sent', 'failed' (given up) or 'skipped' (nothing
 * to send any more: the person is gone, say); `expires_at` lets the purge remove old rows.
 *
 * `account_links`: the single-use links of password resets and email verification, by the
 * SHA-256 of their token. A reset link holds a fingerprint of the password hash it replaces;
 * a verification link the address it verifies. A person has at most one live link of each
 * purpose: a new one (a message composed again, or asked for again) replaces the last. Frozen in time.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('mail_outbox')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('kind', 'text', (c) => c.notNull())
    .addColumn('user_id', 'text', (c) => c.references('users.id').onDelete('cascade'))
    .addColumn('to_address', 'text', (c) => c.notNull())
    .addColumn('detail', 'text', (c) => c.notNull())
    .addColumn('address', 'text')
    .addColumn('state', 'text', (c) => c.notNull())
    .addColumn('attempts', 'integer', (c) => c.notNull())
    .addColumn('next_attempt_at', 'bigint', (c) => c.notNull())
    .addColumn('claimed_until', 'bigint')
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('mail_outbox_due').on('mail_outbox').columns(['state', 'next_attempt_at']).execute();
  await db.schema.createIndex('mail_outbox_expires_at').on('mail_outbox').column('expires_at').execute();
  await db.schema.createIndex('mail_outbox_user_id').on('mail_outbox').column('user_id').execute();

  await db.schema
    .createTable('account_links')
    .addColumn('id_hash', 'text', (c) => c.primaryKey())
    .addColumn('purpose', 'text', (c) => c.notNull())
    .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('email', 'text')
    .addColumn('password_fingerprint', 'text')
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .execute();
  // One live link per person and purpose: a new one replaces the last in one write (an upsert), whichever instance composes it.
  await db.schema.createIndex('account_links_user_purpose').on('account_links').columns(['user_id', 'purpose']).unique().execute();
  await db.schema.createIndex('account_links_expires_at').on('account_links').column('expires_at').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('account_links').execute();
  await db.schema.dropTable('mail_outbox').execute();
}
