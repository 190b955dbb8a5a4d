/**
 * Every write that spans tables, each all or nothing: a code with its audit row, the
 * exchange of a code-like credential, a client_credentials grant, the rotation of a refresh
 * token, a revocation with its audit row. Each is one transaction of small
 * statements on SQLite and one statement of gated steps on PostgreSQL (chained-writes.ts),
 * built from the table files' queries; the table files hold only queries of their own table.
 *
 * The exactly-once steps — consuming a code (codes.ts, device-codes.ts), rotating a refresh
 * token (tokens.ts) — are each a single conditional UPDATE among the writes of one
 * transaction (SQLite) or of one statement (PostgreSQL): the database, not application code,
 * decides which of several concurrent requests wins. A token is live only while its grant is
 * not revoked, and every validity check joins the grant (tokens.ts `liveToken`, `grantInForce`), so a
 * revocation that commits at any point of a concurrent rotation still leaves nothing alive.
 * Every such write stores its audit event in the same transaction or statement, so it
 * commits with the change.
 *
 * Every write that issues tokens checks its parties again in its first, conditional step
 * (SPEC §4.2): the client still exists, unblocked, with the scopes the caller decided by, and
 * the user (if any) is still enabled. A client deleted, a user disabled or a client's scopes
 * changed since the caller read them makes the step find nothing — never a foreign-key
 * violation — and issues nothing.
 *
 * Not here: the writes of a person's factors, which touch no grant and live with their tables,
 * each one transaction with its audit rows — second factors, the second step of a login and
 * its single-use proofs (second-factors.ts `allOrNothing`, `deleteApp`, `replaceRecoveryCodes`,
 * `deleteAllFactors`), passkeys (passkeys.ts `insertPasskey` with the session that proves it,
 * `deletePasskey`), sessions (sessions.ts `upgradeSession`, `consumeSession`) — and client
 * administration's (clients.ts), whose revocations come here.
 */
import type { Kysely, QueryCreator } from 'kysely';
import { auditArgs, auditRowOf, insertAuditEvent, insertAuditRowQuery, type AuditArgs, type AuditEventRow } from './audit-events.ts';
import { after, onPostgres, rowCounts, writeTogether } from './chained-writes.ts';
import { consumeCode, insertCodeRow, type Consume, type ConsumeArgs, type NewCode } from './codes.ts';
import { consumeDeviceCode } from './device-codes.ts';
import {
  grantExpiry,
  grantRow,
  grantUsable,
  insertClientGrant,
  insertUserGrant,
  revokeQuery,
  USER_GRANT_COLUMNS,
  useGrant,
  userGrantParties,
  userGrantRow,
  type GrantRevocation,
  type RevokedBy,
  type GrantRow,
  type GrantsToRevoke,
  type GrantUse,
  type NewGrant,
  type UserGrantRow,
} from './grants.ts';
import { inGroupCommit } from './group-commit.ts';
import { prepare, type PreparedQuery } from './prepared.ts';
import type { Database } from './schema.ts';
import {
  insertAccessTokenRow,
  insertRefreshTokenRow,
  insertTokens,
  markRotated,
  tokenRows,
  type IssuedTokens,
  type RotationMark,
  type TokenRows,
} from './tokens.ts';

const insertCodeAlone = prepare(insertCodeRow);

/** PostgreSQL: the code and its audit row in one statement. */
const insertCodeStatement = prepare((db, p: NewCode & AuditArgs) =>
  db
    .with('code', () => insertCodeRow(db, p).returning('hash'))
    .with('audit', (steps) => insertAuditRowQuery(db, auditRowOf(p), after(steps, 'code')))
    .selectNoFrom((eb) => rowCounts(eb, ['code'])),
);

/** Stores the code with the audit event `issued`, both or neither. */
export async function insertCode(db: Kysely<Database>, code: NewCode, issued: AuditEventRow): Promise<void> {
  await writeTogether(db, 'stored', {
    decidedBy: {},
    statement: () => insertCodeStatement.first(db, { ...code, ...auditArgs(issued) }),
    steps: [(trx) => insertCodeAlone.execute(db, code, trx), (trx) => insertAuditEvent(db, issued, trx)],
  });
}

/**
 * How an exchange ended: only one exchange of a code issues anything, and only while the
 * grant's parties are as the caller read them. `code_consumed`: an earlier or a concurrent
 * request consumed the code, or it was voided.
 */
