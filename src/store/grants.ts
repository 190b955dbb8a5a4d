/**
 * Grants, and the writes that change a grant together with its tokens. The exactly-once
 * steps — consuming a code (codes.ts), rotating a refresh token (here) — are each a single
 * conditional UPDATE among the writes of one transaction (SQLite) or of one statement
 * (PostgreSQL, chained-writes.ts): the database, not application code, decides which of
 * several concurrent requests wins. A token is live only while its grant is not revoked, and
 * every validity check joins the grant (tokens.ts), so a revocation that commits at any
 * point of a concurrent rotation still leaves nothing alive. Both steps write their audit
 * event in the same transaction or statement, so it commits with the change.
 *
 * Every write that issues tokens checks its parties again in its first, conditional step
 * (SPEC §4.2): the client still exists, unblocked, with the scopes the caller decided by, and
 * the user (if any) is still enabled. A client deleted, a user disabled or a client's scopes
 * changed since the caller read them makes the step find nothing — never a foreign-key
 * violation — and issues nothing.
 */
import { sql, type ExpressionBuilder, type Kysely } from 'kysely';
import { auditArgs, auditRowOf, insertAuditEvent, insertAuditRowQuery, type AuditArgs, type AuditEventRow } from './audit-events.ts';
import { after, bigint, onPostgres, writeTogether } from './chained-writes.ts';
import { notifyIds } from './notify.ts';
import { lockedForShare, prepare, type PreparedQuery } from './prepared.ts';
import type { Database } from './schema.ts';
import { insertAccessTokenRow, insertRefreshTokenRow, insertTokens, markRotated, tokenRows, type IssuedTokens, type RotationMark, type TokenRows } from './tokens.ts';

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

function grantExpiry(tokens: IssuedTokens): number {
  return Math.max(tokens.accessExpiresAt, tokens.refreshHash === null ? 0 : tokens.refreshExpiresAt);
}

export type GrantRow = NewGrant & { now: number; expiresAt: number };
export type UserGrantRow = GrantRow & { userId: string };

export function grantRow(grant: NewGrant, tokens: IssuedTokens, now: number): GrantRow {
  return { ...grant, now, expiresAt: grantExpiry(tokens) };
}

/** The new grant's columns, as selected from its parties' rows: what both kinds of grant share. */
function grantFromClient(eb: ExpressionBuilder<Database, 'clients'>, p: GrantRow) {
  return [
    eb.val(p.id).as('id'),
    eb.ref('clients.id').as('client_id'),
    eb.val(p.resourceId).as('resource_id'),
    eb.val(p.scopes).as('scopes'),
    bigint(eb, p.now).as('created_at'),
    bigint(eb, p.now).as('last_used_at'),
    bigint(eb, p.expiresAt).as('expires_at'),
  ] as const;
}

export const USER_GRANT_COLUMNS = ['id', 'client_id', 'resource_id', 'scopes', 'created_at', 'last_used_at', 'expires_at', 'user_id'] as const;
const CLIENT_GRANT_COLUMNS = ['id', 'client_id', 'resource_id', 'scopes', 'created_at', 'last_used_at', 'expires_at'] as const;

// The new grant's row, selected from its parties' rows as the caller read them: no row when
// they have changed since — the client deleted, blocked or given other scopes, the user
// disabled. Locked for share on PostgreSQL, so that they stay so until the grant commits.

/** The parties of a user's grant: its client and its user. */
export const userParties = (db: Kysely<Database>, p: UserGrantRow) =>
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
  );

/** The party of a grant without a user (client_credentials): its client. */
const clientParty = (db: Kysely<Database>, p: GrantRow) =>
  lockedForShare(
    db,
    db
      .selectFrom('clients')
      .select((eb) => grantFromClient(eb, p))
      .where('clients.id', '=', p.clientId)
      .where('clients.scopes', '=', p.clientScopes)
      .where('clients.blocked', '=', 0),
  );

