/**
 * Grants, and the writes that change a grant together with its tokens. The exactly-once
 * steps — consuming a code (codes.ts), rotating a refresh token (here) — are each a single
 * conditional UPDATE inside a transaction: the database, not application code, decides
 * which of several concurrent requests wins. A token is live only while its grant is not
 * revoked, and every validity check joins the grant (tokens.ts), so a revocation that
 * commits at any point of a concurrent rotation still leaves nothing alive. Both steps write
 * their audit event in the same transaction, so it commits with the change.
 *
 * Every write that issues tokens checks its parties again in its first, conditional
 * statement (SPEC §4.2): the client still exists, unblocked, with the scopes the caller decided by, and
 * the user (if any) is still enabled. A client deleted, a user disabled or a client's scopes
 * changed since the caller read them makes the write find nothing — never a foreign-key
 * violation — and issues nothing.
 */
import type { ExpressionBuilder, Kysely, Transaction } from 'kysely';
import { insertAuditEvent, type AuditEventRow } from './audit-events.ts';
import { lockedForShare, prepare } from './prepared.ts';
import type { Database } from './schema.ts';
import { insertTokens, markRefreshTokenRotated, type IssuedTokens } from './tokens.ts';

export interface NewGrant {
  id: string;
  clientId: string;
  userId: string | null;
  /** The resource server its tokens are for. */
  resourceId: string;
  scopes: string;
  /** The client's scopes as the caller read them to decide `scopes`: the grant is created only while they are still the client's. */
  clientScopes: string;
}

/**
 * How an attempt to rotate a refresh token ended: only the first rotation issues anything,
 * and only while the grant is usable — not revoked, its client still with the scopes the
 * caller read, its user enabled.
 */
export type Rotation = 'rotated' | 'already_rotated' | 'grant_unusable';

/** Thrown inside a transaction to roll it back when its conditional write lost the race. */
export class LostRace extends Error {
  readonly outcome: Exclude<Rotation, 'rotated'> | 'code_consumed' | 'parties_changed';
  constructor(outcome: LostRace['outcome']) {
    super(outcome);
    this.outcome = outcome;
  }
}

function grantExpiry(tokens: IssuedTokens): number {
  return Math.max(tokens.accessExpiresAt, tokens.refreshHash === null ? 0 : tokens.refreshExpiresAt);
}

/**
 * A grant with its first tokens, for grants that start without a code (client_credentials);
 * false, and nothing stored, when the client was deleted or its scopes changed meanwhile.
 */
export async function insertGrant(db: Kysely<Database>, grant: NewGrant, tokens: IssuedTokens, now: number): Promise<boolean> {
  try {
    await db.transaction().execute((trx) => insertGrantWithTokens(db, trx, grant, tokens, now));
    return true;
  } catch (error) {
    if (error instanceof LostRace) return false;
    throw error;
  }
}

type GrantRow = NewGrant & { now: number; expiresAt: number };

/** The new grant's columns, as selected from its client's row: what both grant inserts share. */
function grantFromClient(eb: ExpressionBuilder<Database, 'clients'>, p: GrantRow) {
  return [
    eb.val(p.id).as('id'),
    eb.ref('clients.id').as('client_id'),
    eb.val(p.resourceId).as('resource_id'),
    eb.val(p.scopes).as('scopes'),
    eb.cast<number>(eb.val(p.now), 'bigint').as('created_at'),
    eb.cast<number>(eb.val(p.now), 'bigint').as('last_used_at'),
    eb.cast<number>(eb.val(p.expiresAt), 'bigint').as('expires_at'),
  ] as const;
}

// INSERT … SELECT from the parties' rows, locked for share on PostgreSQL: the grant is
// inserted only when they are as the caller read them, and they stay so until it commits.
const insertUserGrantRow = prepare((db, p: GrantRow & { userId: string }) =>
  db
    .insertInto('grants')
    .columns(['id', 'client_id', 'resource_id', 'scopes', 'created_at', 'last_used_at', 'expires_at', 'user_id'])
    .expression(
      lockedForShare(
        db,
        db
          .selectFrom(['clients', 'users'])
          .select((eb) => [...grantFromClient(eb, p), 'users.id as user_id'])
          .where('clients.id', '=', p.clientId)
          .where('clients.scopes', '=', p.clientScopes)
          .where('clients.blocked', '=', 0)
          .where('users.id', '=', p.userId)
          .where('users.disabled', '=', 0),
      ),
    ),
);