export type Exchange = 'exchanged' | 'code_consumed' | 'parties_changed';

export type Exchanger = (db: Kysely<Database>, hash: string, grant: NewGrant, tokens: IssuedTokens, now: number, issued: AuditEventRow) => Promise<Exchange>;

/**
 * The exchange of one kind of code-like credential: consumes it with `consume`, and creates
 * its grant and first tokens with the audit event `issued`, all or nothing.
 *
 * SQLite, in one transaction: the grant from its parties (none: `parties_changed`), then
 * the consumption (nothing: `code_consumed`), then the tokens and the audit row; a lost
 * race rolls the grant back. PostgreSQL, in one statement that cannot roll back (see
 * chained-writes.ts), so the order changes — the parties, locked for share, then the
 * consumption gated on them, then the grant gated on the consumption (the code may name the
 * grant before it is inserted: foreign keys are checked at the end of the statement), then
 * the tokens and the audit row gated on the grant. Races, on PostgreSQL:
 * - N exchanges of one code: each `consumed` waits for the one before to commit, then
 *   re-checks the code's newest version, finds it consumed and skips it; only the first
 *   writes anything, the others answer `code_consumed`;
 * - the code voided (deleted) meanwhile: `consumed` finds no row: `code_consumed`;
 * - a client deleted, blocked or changed, or a user disabled, committed before `parties`
 *   takes its locks: the locked read waits for it, re-checks, finds no row: nothing is
 *   consumed or written, `parties_changed`; one that comes after waits for this statement
 *   to commit, and then revokes (or, deleting, removes) the grant it made.
 */
function codeExchange(consume: Consume): Exchanger {
  const consumeAlone = prepare(consume);
  const statement = prepare((db, p: UserGrantRow & ConsumeArgs & TokenRows & AuditArgs) =>
    db
      .with('parties', () => userGrantParties(db, p))
      .with('consumed', (steps) => consume(db, p).where(after(steps, 'parties')).returning('hash'))
      .with('new_grant', (steps) =>
        steps
          .insertInto('grants')
          .columns(USER_GRANT_COLUMNS)
          .expression(steps.selectFrom('parties').select(USER_GRANT_COLUMNS).where(after(steps, 'consumed')))
          .returning('id'),
      )
      .with('access', (steps) => insertAccessTokenRow(db, p, after(steps, 'new_grant')))
      .with('refresh', (steps) => insertRefreshTokenRow(db, p, after(steps, 'new_grant')))
      .with('audit', (steps) => insertAuditRowQuery(db, auditRowOf(p), after(steps, 'new_grant')))
      .selectNoFrom((eb) => rowCounts(eb, ['parties', 'consumed'])),
  );
  return async (db, hash, grant, tokens, now, issued) => {
    const { userId } = grant;
    if (userId === null) throw new Error('a code is always exchanged for a grant with a user');
    const row = userGrantRow(grant, tokens, now, userId);
    const consumption = { hash, grantId: grant.id, now };
    const rows = tokenRows(grant.id, tokens, now);
    return writeTogether(db, 'exchanged', {
      decidedBy: { parties: 'parties_changed', consumed: 'code_consumed' },
      statement: () => statement.first(db, { ...row, ...consumption, ...rows, ...auditArgs(issued) }),
      steps: [
        { write: (trx) => insertUserGrant.affected(db, row, trx), decides: 'parties' },
        { write: (trx) => consumeAlone.affected(db, consumption, trx), decides: 'consumed' },
        (trx) => insertTokens(db, trx, rows),
        (trx) => insertAuditEvent(db, issued, trx),
      ],
    });
  };
}

/** Consumes the authorization code and creates its grant and first tokens, with the audit event `issued`, all or nothing. */
export const exchangeCode: Exchanger = codeExchange(consumeCode);

/** Consumes the approved device code and creates its grant, first tokens and audit event `issued`, all or nothing. */
export const exchangeDeviceCode: Exchanger = codeExchange(consumeDeviceCode);

/** The one statement of a client_credentials issuance on PostgreSQL: the grant, then its token and audit row, gated on it. */
const issueClientGrantStatement = prepare((db, p: GrantRow & TokenRows & AuditArgs) =>
  db
    .with('new_grant', () => insertClientGrant(db, p).returning('id'))
    .with('access', (steps) => insertAccessTokenRow(db, p, after(steps, 'new_grant')))
    .with('audit', (steps) => insertAuditRowQuery(db, auditRowOf(p), after(steps, 'new_grant')))
    .selectNoFrom((eb) => rowCounts(eb, ['new_grant'])),
);
const insertClientGrantAlone = prepare(insertClientGrant);