/** INSERT … SELECT from the parties: the grant exists only if they are as the caller read them. */
export const insertUserGrant = prepare((db, p: UserGrantRow) => db.insertInto('grants').columns(USER_GRANT_COLUMNS).expression(userParties(db, p)));
const insertClientGrant = (db: Kysely<Database>, p: GrantRow) => db.insertInto('grants').columns(CLIENT_GRANT_COLUMNS).expression(clientParty(db, p));

/** The one statement of a client_credentials issuance on PostgreSQL: the grant, then its token and audit row, gated on it. */
const issueClientGrantStatement = prepare((db, p: GrantRow & TokenRows & AuditArgs) =>
  db
    .with('new_grant', () => insertClientGrant(db, p).returning('id'))
    .with('access', () => insertAccessTokenRow(db, p, after('new_grant')))
    .with('audit', () => insertAuditRowQuery(db, auditRowOf(p), after('new_grant')))
    .selectNoFrom((eb) => [eb.selectFrom('new_grant').select(eb.fn.countAll<number>().as('n')).as('granted')]),
);
const insertClientGrantRow = prepare(insertClientGrant);

/**
 * A grant with its first token and the audit event `issued`, for grants that start without
 * a code (client_credentials), all or nothing; false, and nothing stored, when the client
 * was deleted, blocked or its scopes changed meanwhile.
 */
export async function insertGrant(db: Kysely<Database>, grant: NewGrant, tokens: IssuedTokens, now: number, issued: AuditEventRow): Promise<boolean> {
  const row = grantRow(grant, tokens, now);
  const rows = tokenRows(grant.id, tokens, now);
  const outcome = await writeTogether(db, 'issued', {
    statement: () => issueClientGrantStatement.first(db, { ...row, ...rows, ...auditArgs(issued) }),
    decidedBy: [['granted', 'parties_changed']],
    steps: [{ write: (trx) => insertClientGrantRow.affected(db, row, trx), lost: 'parties_changed' }, (trx) => insertTokens(db, trx, rows), (trx) => insertAuditEvent(db, issued, trx)],
  });
  return outcome === 'issued';
}

interface GrantUse {
  grantId: string;
  clientScopes: string;
  now: number;
  expiresAt: number;
}

/**
 * A grant that may still issue tokens: not revoked, its client still there, unblocked and
 * with the scopes the caller read, its user (if any) enabled. The parties are only read (a
 * token row references the grant, which the rotation holds, not the client or the user): a
 * delete or a disable committing after this read revokes the grant — new tokens and all —
 * once the rotation commits, since revocation writes the grant row the rotation holds.
 */
function grantUsable(eb: ExpressionBuilder<Database, 'grants'>, p: GrantUse) {
  return eb.and([
    eb('grants.revoked_at', 'is', null),
    eb.exists(eb.selectFrom('clients').select('clients.id').whereRef('clients.id', '=', 'grants.client_id').where('clients.scopes', '=', p.clientScopes).where('clients.blocked', '=', 0)),
    eb.or([
      eb('grants.user_id', 'is', null),
      eb.exists(eb.selectFrom('users').select('users.id').whereRef('users.id', '=', 'grants.user_id').where('users.disabled', '=', 0)),
    ]),
  ]);
}

/** The grant's use by a rotation: its last use, and its expiry moved to its newest token's. */
const useGrant = (db: Kysely<Database>, p: GrantUse) => db.updateTable('grants').set({ last_used_at: p.now, expires_at: p.expiresAt }).where('grants.id', '=', p.grantId);

type RotationArgs = GrantUse & RotationMark & TokenRows & AuditArgs;

