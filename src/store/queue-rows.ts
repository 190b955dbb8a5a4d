/**
 * What the queues in the database share (back-channel logouts, mail): the rule for a row an
 * instance may take for an attempt, and what finishing an attempt writes. Each queue's own
 * file names its table and key; the rows have the columns `state`, `next_attempt_at` and
 * `claimed_until` alike.
 */
import { sql, type SqlBool } from 'kysely';

/**
 * A row an instance may take for an attempt at `now`: pending, due, with attempts left, and
 * held by no instance (or by one whose claim has lapsed). A row whose last attempt's instance
 * died before recording it has none left: it is never taken again (and is purged with the
 * rest), rather than found due for ever and crowding out the others.
 */
export function takeableAt(now: number, maxAttempts: number) {
  return sql<SqlBool>`state = 'pending' and next_attempt_at <= ${now} and attempts < ${maxAttempts} and (claimed_until is null or claimed_until <= ${now})`;
}

/** How an attempt ended: for good (in `state`), or to be tried again at `retryAt`. */
export type AttemptOutcome<Final extends string> = { state: Final } | { retryAt: number };

/** The columns an attempt's outcome writes; the claim is let go either way. */
export function outcomeColumns<Final extends string>(outcome: AttemptOutcome<Final>) {
  return 'retryAt' in outcome ? { next_attempt_at: outcome.retryAt, claimed_until: null } : { state: outcome.state, claimed_until: null };
}