/**
 * The same for a grant with a user and no code (a jwt-bearer assertion, SPEC §4.11): the
 * grant from its parties, then its tokens and audit row — with a refresh token (h's publisher
 * grant tokens) or without (an ID-JAG).
 */
const issueUserGrantWithRefresh = prepare((db, p: UserGrantRow & TokenRows & AuditArgs) =>
  db
    .with('new_grant', () => db.insertInto('grants').columns(USER_GRANT_COLUMNS).expression(userGrantParties(db, p)).returning('id'))
    .with('access', (steps) => insertAccessTokenRow(db, p, after(steps, 'new_grant')))
    .with('refresh', (steps) => insertRefreshTokenRow(db, p, after(steps, 'new_grant')))
    .with('audit', (steps) => insertAuditRowQuery(db, auditRowOf(p), after(steps, 'new_grant')))
    .selectNoFrom((eb) => rowCounts(eb, ['new_grant'])),
);
const issueUserGrantAlone = prepare((db, p: UserGrantRow & TokenRows & AuditArgs) =>
  db
    .with('new_grant', () => db.insertInto('grants').columns(USER_GRANT_COLUMNS).expression(userGrantParties(db, p)).returning('id'))
    .with('access', (steps) => insertAccessTokenRow(db, p, after(steps, 'new_grant')))
    .with('audit', (steps) => insertAuditRowQuery(db, auditRowOf(p), after(steps, 'new_grant')))
    .selectNoFrom((eb) => rowCounts(eb, ['new_grant'])),
);

/**
 * A grant with its first token(s) and the audit event `issued`, for grants that start without
 * a code (client_credentials; a jwt-bearer assertion, with or without a user), all or nothing; false, and nothing stored, when the client
 * was deleted, blocked or its scopes changed meanwhile.
 */
export async function insertGrant(db: Kysely<Database>, grant: NewGrant, tokens: IssuedTokens, now: number, issued: AuditEventRow): Promise<boolean> {
  if (grant.userId !== null) return insertUserGrantWithTokens(db, userGrantRow(grant, tokens, now, grant.userId), tokens, now, issued);
  const row = grantRow(grant, tokens, now);
  const rows = tokenRows(grant.id, tokens, now);
  const outcome = await writeTogether(db, 'issued', {
    decidedBy: { new_grant: 'parties_changed' },
    statement: () => issueClientGrantStatement.first(db, { ...row, ...rows, ...auditArgs(issued) }),
    steps: [
      { write: (trx) => insertClientGrantAlone.affected(db, row, trx), decides: 'new_grant' },
      (trx) => insertTokens(db, trx, rows),
      (trx) => insertAuditEvent(db, issued, trx),
    ],
  });
  return outcome === 'issued';
}

/** `insertGrant` for a grant with a user (its user still enabled, as for a code exchange). */
async function insertUserGrantWithTokens(db: Kysely<Database>, row: UserGrantRow, tokens: IssuedTokens, now: number, issued: AuditEventRow): Promise<boolean> {
  const rows = tokenRows(row.id, tokens, now);
  const outcome = await writeTogether(db, 'issued', {
    decidedBy: { new_grant: 'parties_changed' },
    statement: () => (rows.refreshHash === null ? issueUserGrantAlone : issueUserGrantWithRefresh).first(db, { ...row, ...rows, ...auditArgs(issued) }),
    steps: [
      { write: (trx) => insertUserGrant.affected(db, row, trx), decides: 'new_grant' },
      (trx) => insertTokens(db, trx, rows),
      (trx) => insertAuditEvent(db, issued, trx),
    ],
  });
  return outcome === 'issued';
}

/**
 * How an attempt to rotate a refresh token ended: only the first rotation issues anything,
 * and only while the grant is usable — not revoked, its client still with the scopes the
 * caller read, its user enabled.
 */
export type Rotation = 'rotated' | 'already_rotated' | 'grant_unusable';

type RotationArgs = GrantUse & RotationMark & TokenRows & AuditArgs;

