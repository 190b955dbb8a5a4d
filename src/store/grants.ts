/**
 * Grants, and the writes that change a grant together with its tokens. The exactly-once
 * steps — consuming a code (codes.ts), rotating a refresh token (here) — are each a single
 * conditional UPDATE inside a transaction: the database, not application code, decides
 * which of several concurrent requests wins. A token is live only while its grant is not
 * revoked, and every validity check joins the grant (tokens.ts), so a revocation that
 * commits at any point of a concurrent rotation still leaves nothing alive. Both steps write
 * their audit event in the same transaction, so it commits with the change.
 */
import type { Kysely, Transaction } from 'kysely';
import { insertAuditEvent, type AuditEventRow } from './audit-events.ts';
import { prepare } from './prepared.ts';
import type { Database } from './schema.ts';
import { insertTokens, markRefreshTokenRotated, type IssuedTokens } from './tokens.ts';

export interface NewGrant {
  id: string;
  clientId: string;
  userId: string | null;
  scopes: string;
}

/** How an attempt to rotate a refresh token ended: only the first rotation issues anything. */
export type Rotation = 'rotated' | 'already_rotated' | 'grant_revoked';

/** Thrown inside a transaction to roll it back when its conditional write lost the race. */
export class LostRace extends Error {
  readonly outcome: Exclude<Rotation, 'rotated'> | 'code_consumed';
  constructor(outcome: LostRace['outcome']) {
    super(outcome);
    this.outcome = outcome;
  }
}

function grantExpiry(tokens: IssuedTokens): number {
  return Math.max(tokens.accessExpiresAt, tokens.refreshHash === null ? 0 : tokens.refreshExpiresAt);
}

/** A grant with its first tokens, for grants that start without a code (client_credentials). */
export async function insertGrant(db: Kysely<Database>, grant: NewGrant, tokens: IssuedTokens, now: number): Promise<void> {
  await db.transaction().execute((trx) => insertGrantWithTokens(db, trx, grant, tokens, now));
}

const insertGrantRow = prepare((db, p: NewGrant & { now: number; expiresAt: number }) =>
  db.insertInto('grants').values({
    id: p.id,
    client_id: p.clientId,
    user_id: p.userId,
    scopes: p.scopes,
    created_at: p.now,
    last_used_at: p.now,
    revoked_at: null,
    expires_at: p.expiresAt,
  }),
);

/** The grant and its first tokens, inside the caller's transaction (a code exchange's, say). */
export async function insertGrantWithTokens(db: Kysely<Database>, trx: Transaction<Database>, grant: NewGrant, tokens: IssuedTokens, now: number): Promise<void> {
  await insertGrantRow.execute(db, { ...grant, now, expiresAt: grantExpiry(tokens) }, trx);
  await insertTokens(db, trx, grant.id, tokens, now);
}

const useGrant = prepare((db, p: { id: string; now: number; expiresAt: number }) =>
  db.updateTable('grants').set({ last_used_at: p.now, expires_at: p.expiresAt }).where('id', '=', p.id).where('revoked_at', 'is', null),
);

/**
 * Marks the refresh token rotated, records its successor (and the sealed successor pair
 * for the grace window), and stores the new tokens with the audit event `refreshed`, all or
 * nothing. Issues nothing when the
 * token had already been rotated, by an earlier or a concurrent request, or when its grant
 * has been revoked meanwhile.
 */
export async function rotateRefreshToken(
  db: Kysely<Database>,
  refresh: { hash: string; grantId: string },
  successor: IssuedTokens & { box: string | null },
  now: number,
  refreshed: AuditEventRow,
): Promise<Rotation> {
  try {
    await db.transaction().execute(async (trx) => {
      // The grant row first: revocation writes that same row, so the two serialize on it. A
      // rotation ordered after a revocation sees it here and issues nothing (rather than
      // answering with tokens that are dead on arrival); one ordered before has its new
      // tokens revoked with the rest.
      const live = await useGrant.affected(db, { id: refresh.grantId, now, expiresAt: grantExpiry(successor) }, trx);
      if (live !== 1n) throw new LostRace('grant_revoked');
      const rotated = await markRefreshTokenRotated(db, trx, { hash: refresh.hash, now, successorHash: successor.refreshHash, successorBox: successor.box });
      if (rotated !== 1n) throw new LostRace('already_rotated');
      await insertTokens(db, trx, refresh.grantId, successor, now);
      await insertAuditEvent(db, refreshed, trx);
    });
    return 'rotated';
  } catch (error) {
    if (error instanceof LostRace && error.outcome !== 'code_consumed') return error.outcome;
    throw error;
  }
}

/**
 * Revokes grants: every access and refresh token of them dies at once (validity joins the
 * grant). The rows stay until purge so that later reuse is still recognised. Returns the ids
 * of the grants this call revoked.
 */
export async function revokeGrants(
  db: Kysely<Database>,
  where: { grantId: string } | { userId: string } | { userId: string; clientId: string },
  now: number,
): Promise<string[]> {
  let query = db.updateTable('grants').set({ revoked_at: now }).where('revoked_at', 'is', null);
  if ('grantId' in where) query = query.where('id', '=', where.grantId);
  if ('userId' in where) query = query.where('user_id', '=', where.userId);
  if ('clientId' in where) query = query.where('client_id', '=', where.clientId);
  const rows = await query.returning('id').execute();
  return rows.map((r) => r.id);
}