// SQLite, in one transaction: the grant row first (revocation writes that same row, so the
// two serialize on it: a rotation ordered after a revocation sees it here and issues nothing
// rather than answering with tokens that are dead on arrival; one ordered before has its new
// tokens revoked with the rest), then the exactly-once mark, then the new rows; a lost race
// rolls it all back.
const useUsableGrant = prepare((db, p: GrantUse) => useGrant(db, p).where((eb) => grantUsable(eb, p)));
const markRotatedRow = prepare(markRotated);

// PostgreSQL, one statement that cannot roll back a step once it ran: the grant row is
// still taken first — locked FOR NO KEY UPDATE, the lock revocation's UPDATE takes too, by
// the same conditions as above — but written last, only once the mark has succeeded. Races:
// - a revocation (or another rotation) holding the grant row: `usable` waits for it, then
//   re-checks the row; revoked, it is skipped, nothing below runs: `grant_unusable`;
// - a revocation arriving after `usable`: it waits for this statement, then revokes the grant
//   with the tokens this statement issued;
// - two rotations of one token: the second waits at `usable` for the first to commit, then
//   `rotated` finds the token's newest version already marked and skips it (the snapshot
//   would still show it unmarked: the re-check decides), nothing below runs: `already_rotated`.
// Locks are taken grant first, then token, as by SQLite's order and by a client's or a
// user's deletion cascading from grants to tokens: no deadlock between them.
const rotateStatement = prepare((db, p: RotationArgs) =>
  db
    .with('usable', () =>
      db
        .selectFrom('grants')
        .select('grants.id')
        .where('grants.id', '=', p.grantId)
        .where((eb) => grantUsable(eb, p))
        .forNoKeyUpdate(),
    )
    .with('rotated', () => markRotated(db, p).where(after('usable')).returning('hash'))
    .with('used', () => useGrant(db, p).where(after('rotated')))
    .with('access', () => insertAccessTokenRow(db, p, after('rotated')))
    .with('refresh', () => insertRefreshTokenRow(db, p, after('rotated')))
    .with('audit', () => insertAuditRowQuery(db, auditRowOf(p), after('rotated')))
    .selectNoFrom((eb) => [eb.selectFrom('usable').select(eb.fn.countAll<number>().as('n')).as('usable'), eb.selectFrom('rotated').select(eb.fn.countAll<number>().as('n')).as('rotated')]),
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
  const use: GrantUse = { grantId: refresh.grantId, clientScopes: refresh.clientScopes, now, expiresAt: grantExpiry(successor) };
  const mark: RotationMark = { hash: refresh.hash, now, successorHash: successor.refreshHash, successorBox: successor.box };
  const rows = tokenRows(refresh.grantId, successor, now);
  return writeTogether(db, 'rotated', {
    statement: () => rotateStatement.first(db, { ...use, ...mark, ...rows, ...auditArgs(refreshed) }),
    decidedBy: [
      ['usable', 'grant_unusable'],
      ['rotated', 'already_rotated'],
    ],
    steps: [
      { write: (trx) => useUsableGrant.affected(db, use, trx), lost: 'grant_unusable' },
      { write: (trx) => markRotatedRow.affected(db, mark, trx), lost: 'already_rotated' },
      (trx) => insertTokens(db, trx, rows),
      (trx) => insertAuditEvent(db, refreshed, trx),
    ],
  });
}

export type GrantsToRevoke = { grantId: string } | { userId: string } | { clientId: string } | { userId: string; clientId: string };

/** The arguments of a revocation, whatever its shape: the prepared statements take them all. */
type RevocationArgs = { grantId: string; userId: string; clientId: string; now: number; channel: string } & AuditArgs;

function revokeQuery(db: Kysely<Database>, where: GrantsToRevoke, now: number) {
  let query = db.updateTable('grants').set({ revoked_at: now }).where('revoked_at', 'is', null);
  if ('grantId' in where) query = query.where('id', '=', where.grantId);
  if ('userId' in where) query = query.where('user_id', '=', where.userId);
  if ('clientId' in where) query = query.where('client_id', '=', where.clientId);
  return query.returning('id');
}

