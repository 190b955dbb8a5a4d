/**
 * The mail queue (SPEC §4.16, MailOutboxTable): a row per message, written by the request that
 * asks for it, claimed by one instance at a time for an attempt, finished by it.
 */
import { randomUUID } from 'node:crypto';
import type { Kysely, Transaction } from 'kysely';
import { outcomeColumns, takeableAt, type AttemptOutcome } from './queue-rows.ts';
import type { Database, MailKind } from './schema.ts';

/** A queued row is kept this long, whatever became of it, then purged. */
const KEPT_MS = 7 * 24 * 3600 * 1000;

export interface QueuedMail {
  kind: MailKind;
  userId: string | null;
  to: string;
  /** Plain facts its composer needs (never a token or a password). */
  detail?: Readonly<Record<string, string>>;
  /** The address of the request that asked for it; null: the command line. */
  address: string | null;
}

/** Queues a message, due at once; its id. */
export async function queueMail(db: Kysely<Database> | Transaction<Database>, mail: QueuedMail, now: number): Promise<string> {
  const id = randomUUID();
  await db
    .insertInto('mail_outbox')
    .values({
      id,
      kind: mail.kind,
      user_id: mail.userId,
      to_address: mail.to,
      detail: JSON.stringify(mail.detail ?? {}),
      address: mail.address,
      state: 'pending',
      attempts: 0,
      next_attempt_at: now,
      claimed_until: null,
      created_at: now,
      expires_at: now + KEPT_MS,
    })
    .execute();
  return id;
}

/** A message due, and the person it is about. */
export interface DueMail {
  id: string;
  user_id: string | null;
}

/** Pending messages whose attempt is due, with attempts left, that no instance holds, oldest first. */
export async function dueMail(db: Kysely<Database>, now: number, limit: number, maxAttempts: number): Promise<DueMail[]> {
  return db.selectFrom('mail_outbox').select(['id', 'user_id']).where(takeableAt(now, maxAttempts)).orderBy('next_attempt_at').limit(limit).execute();
}

/** What an instance that claimed a message needs to compose and send it. */
export interface ClaimedMail {
  id: string;
  kind: MailKind;
  user_id: string | null;
  to_address: string;
  detail: Record<string, string>;
  address: string | null;
  /** This attempt's number, from 1. */
  attempts: number;
  claimed_until: number;
}

/**
 * Claims the message for one attempt until `until`: one conditional update, so that of the
 * instances that found it due exactly one gets it (undefined for the others, and once
 * `maxAttempts` were made).
 */
export async function claimMail(db: Kysely<Database>, id: string, now: number, until: number, maxAttempts: number): Promise<ClaimedMail | undefined> {
  const claimed = await db
    .updateTable('mail_outbox')
    .set((eb) => ({ claimed_until: until, attempts: eb('attempts', '+', 1) }))
    .where('id', '=', id)
    .where(takeableAt(now, maxAttempts))
    .returning(['id', 'kind', 'user_id', 'to_address', 'detail', 'address', 'attempts'])
    .executeTakeFirst();
  if (!claimed) return undefined;
  return { ...claimed, detail: JSON.parse(claimed.detail) as Record<string, string>, attempts: Number(claimed.attempts), claimed_until: until };
}

/** Records the outcome of a claimed attempt — done, or to be tried again at `retryAt` — while the claim is still the caller's. */
export async function finishMail(db: Kysely<Database>, claimed: ClaimedMail, outcome: AttemptOutcome<'sent' | 'failed' | 'skipped'>): Promise<void> {
  await db.updateTable('mail_outbox').set(outcomeColumns(outcome)).where('id', '=', claimed.id).where('claimed_until', '=', claimed.claimed_until).execute();
}
