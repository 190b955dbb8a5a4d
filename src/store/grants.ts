/**
 * Codes, grants, tokens and consents. The exactly-once steps — consuming a code, rotating a
 * refresh token — are each a single conditional UPDATE inside a transaction: the database,
 * not application code, decides which of several concurrent requests wins. A token is live
 * only while its grant is not revoked, and every validity check joins the grant, so a
 * revocation that commits at any point of a concurrent rotation still leaves nothing alive.
 */
import { sql, type Kysely, type Transaction } from 'kysely';
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

async function insertTokens(trx: Transaction<Database>, grantId: string, tokens: IssuedTokens, now: number): Promise<void> {
  await trx
    .insertInto('access_tokens')
    .values({ hash: tokens.accessHash, grant_id: grantId, scopes: tokens.scopes, created_at: now, expires_at: tokens.accessExpiresAt })
    .execute();
  if (tokens.refreshHash !== null) {
    await trx
      .insertInto('refresh_tokens')
      .values({ hash: tokens.refreshHash, grant_id: grantId, created_at: now, expires_at: tokens.refreshExpiresAt })
      .execute();
  }
}

function grantExpiry(tokens: IssuedTokens): number {
  return Math.max(tokens.accessExpiresAt, tokens.refreshHash === null ? 0 : tokens.refreshExpiresAt);
}

export async function insertCode(
  db: Kysely<Database>,
  code: Omit<AuthCode, 'consumed_at' | 'grant_id'>,
): Promise<void> {
  await db.insertInto('auth_codes').values(code).execute();
}

/** The code row whatever its state, with whether its user is disabled: the caller checks each. */
export async function findCode(db: Kysely<Database>, hash: string): Promise<(AuthCode & { user_disabled: number }) | undefined> {
  return db
    .selectFrom('auth_codes')
    .innerJoin('users', 'users.id', 'auth_codes.user_id')
    .selectAll('auth_codes')
    .select('users.disabled as user_disabled')
    .where('auth_codes.hash', '=', hash)
    .executeTakeFirst();
}

/**
 * Consumes the code and creates its grant and first tokens, all or nothing. Returns false
 * when the code was already consumed — by an earlier or a concurrent request.
 */
export async function exchangeCode(
  db: Kysely<Database>,
  codeHash: string,
  grant: NewGrant,
  tokens: IssuedTokens,
  now: number,
): Promise<boolean> {
  try {
    await db.transaction().execute(async (trx) => {
      await insertGrantWithTokens(trx, grant, tokens, now);
      const consumed = await trx
        .updateTable('auth_codes')
        .set({ consumed_at: now, grant_id: grant.id })
        .where('hash', '=', codeHash)
        .where('consumed_at', 'is', null)
        .executeTakeFirst();
      if (consumed.numUpdatedRows !== 1n) throw new LostRace('code_consumed');
    });
    return true;
  } catch (error) {
    if (error instanceof LostRace) return false;
    throw error;
  }
}

/** A grant with its first tokens, for grants that start without a code (client_credentials). */
export async function insertGrant(db: Kysely<Database>, grant: NewGrant, tokens: IssuedTokens, now: number): Promise<void> {
  await db.transaction().execute((trx) => insertGrantWithTokens(trx, grant, tokens, now));
}

async function insertGrantWithTokens(trx: Transaction<Database>, grant: NewGrant, tokens: IssuedTokens, now: number): Promise<void> {
  await trx
    .insertInto('grants')
    .values({
      id: grant.id,
      client_id: grant.clientId,
      user_id: grant.userId,
      scopes: grant.scopes,
      created_at: now,
      last_used_at: now,
      revoked_at: null,
      expires_at: grantExpiry(tokens),
    })
    .execute();
  await insertTokens(trx, grant.id, tokens, now);
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

/** A live access token: not expired, its grant not revoked, its user (if any) not disabled. */
export async function findLiveAccessToken(db: Kysely<Database>, hash: string, now: number): Promise<AccessTokenInfo | undefined> {
  return db
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
    .where('access_tokens.hash', '=', hash)
    .where('access_tokens.expires_at', '>', now)
    .where('grants.revoked_at', 'is', null)
    .where((eb) => eb.or([eb('grants.user_id', 'is', null), eb('users.disabled', '=', 0)]))
    .executeTakeFirst();
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

/** The refresh token row and its grant, whatever their state. */
export async function findRefreshToken(db: Kysely<Database>, hash: string): Promise<RefreshTokenInfo | undefined> {
  return db
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
    .where('refresh_tokens.hash', '=', hash)
    .executeTakeFirst();
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

/**
 * Marks the refresh token rotated, records its successor (and the sealed successor pair
 * for the grace window), and stores the new tokens, all or nothing. Issues nothing when the
 * token had already been rotated, by an earlier or a concurrent request, or when its grant
 * has been revoked meanwhile.
 */
export async function rotateRefreshToken(
  db: Kysely<Database>,
  refresh: { hash: string; grantId: string },
  successor: IssuedTokens & { box: string | null },
  now: number,
): Promise<Rotation> {
  try {
    await db.transaction().execute(async (trx) => {
      // The grant row first: revocation writes that same row, so the two serialize on it. A
      // rotation ordered after a revocation sees it here and issues nothing (rather than
      // answering with tokens that are dead on arrival); one ordered before has its new
      // tokens revoked with the rest.
      const live = await trx
        .updateTable('grants')
        .set({ last_used_at: now, expires_at: grantExpiry(successor) })
        .where('id', '=', refresh.grantId)
        .where('revoked_at', 'is', null)
        .executeTakeFirst();
      if (live.numUpdatedRows !== 1n) throw new LostRace('grant_revoked');
      const rotated = await trx
        .updateTable('refresh_tokens')
        .set({ rotated_at: now, successor_hash: successor.refreshHash, successor_box: successor.box })
        .where('hash', '=', refresh.hash)
        .where('rotated_at', 'is', null)
        .executeTakeFirst();
      if (rotated.numUpdatedRows !== 1n) throw new LostRace('already_rotated');
      await insertTokens(trx, refresh.grantId, successor, now);
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

export async function findConsentScopes(db: Kysely<Database>, userId: string, clientId: string, now: number): Promise<string | undefined> {
  const row = await db
    .selectFrom('consents')
    .select('scopes')
    .where('user_id', '=', userId)
    .where('client_id', '=', clientId)
    .where('expires_at', '>', now)
    .executeTakeFirst();
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

/** The grant and client a token was issued under, expired or not: what revocation needs. */
export async function findTokenOwner(db: Kysely<Database>, table: 'access_tokens' | 'refresh_tokens', hash: string): Promise<TokenOwner | undefined> {
  return db
    .selectFrom(table)
    .innerJoin('grants', 'grants.id', `${table}.grant_id`)
    .innerJoin('clients', 'clients.id', 'grants.client_id')
    .select(['grants.id as grant_id', 'grants.client_id', 'grants.user_id', 'grants.revoked_at'])
    .select(sql<number>`case when clients.secret_hash is null then 0 else 1 end`.as('client_confidential'))
    .where(`${table}.hash`, '=', hash)
    .executeTakeFirst();
}
