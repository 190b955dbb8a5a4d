/**
 * Authorization codes. A code is used at most once: `exchangeCode` consumes it with one
 * conditional UPDATE in the transaction that creates its grant (see grants.ts). A code not
 * yet exchanged can be voided (deleted) when the access it would give is taken away.
 */
import type { Kysely, Transaction } from 'kysely';
import { insertAuditEvent, type AuditEventRow } from './audit-events.ts';
import { insertGrantWithTokens, LostRace, type NewGrant } from './grants.ts';
import { prepare } from './prepared.ts';
import type { AuthCode, Database } from './schema.ts';
import type { IssuedTokens } from './tokens.ts';

type NewCode = Omit<AuthCode, 'consumed_at' | 'grant_id'>;

const insertCodeRow = prepare((db, p: NewCode) =>
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
  }),
);

export async function insertCode(db: Kysely<Database>, code: NewCode): Promise<void> {
  await insertCodeRow.execute(db, code);
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

const consumeCode = prepare((db, p: { hash: string; grantId: string; now: number }) =>
  db.updateTable('auth_codes').set({ consumed_at: p.now, grant_id: p.grantId }).where('hash', '=', p.hash).where('consumed_at', 'is', null),
);

/**
 * How an exchange ended: only one exchange of a code issues anything, and only while the
 * grant's parties are as the caller read them (see grants.ts). `code_consumed`: an earlier
 * or a concurrent request consumed the code, or it was voided.
 */
export type Exchange = 'exchanged' | 'code_consumed' | 'parties_changed';

/**
 * Consumes the code and creates its grant and first tokens, with the audit event `issued`,
 * all or nothing.
 */
export async function exchangeCode(
  db: Kysely<Database>,
  codeHash: string,
  grant: NewGrant,
  tokens: IssuedTokens,
  now: number,
  issued: AuditEventRow,
): Promise<Exchange> {
  return consumeAndIssue(db, (trx) => consumeCode.affected(db, { hash: codeHash, grantId: grant.id, now }, trx), grant, tokens, now, issued);
}

/**
 * The exactly-once step of every code-like credential (an authorization code, a device
 * code): in one transaction, the grant and its first tokens, the conditional write `consume`
 * (which must change exactly one row, or the credential was used already) and the audit
 * event `issued`.
 */
export async function consumeAndIssue(
  db: Kysely<Database>,
  consume: (trx: Transaction<Database>) => Promise<bigint>,
  grant: NewGrant,
  tokens: IssuedTokens,
  now: number,
  issued: AuditEventRow,
): Promise<Exchange> {
  try {
    await db.transaction().execute(async (trx) => {
      await insertGrantWithTokens(db, trx, grant, tokens, now);
      if ((await consume(trx)) !== 1n) throw new LostRace('code_consumed');
      await insertAuditEvent(db, issued, trx);
    });
    return 'exchanged';
  } catch (error) {
    if (error instanceof LostRace && (error.outcome === 'code_consumed' || error.outcome === 'parties_changed')) return error.outcome;
    throw error;
  }
}

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
