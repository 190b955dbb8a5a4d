/**
 * Codes, grants, tokens and consents. The exactly-once steps — consuming a code, rotating a
 * refresh token — are each a single conditional UPDATE inside a transaction: the database,
 * not application code, decides which of several concurrent requests wins. A token is live
 * only while its grant is not revoked, and every validity check joins the grant, so a
 * revocation that commits at any point of a concurrent rotation still leaves nothing alive.
 * Both steps write their audit event in the same transaction, so it commits with the change.
 */
import { sql, type Kysely, type Transaction } from 'kysely';
import { insertAuditEvent, type AuditEventRow } from './audit.ts';
import { prepare } from './prepared.ts';
import type { AuthCode, Database } from './schema.ts';

export interface IssuedTokens {
  accessHash: string;
  accessExpiresAt: number;
  /** Null for grants without refresh tokens (client_credentials). */
  refreshHash: string | null;
  refreshExpiresAt: number;
  scopes: string;
}

export interface NewGrant {
  id: string;
  clientId: string;
  userId: string | null;
  scopes: string;
}

/** How an attempt to rotate a refresh token ended: only the first rotation issues anything. */
export type Rotation = 'rotated' | 'already_rotated' | 'grant_revoked';

/** Thrown inside a transaction to roll it back when its conditional write lost the race. */
class LostRace extends Error {
  readonly outcome: Exclude<Rotation, 'rotated'> | 'code_consumed';
  constructor(outcome: LostRace['outcome']) {
    super(outcome);
    this.outcome = outcome;
  }
}

const insertAccessToken = prepare((db, p: { hash: string; grantId: string; scopes: string; now: number; expiresAt: number }) =>
  db.insertInto('access_tokens').values({ hash: p.hash, grant_id: p.grantId, scopes: p.scopes, created_at: p.now, expires_at: p.expiresAt }),
);

const insertRefreshToken = prepare((db, p: { hash: string; grantId: string; now: number; expiresAt: number }) =>
  db.insertInto('refresh_tokens').values({ hash: p.hash, grant_id: p.grantId, created_at: p.now, expires_at: p.expiresAt }),
);

async function insertTokens(db: Kysely<Database>, trx: Transaction<Database>, grantId: string, tokens: IssuedTokens, now: number): Promise<void> {
  const { accessHash, refreshHash, scopes } = tokens;
  await insertAccessToken.execute(db, { hash: accessHash, grantId, scopes, now, expiresAt: tokens.accessExpiresAt }, trx);
  if (refreshHash !== null) await insertRefreshToken.execute(db, { hash: refreshHash, grantId, now, expiresAt: tokens.refreshExpiresAt }, trx);
}

function grantExpiry(tokens: IssuedTokens): number {
  return Math.max(tokens.accessExpiresAt, tokens.refreshHash === null ? 0 : tokens.refreshExpiresAt);
}

type NewCode = Omit<AuthCode, 'consumed_at' | 'grant_id'>;