// SQLite, in one transaction: the grant row first (revocation writes that same row, so the
// two serialize on it: a rotation ordered after a revocation sees it here and issues nothing
// rather than answering with tokens that are dead on arrival; one ordered before has its new
// tokens revoked with the rest), then the exactly-once mark, then the new rows; a lost race
// rolls it all back.
const useUsableGrant = prepare((db, p: GrantUse) => useGrant(db, p).where((eb) => grantUsable(eb, p)));
const useUsableGrantSameDay = prepare((db, p: GrantUse) => useGrant(db, p, 'unchanged').where((eb) => grantUsable(eb, p)));
const markRotatedAlone = prepare(markRotated);

/** PostgreSQL: the grant row, locked as revocation's UPDATE locks it, when it is usable (`grantUsable`): the first step of a write that adds to a grant. */
const lockUsableGrant = (db: Kysely<Database>, p: { grantId: string; clientScopes: string }) =>
  db
    .selectFrom('grants')
    .select('grants.id')
    .where('grants.id', '=', p.grantId)
    .where((eb) => grantUsable(eb, p))
    .forNoKeyUpdate();

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
    .with('usable', () => lockUsableGrant(db, p))
    .with('rotated', (steps) => markRotated(db, p).where(after(steps, 'usable')).returning('hash'))
    .with('used', (steps) => useGrant(db, p).where(after(steps, 'rotated')))
    .with('access', (steps) => insertAccessTokenRow(db, p, after(steps, 'rotated')))
    .with('refresh', (steps) => insertRefreshTokenRow(db, p, after(steps, 'rotated')))
    .with('audit', (steps) => insertAuditRowQuery(db, auditRowOf(p), after(steps, 'rotated')))
    .selectNoFrom((eb) => rowCounts(eb, ['usable', 'rotated'])),
);

/**
 * Marks the refresh token rotated, records its successor (and the sealed successor pair
 * for the grace window), and stores the new tokens with the audit event `refreshed`, all or
 * nothing. Issues nothing when the token had already been rotated, by an earlier or a
 * concurrent request, or when its grant has become unusable meanwhile: revoked, its client
 * deleted or its scopes no longer `clientScopes` (as the caller read them), its user disabled.
 * `refresh.purgeAfter`: the grant's purge day as the caller read it, which on SQLite is written
 * only if it moves (`useGrant`).
 */
export async function rotateRefreshToken(
  db: Kysely<Database>,
  refresh: { hash: string; grantId: string; clientScopes: string; purgeAfter: number },
  successor: IssuedTokens & { box: string | null },
  now: number,
  refreshed: AuditEventRow,
): Promise<Rotation> {
  const use: GrantUse = { grantId: refresh.grantId, clientScopes: refresh.clientScopes, now, ...grantExpiry(successor) };
  const sameDay = use.purgeAfter === refresh.purgeAfter;
  const mark: RotationMark = { hash: refresh.hash, now, successorHash: successor.refreshHash };
  const rows = tokenRows(refresh.grantId, successor, now, successor.box);
  return writeTogether(db, 'rotated', {
    decidedBy: { usable: 'grant_unusable', rotated: 'already_rotated' },
    statement: () => rotateStatement.first(db, { ...use, ...mark, ...rows, ...auditArgs(refreshed) }),
    steps: [
      { write: (trx) => (sameDay ? useUsableGrantSameDay : useUsableGrant).affected(db, use, trx), decides: 'usable' },
      { write: (trx) => markRotatedAlone.affected(db, mark, trx), decides: 'rotated' },
      (trx) => insertTokens(db, trx, rows),
      (trx) => insertAuditEvent(db, refreshed, trx),
    ],
  });
}

/** A token added to a live grant: the grant's id, and its client's scopes as the caller read them. */
type AddedTokenArgs = { grantId: string; clientScopes: string; now: number } & TokenRows & AuditArgs;

// SQLite: the grant row first, written only while it is usable (revocation writes that row
// too, so the two serialize on it), then the token and its audit row; PostgreSQL: the grant
// row locked as a rotation locks it, then the same writes gated on it.
const touchUsableGrant = prepare((db, p: { grantId: string; clientScopes: string; now: number }) =>
  db
    .updateTable('grants')
    .set({ last_used_at: p.now })
    .where('grants.id', '=', p.grantId)
    .where((eb) => grantUsable(eb, p)),
);
const addTokenStatement = prepare((db, p: AddedTokenArgs) =>
  db
    .with('usable', () => lockUsableGrant(db, p))
    .with('used', (steps) => db.updateTable('grants').set({ last_used_at: p.now }).where('grants.id', '=', p.grantId).where(after(steps, 'usable')))
    .with('access', (steps) => insertAccessTokenRow(db, p, after(steps, 'usable')))
    .with('audit', (steps) => insertAuditRowQuery(db, auditRowOf(p), after(steps, 'usable')))
    .selectNoFrom((eb) => rowCounts(eb, ['usable'])),
);

