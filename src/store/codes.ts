/**
 * Authorization codes. A code is used at most once: `exchangeCode` consumes it with one
 * conditional UPDATE in the transaction or statement that creates its grant (see grants.ts).
 * A code not yet exchanged can be voided (deleted) when the access it would give is taken away.
 */
import type { Kysely, UpdateQueryBuilder, UpdateResult } from 'kysely';
import { auditArgs, auditRowOf, insertAuditEvent, insertAuditRowQuery, type AuditArgs, type AuditEventRow } from './audit-events.ts';
import { after, writeTogether } from './chained-writes.ts';
import { grantRow, insertUserGrant, USER_GRANT_COLUMNS, userParties, type NewGrant, type UserGrantRow } from './grants.ts';
import { prepare } from './prepared.ts';
import type { AuthCode, Database } from './schema.ts';
import { insertAccessTokenRow, insertRefreshTokenRow, insertTokens, tokenRows, type IssuedTokens, type TokenRows } from './tokens.ts';

type NewCode = Omit<AuthCode, 'consumed_at' | 'grant_id'>;

const insertCodeRow = (db: Kysely<Database>, p: NewCode) =>
  db.insertInto('auth_codes').values({
    hash: p.hash,
    client_id: p.client_id,
    user_id: p.user_id,
    redirect_uri: p.redirect_uri,
    resource_id: p.resource_id,
    scopes: p.scopes,
    code_challenge: p.code_challenge,
    created_at: p.created_at,
    expires_at: p.expires_at,
  });

const insertCodeAlone = prepare(insertCodeRow);

/** PostgreSQL: the code and its audit row in one statement (chained-writes.ts). */
const insertCodeStatement = prepare((db, p: NewCode & AuditArgs) =>
  db
    .with('code', () => insertCodeRow(db, p).returning('hash'))
    .with('audit', () => insertAuditRowQuery(db, auditRowOf(p), after('code')))
    .selectNoFrom((eb) => eb.selectFrom('code').select(eb.fn.countAll<number>().as('n')).as('inserted')),
);

/** Stores the code with the audit event `issued`, both or neither. */
export async function insertCode(db: Kysely<Database>, code: NewCode, issued: AuditEventRow): Promise<void> {
  await writeTogether(db, 'stored', {
    statement: () => insertCodeStatement.first(db, { ...code, ...auditArgs(issued) }),
    decidedBy: [],
    steps: [(trx) => insertCodeAlone.execute(db, code, trx), (trx) => insertAuditEvent(db, issued, trx)],
  });
}

const codeByHash = prepare((db, p: { hash: string }) =>
  db
    .selectFrom('auth_codes')
    .innerJoin('users', 'users.id', 'auth_codes.user_id')
    .innerJoin('clients', 'clients.id', 'auth_codes.client_id')
    .selectAll('auth_codes')
    .select(['users.disabled as user_disabled', 'clients.scopes as client_scopes'])
    .where('auth_codes.hash', '=', p.hash),
);

/**
 * The code row whatever its state, with whether its user is disabled and its client's scopes
 * as stored now: the caller checks each.
 */
export async function findCode(db: Kysely<Database>, hash: string): Promise<(AuthCode & { user_disabled: number; client_scopes: string }) | undefined> {
  return codeByHash.first(db, { hash });
}

/** What consuming a code-like credential records: when, and the grant its exchange created (so that a replay can revoke it). */
export interface ConsumeArgs {
  hash: string;
  grantId: string;
  now: number;
}

/**
 * The exactly-once write of a code-like credential (an authorization code, a device code):
 * marks it consumed when it is still unused (and whatever else its kind requires); it must
 * change exactly one row, or the credential was used already (or voided).
 */
// Typed loosely (`any`): it is either code table, and both have `hash`, `consumed_at` and `grant_id`.
export type Consume = (db: Kysely<Database>, p: ConsumeArgs) => UpdateQueryBuilder<Database, any, any, UpdateResult>;

const consumeCode: Consume = (db, p) => db.updateTable('auth_codes').set({ consumed_at: p.now, grant_id: p.grantId }).where('hash', '=', p.hash).where('consumed_at', 'is', null);

/**
 * How an exchange ended: only one exchange of a code issues anything, and only while the
 * grant's parties are as the caller read them (see grants.ts). `code_consumed`: an earlier
 * or a concurrent request consumed the code, or it was voided.
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
export function codeExchange(consume: Consume): Exchanger {
  const consumeAlone = prepare(consume);
  const statement = prepare((db, p: UserGrantRow & ConsumeArgs & TokenRows & AuditArgs) =>
    db
      .with('parties', () => userParties(db, p))
      .with('consumed', () => consume(db, p).where(after('parties')).returning('hash'))
      .with('new_grant', (qc) => qc.insertInto('grants').columns(USER_GRANT_COLUMNS).expression(qc.selectFrom('parties').select(USER_GRANT_COLUMNS).where(after('consumed'))).returning('id'))
      .with('access', () => insertAccessTokenRow(db, p, after('new_grant')))
      .with('refresh', () => insertRefreshTokenRow(db, p, after('new_grant')))
      .with('audit', () => insertAuditRowQuery(db, auditRowOf(p), after('new_grant')))
      .selectNoFrom((eb) => [eb.selectFrom('parties').select(eb.fn.countAll<number>().as('n')).as('parties'), eb.selectFrom('consumed').select(eb.fn.countAll<number>().as('n')).as('consumed')]),
  );
  return async (db, hash, grant, tokens, now, issued) => {
    const { userId } = grant;
    if (userId === null) throw new Error('a code is always exchanged for a grant with a user');
    const row = { ...grantRow(grant, tokens, now), userId };
    const consumption = { hash, grantId: grant.id, now };
    const rows = tokenRows(grant.id, tokens, now);
    return writeTogether(db, 'exchanged', {
      statement: () => statement.first(db, { ...row, ...consumption, ...rows, ...auditArgs(issued) }),
      decidedBy: [
        ['parties', 'parties_changed'],
        ['consumed', 'code_consumed'],
      ],
      steps: [
        { write: (trx) => insertUserGrant.affected(db, row, trx), lost: 'parties_changed' },
        { write: (trx) => consumeAlone.affected(db, consumption, trx), lost: 'code_consumed' },
        (trx) => insertTokens(db, trx, rows),
        (trx) => insertAuditEvent(db, issued, trx),
      ],
    });
  };
}

/** Consumes the authorization code and creates its grant and first tokens, with the audit event `issued`, all or nothing. */
export const exchangeCode: Exchanger = codeExchange(consumeCode);

/**
 * Voids the codes not yet exchanged that the client holds (from `userId` only, when given):
 * they are deleted, so an exchange under way consumes nothing and a later one finds no code.
 * Used codes stay, so that a replay is still recognised.
 */
export async function voidCodes(db: Kysely<Database>, where: { clientId: string; userId?: string }): Promise<void> {
  let query = db.deleteFrom('auth_codes').where('client_id', '=', where.clientId).where('consumed_at', 'is', null);
  if (where.userId !== undefined) query = query.where('user_id', '=', where.userId);
  await query.execute();
}