const insertCodeRow = prepare((db, p: NewCode) =>
  db.insertInto('auth_codes').values({
    hash: p.hash,
    client_id: p.client_id,
    user_id: p.user_id,
    redirect_uri: p.redirect_uri,
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
    .selectAll('auth_codes')
    .select('users.disabled as user_disabled')
    .where('auth_codes.hash', '=', p.hash),
);

/** The code row whatever its state, with whether its user is disabled: the caller checks each. */
export async function findCode(db: Kysely<Database>, hash: string): Promise<(AuthCode & { user_disabled: number }) | undefined> {
  return codeByHash.first(db, { hash });
}

const consumeCode = prepare((db, p: { hash: string; grantId: string; now: number }) =>
  db.updateTable('auth_codes').set({ consumed_at: p.now, grant_id: p.grantId }).where('hash', '=', p.hash).where('consumed_at', 'is', null),
);

/**
 * Consumes the code and creates its grant and first tokens, with the audit event `issued`,
 * all or nothing. Returns false when the code was already consumed — by an earlier or a
 * concurrent request.
 */
export async function exchangeCode(
  db: Kysely<Database>,
  codeHash: string,
  grant: NewGrant,
  tokens: IssuedTokens,
  now: number,
  issued: AuditEventRow,
): Promise<boolean> {
  try {
    await db.transaction().execute(async (trx) => {
      await insertGrantWithTokens(db, trx, grant, tokens, now);
      const consumed = await consumeCode.affected(db, { hash: codeHash, grantId: grant.id, now }, trx);
      if (consumed !== 1n) throw new LostRace('code_consumed');
      await insertAuditEvent(db, issued, trx);
    });
    return true;
  } catch (error) {
    if (error instanceof LostRace) return false;
    throw error;
  }
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

async function insertGrantWithTokens(db: Kysely<Database>, trx: Transaction<Database>, grant: NewGrant, tokens: IssuedTokens, now: number): Promise<void> {
  await insertGrantRow.execute(db, { ...grant, now, expiresAt: grantExpiry(tokens) }, trx);
  await insertTokens(db, trx, grant.id, tokens, now);
}

export interface AccessTokenInfo {
  grant_id: string;
  scopes: string;
  created_at: number;
  expires_at: number;
  client_id: string;
  client_confidential: number;
  user_id: string | null;
  username: string | null;
  display_name: string | null;
}

const liveAccessToken = prepare((db, p: { hash: string; now: number }) =>
  db
    .selectFrom('access_tokens')
    .innerJoin('grants', 'grants.id', 'access_tokens.grant_id')
    .innerJoin('clients', 'clients.id', 'grants.client_id')
    .leftJoin('users', 'users.id', 'grants.user_id')
    .select(sql<number>`case when clients.secret_hash is null then 0 else 1 end`.as('client_confidential'))
    .select([
      'access_tokens.grant_id',
      'access_tokens.scopes',
      'access_tokens.created_at',
      'access_tokens.expires_at',
      'grants.client_id',
      'grants.user_id',
      'users.username',
      'users.display_name',
    ])
    .where('access_tokens.hash', '=', p.hash)
    .where('access_tokens.expires_at', '>', p.now)
    .where('grants.revoked_at', 'is', null)
    .where((eb) => eb.or([eb('grants.user_id', 'is', null), eb('users.disabled', '=', 0)])),
);

/** A live access token: not expired, its grant not revoked, its user (if any) not disabled. */
export async function findLiveAccessToken(db: Kysely<Database>, hash: string, now: number): Promise<AccessTokenInfo | undefined> {
  return liveAccessToken.first(db, { hash, now });
}

export interface RefreshTokenInfo {
  hash: string;
  grant_id: string;
  expires_at: number;
  rotated_at: number | null;
  successor_hash: string | null;
  successor_box: string | null;
  client_id: string;
  /** 1 when the owning client is confidential, so presenting the token requires its secret. */
  client_confidential: number;
  user_id: string | null;
  scopes: string;
  revoked_at: number | null;
}

const refreshTokenByHash = prepare((db, p: { hash: string }) =>
  db
    .selectFrom('refresh_tokens')
    .innerJoin('grants', 'grants.id', 'refresh_tokens.grant_id')
    .innerJoin('clients', 'clients.id', 'grants.client_id')
    .select(sql<number>`case when clients.secret_hash is null then 0 else 1 end`.as('client_confidential'))
    .select([
      'refresh_tokens.hash',
      'refresh_tokens.grant_id',
      'refresh_tokens.expires_at',
      'refresh_tokens.rotated_at',
      'refresh_tokens.successor_hash',
      'refresh_tokens.successor_box',
      'grants.client_id',
      'grants.user_id',
      'grants.scopes',
      'grants.revoked_at',
    ])
    .where('refresh_tokens.hash', '=', p.hash),
);

/** The refresh token row and its grant, whatever their state. */
export async function findRefreshToken(db: Kysely<Database>, hash: string): Promise<RefreshTokenInfo | undefined> {
  return refreshTokenByHash.first(db, { hash });
}

/**
 * A refresh token that can still be used: not expired, not rotated, its grant not revoked,
 * its user (if any) not disabled. In the shape of an access token's, for introspection.
 */
export async function findLiveRefreshToken(db: Kysely<Database>, hash: string, now: number): Promise<AccessTokenInfo | undefined> {
  return db
    .selectFrom('refresh_tokens')
    .innerJoin('grants', 'grants.id', 'refresh_tokens.grant_id')
    .innerJoin('clients', 'clients.id', 'grants.client_id')
    .leftJoin('users', 'users.id', 'grants.user_id')
    .select(sql<number>`case when clients.secret_hash is null then 0 else 1 end`.as('client_confidential'))
    .select([
      'refresh_tokens.grant_id',
      'grants.scopes',
      'refresh_tokens.created_at',
      'refresh_tokens.expires_at',
      'grants.client_id',
      'grants.user_id',
      'users.username',
      'users.display_name',
    ])
    .where('refresh_tokens.hash', '=', hash)
    .where('refresh_tokens.expires_at', '>', now)
    .where('refresh_tokens.rotated_at', 'is', null)
    .where('grants.revoked_at', 'is', null)
    .where((eb) => eb.or([eb('grants.user_id', 'is', null), eb('users.disabled', '=', 0)]))
    .executeTakeFirst();
}

const useGrant = prepare((db, p: { id: string; now: number; expiresAt: number }) =>
  db.updateTable('grants').set({ last_used_at: p.now, expires_at: p.expiresAt }).where('id', '=', p.id).where('revoked_at', 'is', null),
);

const markRotated = prepare((db, p: { hash: string; now: number; successorHash: string | null; successorBox: string | null }) =>
  db
    .updateTable('refresh_tokens')
    .set({ rotated_at: p.now, successor_hash: p.successorHash, successor_box: p.successorBox })
    .where('hash', '=', p.hash)
    .where('rotated_at', 'is', null),
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
      const rotated = await markRotated.affected(db, { hash: refresh.hash, now, successorHash: successor.refreshHash, successorBox: successor.box }, trx);
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

/** Whether the refresh token with this hash has been rotated itself (null if unknown). */
export async function refreshRotatedAt(db: Kysely<Database>, hash: string): Promise<number | null | undefined> {
  const row = await db.selectFrom('refresh_tokens').select('rotated_at').where('hash', '=', hash).executeTakeFirst();
  return row?.rotated_at;
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

const consentScopes = prepare((db, p: { userId: string; clientId: string; now: number }) =>
  db.selectFrom('consents').select('scopes').where('user_id', '=', p.userId).where('client_id', '=', p.clientId).where('expires_at', '>', p.now),
);

export async function findConsentScopes(db: Kysely<Database>, userId: string, clientId: string, now: number): Promise<string | undefined> {
  const row = await consentScopes.first(db, { userId, clientId, now });
  return row?.scopes;
}

export async function saveConsent(db: Kysely<Database>, consent: { userId: string; clientId: string; scopes: string; now: number; expiresAt: number }): Promise<void> {
  await db
    .insertInto('consents')
    .values({ user_id: consent.userId, client_id: consent.clientId, scopes: consent.scopes, created_at: consent.now, expires_at: consent.expiresAt })
    .onConflict((oc) => oc.columns(['user_id', 'client_id']).doUpdateSet({ scopes: consent.scopes, created_at: consent.now, expires_at: consent.expiresAt }))
    .execute();
}

export async function deleteConsent(db: Kysely<Database>, userId: string, clientId: string): Promise<void> {
  await db.deleteFrom('consents').where('user_id', '=', userId).where('client_id', '=', clientId).execute();
}

export interface AuthorizedApplication {
  client_id: string;
  name: string;
  scopes: string;
  authorized_at: number;
  last_used_at: number;
}

/** The applications holding a live grant from the user, one row per application. */
export async function listAuthorizedApplications(db: Kysely<Database>, userId: string, now: number): Promise<AuthorizedApplication[]> {
  const rows = await db
    .selectFrom('grants')
    .innerJoin('clients', 'clients.id', 'grants.client_id')
    .select(['grants.client_id', 'clients.name', 'grants.scopes', 'grants.created_at', 'grants.last_used_at'])
    .where('grants.user_id', '=', userId)
    .where('grants.revoked_at', 'is', null)
    .where('grants.expires_at', '>', now)
    .orderBy('grants.created_at')
    .execute();
  const byClient = new Map<string, AuthorizedApplication>();
  for (const row of rows) {
    const app = byClient.get(row.client_id);
    const scopes = new Set([...(app?.scopes.split(' ') ?? []), ...row.scopes.split(' ')]);
    byClient.set(row.client_id, {
      client_id: row.client_id,
      name: row.name,
      scopes: [...scopes].sort().join(' '),
      authorized_at: Math.min(app?.authorized_at ?? Infinity, row.created_at),
      last_used_at: Math.max(app?.last_used_at ?? 0, row.last_used_at),
    });
  }
  return [...byClient.values()];
}

export interface TokenOwner {
  grant_id: string;
  client_id: string;
  user_id: string | null;
  client_confidential: number;
  revoked_at: number | null;
}

const ownerOf = (table: 'access_tokens' | 'refresh_tokens') =>
  prepare((db, p: { hash: string }) =>
    db
      .selectFrom(table)
      .innerJoin('grants', 'grants.id', `${table}.grant_id`)
      .innerJoin('clients', 'clients.id', 'grants.client_id')
      .select(['grants.id as grant_id', 'grants.client_id', 'grants.user_id', 'grants.revoked_at'])
      .select(sql<number>`case when clients.secret_hash is null then 0 else 1 end`.as('client_confidential'))
      .where(`${table}.hash`, '=', p.hash),
  );
const tokenOwners = { access_tokens: ownerOf('access_tokens'), refresh_tokens: ownerOf('refresh_tokens') };

/** The grant and client a token was issued under, expired or not: what revocation needs. */
export async function findTokenOwner(db: Kysely<Database>, table: 'access_tokens' | 'refresh_tokens', hash: string): Promise<TokenOwner | undefined> {
  return tokenOwners[table].first(db, { hash });
}