/**
 * Adds an access token to a grant that is still usable (as `grantUsable` says), with its
 * audit event, all or nothing: a token exchange's (SPEC §4.15), which belongs to the subject
 * token's grant, so that revoking the grant — by its refresh token, its client, its person —
 * ends it with the rest. False, and nothing stored, when the grant became unusable meanwhile.
 */
export async function addAccessToken(
  db: Kysely<Database>,
  grant: { grantId: string; clientScopes: string },
  tokens: IssuedTokens,
  now: number,
  issued: AuditEventRow,
): Promise<boolean> {
  const use = { ...grant, now };
  const rows = tokenRows(grant.grantId, tokens, now);
  const outcome = await writeTogether(db, 'added', {
    decidedBy: { usable: 'grant_unusable' },
    statement: () => addTokenStatement.first(db, { ...use, ...rows, ...auditArgs(issued) }),
    steps: [
      { write: (trx) => touchUsableGrant.affected(db, use, trx), decides: 'usable' },
      (trx) => insertTokens(db, trx, rows),
      (trx) => insertAuditEvent(db, issued, trx),
    ],
  });
  return outcome === 'added';
}

/** The arguments of a revocation, whatever its shape: the prepared statements take them all. */
type RevocationArgs = GrantRevocation & AuditArgs;

/** What goes with a revocation: which grants, and whether its audit row (PostgreSQL). */
interface RevocationShape {
  by: readonly RevokedBy[];
  recorded: boolean;
}

/**
 * PostgreSQL: the grants revoked, then the audit row, gated on them (chained-writes.ts): a
 * grant revoked already (by a concurrent revocation) is not recorded again.
 */
function revocationStatement(db: Kysely<Database>, shape: RevocationShape, p: RevocationArgs) {
  // Typed as the steps every shape has: the audit row is read by none of them.
  let statement: QueryCreator<Database & { revoked: { id: string } }> = db.with('revoked', () => revokeQuery(db, shape.by, p));
  if (shape.recorded) statement = statement.with('audit', (steps) => insertAuditRowQuery(db, auditRowOf(p), after(steps, 'revoked')));
  return statement.selectFrom('revoked').select('revoked.id');
}

/** Each shape of revocation compiled once, on first use (a handful: four kinds of `where`, with or without the audit row). */
const revocations = new Map<string, PreparedQuery<RevocationArgs, { id: string }>>();

function preparedRevocation(shape: RevocationShape): PreparedQuery<RevocationArgs, { id: string }> {
  const key = JSON.stringify(shape);
  let statement = revocations.get(key);
  if (!statement) {
    statement = prepare((db, p: RevocationArgs) => (onPostgres(db) ? revocationStatement(db, shape, p) : revokeQuery(db, shape.by, p)));
    revocations.set(key, statement);
  }
  return statement;
}

/**
 * Revokes grants: every access and refresh token of them dies at once (validity joins the
 * grant). The rows stay until purge so that later reuse is still recognised. Returns the ids
 * of the grants this call revoked. `recorded`: the audit event of this revocation, written
 * with it, and only if it revoked anything: on PostgreSQL in the same statement, on SQLite
 * in the same transaction.
 */
export async function revokeGrants(db: Kysely<Database>, where: GrantsToRevoke, now: number, recorded?: AuditEventRow): Promise<string[]> {
  const postgres = onPostgres(db);
  const shape: RevocationShape = { by: Object.keys(where) as RevocationShape['by'], recorded: postgres && recorded !== undefined };
  // Only the arguments of the shape are read.
  const args = { ...where, now, ...(recorded === undefined ? {} : auditArgs(recorded)) } as RevocationArgs;
  const statement = preparedRevocation(shape);
  if (postgres || recorded === undefined) return (await statement.execute(db, args)).rows.map((r) => r.id);
  // One grant's revocation changes a row or two; a person's or a client's, as many as they have.
  return inGroupCommit(db, 'grantId' in where ? 'bounded' : 'unbounded', async (trx) => {
    const ids = (await statement.execute(db, args, trx)).rows.map((r) => r.id);
    if (ids.length > 0) await insertAuditEvent(db, recorded, trx);
    return ids;
  });
}