/** What goes with a revocation: which grants, whether its audit row, whether its fan-out message (PostgreSQL). */
interface RevocationShape {
  by: readonly ('grantId' | 'userId' | 'clientId')[];
  recorded: boolean;
  notifying: boolean;
}

const whereOf = (shape: RevocationShape, p: RevocationArgs) => Object.fromEntries(shape.by.map((key) => [key, p[key]])) as unknown as GrantsToRevoke;

/**
 * PostgreSQL: the grants revoked, then the audit row and the LISTEN/NOTIFY messages, both
 * gated on them (chained-writes.ts). The messages leave when the statement commits, and a
 * grant revoked already (by a concurrent revocation, whose statement sent its own) is neither
 * recorded nor told again.
 */
function revocationStatement(db: Kysely<Database>, shape: RevocationShape, p: RevocationArgs) {
  const where = whereOf(shape, p);
  type Statement = ReturnType<typeof withRevoked>;
  const withRevoked = () => db.with('revoked', () => revokeQuery(db, where, p.now));
  let statement: Statement = withRevoked();
  if (shape.recorded) statement = statement.with('audit', () => insertAuditRowQuery(db, auditRowOf(p), after('revoked'))) as unknown as Statement;
  if (shape.notifying) statement = statement.with('notified', () => notifyIds(p.channel, 'revoked')) as unknown as Statement;
  // A CTE that only reads runs only when read: reading `notified` is what sends its messages.
  return statement
    .selectFrom('revoked')
    .select('revoked.id')
    .$if(shape.notifying, (query) => query.select(sql<number>`(select count(*) from notified)`.as('messages')));
}

/** Each shape of revocation compiled once, on first use (a handful: four kinds of `where`, with or without each companion). */
const revocations = new Map<string, PreparedQuery<RevocationArgs, { id: string }>>();

function preparedRevocation(shape: RevocationShape): PreparedQuery<RevocationArgs, { id: string }> {
  const key = JSON.stringify(shape);
  let statement = revocations.get(key);
  if (!statement) {
    statement = prepare((db, p: RevocationArgs) => (onPostgres(db) ? revocationStatement(db, shape, p) : revokeQuery(db, whereOf(shape, p), p.now)));
    revocations.set(key, statement);
  }
  return statement;
}

export interface RevocationRecord {
  /** The audit event of this revocation: written with it, and only if it revoked anything. */
  recorded?: AuditEventRow;
  /** PostgreSQL: the LISTEN/NOTIFY channel of the revocation fan-out (events/revocations.ts), when it goes that way. */
  notifyChannel?: string;
}

/**
 * Revokes grants: every access and refresh token of them dies at once (validity joins the
 * grant). The rows stay until purge so that later reuse is still recognised. Returns the ids
 * of the grants this call revoked. On PostgreSQL, one statement with the audit row and the
 * fan-out's messages; on SQLite, a transaction with the audit row.
 */
export async function revokeGrants(db: Kysely<Database>, where: GrantsToRevoke, now: number, record: RevocationRecord = {}): Promise<string[]> {
  const { recorded, notifyChannel } = record;
  const postgres = onPostgres(db);
  const shape: RevocationShape = { by: Object.keys(where) as RevocationShape['by'], recorded: postgres && recorded !== undefined, notifying: postgres && notifyChannel !== undefined };
  // Only the arguments of the shape are read.
  const args = { ...where, now, channel: notifyChannel, ...(recorded === undefined ? {} : auditArgs(recorded)) } as RevocationArgs;
  const statement = preparedRevocation(shape);
  if (postgres || recorded === undefined) return (await statement.execute(db, args)).rows.map((r) => r.id);
  return db.transaction().execute(async (trx) => {
    const ids = (await statement.execute(db, args, trx)).rows.map((r) => r.id);
    if (ids.length > 0) await insertAuditEvent(db, recorded, trx);
    return ids;
  });
}
