/**
 * Replay protection for assertions from others (SPEC §4.11): a `private_key_jwt` client
 * assertion, an ID-JAG, a publisher's grant token or a workload's token is accepted once.
 */
import { createHash } from 'node:crypto';
import type { Kysely } from 'kysely';
import { recordConsumedAssertion } from '../../store/consumed-assertions.ts';
import type { Database } from '../../store/schema.ts';

/** What consuming needs: the database (or a transaction on it, to consume with an audit row) and the clock. */
export interface ReplayStore {
  readonly db: Kysely<Database>;
  readonly now: () => number;
}

export interface AssertionUse {
  /** Who issued the assertion: its `iss` (a client ID, a trusted issuer's URL). Assertions of different issuers never collide. */
  issuer: string;
  /**
   * What identifies the assertion within its issuer: its `jti` when it has one, or — when the
   * profile allows none — a hash of the whole assertion (the caller decides which, and must
   * always decide the same way for one profile). Only a hash of issuer and id is stored.
   */
  id: string;
  /** Until when (epoch ms) a replay is refused: the assertion's `exp` (plus whatever leeway its verification allows). */
  expiresAt: number;
}

/**
 * The stored key: SHA-256 of issuer, NUL and id. An issuer never holds NUL (consumeAssertion
 * refuses one), so no other pair of strings maps to the same key.
 */
export function assertionKey(issuer: string, id: string): string {
  return createHash('sha256').update(issuer).update('\0').update(id).digest('base64url');
}

/**
 * Consumes an assertion: true the first time it is presented, false on any replay until
 * `expiresAt`. One conditional write (store/consumed-assertions.ts): of 20 concurrent
 * presentations exactly one gets true, across instances too when they share PostgreSQL.
 * Call it last, once everything else about the assertion has been checked, so that a refused
 * request consumes nothing.
 */
export async function consumeAssertion(store: ReplayStore, use: AssertionUse): Promise<boolean> {
  // Issuers are client IDs and trusted issuers' URLs, already known to the caller: none holds NUL.
  if (use.issuer.includes('\0')) return false;
  // A NumericDate may have a fraction (RFC 7519 §2), and so may `exp` × 1000: the column is an integer (bigint).
  return recordConsumedAssertion(store.db, assertionKey(use.issuer, use.id), Math.ceil(use.expiresAt), store.now());
}