const insertClientGrantRow = prepare((db, p: GrantRow) =>
  db
    .insertInto('grants')
    .columns(['id', 'client_id', 'resource_id', 'scopes', 'created_at', 'last_used_at', 'expires_at'])
    .expression(
      lockedForShare(
        db,
        db
          .selectFrom('clients')
          .select((eb) => grantFromClient(eb, p))
          .where('clients.id', '=', p.clientId)
          .where('clients.scopes', '=', p.clientScopes)
          .where('clients.blocked', '=', 0),
      ),
    ),
);

/**
 * The grant and its first tokens, inside the caller's transaction (a code exchange's, say).
 * Throws LostRace('parties_changed') when the client is gone or its scopes are no longer
 * those the caller read, or the user is disabled.
 */
export async function insertGrantWithTokens(db: Kysely<Database>, trx: Transaction<Database>, grant: NewGrant, tokens: IssuedTokens, now: number): Promise<void> {
  const row = { ...grant, now, expiresAt: grantExpiry(tokens) };
  const { userId } = row;
  const inserted = userId === null ? await insertClientGrantRow.affected(db, row, trx) : await insertUserGrantRow.affected(db, { ...row, userId }, trx);
  if (inserted !== 1n) throw new LostRace('parties_changed');
  await insertTokens(db, trx, grant.id, tokens, now);
}

// Revocation writes this same row, so the two serialize on it; the parties are only read
// (a token row references the grant, which this holds, not the client or the user). A delete
// or a disable committing after this read revokes the grant, new tokens and all, once this
// transaction commits.
const useGrant = prepare((db, p: { id: string; now: number; expiresAt: number; clientScopes: string }) =>
  db
    .updateTable('grants')
    .set({ last_used_at: p.now, expires_at: p.expiresAt })
    .where('id', '=', p.id)
    .where('revoked_at', 'is', null)
    .where((eb) =>
      eb.exists(eb.selectFrom('clients').select('clients.id').whereRef('clients.id', '=', 'grants.client_id').where('clients.scopes', '=', p.clientScopes).where('clients.blocked', '=', 0)),
    )
    .where((eb) =>
      eb.or([
        eb('grants.user_id', 'is', null),
        eb.exists(eb.selectFrom('users').select('users.id').whereRef('users.id', '=', 'grants.user_id').where('users.disabled', '=', 0)),
      ]),
    ),
);

/**
 * Marks the refresh token rotated, records its successor (and the sealed successor pair
 * for the grace window), and stores the new tokens with the audit event `refreshed`, all or
 * nothing. Issues nothing when the token had already been rotated, by an earlier or a
 * concurrent request, or when its grant has become unusable meanwhile: revoked, its client
 * deleted or its scopes no longer `clientScopes` (as the caller read them), its user disabled.
 */
export async function rotateRefreshToken(
  db: Kysely<Database>,
  refresh: { hash: string; grantId: string; clientScopes: string },
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
      const usable = await useGrant.affected(db, { id: refresh.grantId, clientScopes: refresh.clientScopes, now, expiresAt: grantExpiry(successor) }, trx);
      if (usable !== 1n) throw new LostRace('grant_unusable');
      const rotated = await markRefreshTokenRotated(db, trx, { hash: refresh.hash, now, successorHash: successor.refreshHash, successorBox: successor.box });
      if (rotated !== 1n) throw new LostRace('already_rotated');
      await insertTokens(db, trx, refresh.grantId, successor, now);
      await insertAuditEvent(db, refreshed, trx);
    });
    return 'rotated';
  } catch (error) {
    if (error instanceof LostRace && (error.outcome === 'already_rotated' || error.outcome === 'grant_unusable')) return error.outcome;
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
  where: { grantId: string } | { userId: string } | { clientId: string } | { userId: string; clientId: string },
  now: number,
): Promise<string[]> {
  let query = db.updateTable('grants').set({ revoked_at: now }).where('revoked_at', 'is', null);
  if ('grantId' in where) query = query.where('id', '=', where.grantId);
  if ('userId' in where) query = query.where('user_id', '=', where.userId);
  if ('clientId' in where) query = query.where('client_id', '=', where.clientId);
  const rows = await query.returning('id').execute();
  return rows.map((r) => r.id);
}
