/**
 * Back-channel logout deliveries (SPEC §4.10, BackchannelLogoutsTable): queued in the
 * transaction that ends a session, claimed by one instance at a time, finished by it.
 */
import { sql, type Kysely, type Transaction } from 'kysely';
import { outcomeColumns, takeableAt, type AttemptOutcome } from './queue-rows.ts';
import type { Database } from './schema.ts';

/** A queued row is kept this long, whatever became of it, then purged. */
const KEPT_MS = 24 * 3600 * 1000;

/**
 * Queues a delivery for every client with a back-channel logout URL that got an ID token in
 * one of the sessions `sids` — a grant approved in it whose scopes hold `openid` (revoked or
 * not: the ID token was issued all the same). A (sid, client) already queued is left alone.
 * `address` is where the session end came from (the request's address; null: the command
 * line), for the delivery's audit event. Returns how many were queued.
 */
export async function queueBackchannelLogouts(trx: Transaction<Database>, sids: readonly string[], now: number, address: string | null): Promise<number> {
  if (sids.length === 0) return 0;
  const result = await trx
    .insertInto('backchannel_logouts')
    .columns(['sid', 'client_id', 'user_id', 'username', 'state', 'attempts', 'next_attempt_at', 'created_at', 'expires_at', 'address'])
    .expression((eb) =>
      eb
        .selectFrom('grants')
        .innerJoin('clients', 'clients.id', 'grants.client_id')
        .innerJoin('users', 'users.id', 'grants.user_id')
        .select((s) => [
          'grants.sid',
          'grants.client_id',
          'grants.user_id',
          'users.username',
          sql<'pending'>`'pending'`.as('state'),
          s.lit(0).as('attempts'),
          // Typed: PostgreSQL cannot infer a parameter's type in a select list.
          sql<number>`cast(${now} as bigint)`.as('next_attempt_at'),
          sql<number>`cast(${now} as bigint)`.as('created_at'),
          sql<number>`cast(${now + KEPT_MS} as bigint)`.as('expires_at'),
          sql<string | null>`cast(${address} as text)`.as('address'),
        ])
        .where('grants.sid', 'in', sids)
        .where('grants.user_id', 'is not', null)
        .where('clients.backchannel_logout_uri', 'is not', null)
        // Scope lists are stored space-separated.
        .where(sql<boolean>`' ' || grants.scopes || ' ' like '% openid %'`)
        // One row per session and client, however many grants the client got in it.
        .groupBy(['grants.sid', 'grants.client_id', 'grants.user_id', 'users.username']),
    )
    .onConflict((conflict) => conflict.columns(['sid', 'client_id']).doNothing())
    .executeTakeFirst();
  return Number(result.numInsertedOrUpdatedRows ?? 0n);
}

export interface BackchannelLogoutKey {
  sid: string;
  client_id: string;
}

/** Pending deliveries whose attempt is due, with attempts left, that no instance holds, oldest first. */
export async function dueBackchannelLogouts(db: Kysely<Database>, now: number, limit: number, maxAttempts: number): Promise<BackchannelLogoutKey[]> {
  return db
    .selectFrom('backchannel_logouts')
    .select(['sid', 'client_id'])
    .where(takeableAt(now, maxAttempts))
    .orderBy('next_attempt_at')
    .limit(limit)
    .execute();
}

/** What an instance that claimed a delivery needs to make it. */
export interface ClaimedBackchannelLogout extends BackchannelLogoutKey {
  user_id: string;
  username: string;
  /** Where the session end came from; null: the command line. */
  address: string | null;
  /** This attempt's number, from 1. */
  attempts: number;
  claimed_until: number;
}

/**
 * Claims the delivery for one attempt until `until`: one conditional update, so that of the
 * instances that found it due, exactly one gets it (undefined for the others, and once
 * `maxAttempts` were made).
 */
export async function claimBackchannelLogout(
  db: Kysely<Database>,
  key: BackchannelLogoutKey,
  now: number,
  until: number,
  maxAttempts: number,
): Promise<ClaimedBackchannelLogout | undefined> {
  const claimed = await db
    .updateTable('backchannel_logouts')
    .set((eb) => ({ claimed_until: until, attempts: eb('attempts', '+', 1) }))
    .where('sid', '=', key.sid)
    .where('client_id', '=', key.client_id)
    .where(takeableAt(now, maxAttempts))
    .returning(['sid', 'client_id', 'user_id', 'username', 'attempts', 'claimed_until', 'address'])
    .executeTakeFirst();
  if (!claimed) return undefined;
  // Kept with the row since migration 20261128_002 (the person may since have been deleted); read for older rows.
  const username = claimed.username ?? (await db.selectFrom('users').select('username').where('id', '=', claimed.user_id).executeTakeFirst())?.username;
  return username === undefined ? undefined : { ...claimed, attempts: Number(claimed.attempts), claimed_until: until, username };
}

/**
 * Records the outcome of a claimed attempt: delivered, failed for good, or to be tried again
 * at `retryAt`. Only while the claim is still the caller's.
 */
export async function finishBackchannelLogout(
  db: Kysely<Database>,
  claimed: ClaimedBackchannelLogout,
  outcome: AttemptOutcome<'delivered' | 'failed'>,
): Promise<void> {
  await db
    .updateTable('backchannel_logouts')
    .set(outcomeColumns(outcome))
    .where('sid', '=', claimed.sid)
    .where('client_id', '=', claimed.client_id)
    .where('claimed_until', '=', claimed.claimed_until)
    .execute();
}
