/**
 * Grants: the row of a new one, selected from its parties as the caller read them; a grant's
 * use by a rotation; revocation. The writes these take part in, with the tokens, the codes
 * and the audit rows that go with them, are in atomic-writes.ts.
 */
import type { ExpressionBuilder, Kysely } from 'kysely';
import { bigint } from './chained-writes.ts';
import { lockedForShare, prepare } from './prepared.ts';
import type { Database } from './schema.ts';
import type { Login } from '../login.ts';
import type { IssuedTokens } from './tokens.ts';

export interface NewGrant {
  id: string;
  clientId: string;
  userId: string | null;
  /** The resource server its tokens are for. */
  resourceId: string;
  scopes: string;
  /** The client's scopes as the caller read them to decide `scopes`: the grant is created only while they are still the client's. */
  clientScopes: string;
  /**
   * The login that approved it, kept for every refresh (its tokens' `auth_time` and `amr`);
   * null for a client acting as itself, and for a code made before logins were recorded.
   */
  login: Login | null;
}

const DAY_MS = 86_400_000;

/**
 * When a grant expires: `expiresAt`, exact, what decides whether it is alive; `purgeAfter`, the
 * end of that day (UTC), what the purge finds it by. A refresh moves the first every time and
 * the second only when the day changes, so that the grant's row, whose indexes hold only the
 * second, is updated in place (GrantsTable).
 */
export interface GrantExpiry {
  expiresAt: number;
  purgeAfter: number;
}

/** A grant lasts as long as its newest token. */
export function grantExpiry(tokens: IssuedTokens): GrantExpiry {
  const expiresAt = Math.max(tokens.accessExpiresAt, tokens.refreshHash === null ? 0 : tokens.refreshExpiresAt);
  return { expiresAt, purgeAfter: purgeAfterFor(expiresAt) };
}

/** The `purge_after` of a grant that expires at `expiresAt`: the end of that day (UTC). */
export function purgeAfterFor(expiresAt: number): number {
  return Math.ceil(expiresAt / DAY_MS) * DAY_MS;
}

export type GrantRow = NewGrant & GrantExpiry & { now: number };
/** A user's grant's row; the login flattened, as a prepared statement takes only top-level arguments. */
export type UserGrantRow = GrantRow & { userId: string; authTime: number | null; amr: string | null; sid: string | null };

export function userGrantRow(grant: NewGrant, tokens: IssuedTokens, now: number, userId: string): UserGrantRow {
  return { ...grantRow(grant, tokens, now), userId, authTime: grant.login?.authTime ?? null, amr: grant.login?.amr ?? null, sid: grant.login?.sid ?? null };
}

export function grantRow(grant: NewGrant, tokens: IssuedTokens, now: number): GrantRow {
  return { ...grant, now, ...grantExpiry(tokens) };
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
    bigint(eb, p.purgeAfter).as('purge_after'),
  ] as const;
}

export const USER_GRANT_COLUMNS = [
  'id',
  'client_id',
  'resource_id',
  'scopes',
  'created_at',
  'last_used_at',
  'expires_at',
  'purge_after',
  'user_id',
  'auth_time',
  'amr',
  'sid',
] as const;
const CLIENT_GRANT_COLUMNS = ['id', 'client_id', 'resource_id', 'scopes', 'created_at', 'last_used_at', 'expires_at', 'purge_after'] as const;

// The new grant's row, selected from its parties' rows as the caller read them: no row when
// they have changed since — the client deleted, blocked, disabled or given other scopes, the user
// disabled. Locked for share on PostgreSQL, so that they stay so until the grant commits.

/** The parties of a user's grant: its client and its user. */
export const userGrantParties = (db: Kysely<Database>, p: UserGrantRow) =>
  lockedForShare(
    db,
    db
      .selectFrom(['clients', 'users'])
      .select((eb) => [
        ...grantFromClient(eb, p),
        'users.id as user_id',
        bigint(eb, p.authTime).as('auth_time'),
        eb.val(p.amr).as('amr'),
        eb.val(p.sid).as('sid'),
      ])
      .where('clients.id', '=', p.clientId)
      .where('clients.scopes', '=', p.clientScopes)
      .where('clients.blocked', '=', 0)
      .where('clients.disabled', '=', 0)
      .where('users.id', '=', p.userId)
      .where('users.disabled', '=', 0),
  );

/** The party of a grant without a user (client_credentials): its client. */
const clientGrantParty = (db: Kysely<Database>, p: GrantRow) =>
  lockedForShare(
    db,
    db
      .selectFrom('clients')
      .select((eb) => grantFromClient(eb, p))
      .where('clients.id', '=', p.clientId)
      .where('clients.scopes', '=', p.clientScopes)
      .where('clients.blocked', '=', 0)
      .where('clients.disabled', '=', 0),
  );

/** INSERT … SELECT from the parties: the grant exists only if they are as the caller read them. */
export const insertUserGrant = prepare((db, p: UserGrantRow) => db.insertInto('grants').columns(USER_GRANT_COLUMNS).expression(userGrantParties(db, p)));
export const insertClientGrant = (db: Kysely<Database>, p: GrantRow) =>
  db.insertInto('grants').columns(CLIENT_GRANT_COLUMNS).expression(clientGrantParty(db, p));

export interface GrantUse extends GrantExpiry {
  grantId: string;
  clientScopes: string;
  now: number;
}

/**
 * A grant that may still issue tokens: not revoked, its client still there, not blocked nor disabled, and
 * with the scopes the caller read, its user (if any) enabled. The parties are only read (a
 * token row references the grant, which the rotation holds, not the client or the user): a
 * delete or a disable committing after this read revokes the grant — new tokens and all —
 * once the rotation commits, since revocation writes the grant row the rotation holds.
 */
export function grantUsable(eb: ExpressionBuilder<Database, 'grants'>, p: Pick<GrantUse, 'clientScopes'>) {
  return eb.and([
    eb('grants.revoked_at', 'is', null),
    eb.exists(
      eb
        .selectFrom('clients')
        .select('clients.id')
        .whereRef('clients.id', '=', 'grants.client_id')
        .where('clients.scopes', '=', p.clientScopes)
        .where('clients.blocked', '=', 0)
        .where('clients.disabled', '=', 0),
    ),
    eb.or([
      eb('grants.user_id', 'is', null),
      eb.exists(eb.selectFrom('users').select('users.id').whereRef('users.id', '=', 'grants.user_id').where('users.disabled', '=', 0)),
    ]),
  ]);
}

/**
 * The grant's use by a rotation: its last use, and its expiry moved to its newest token's — its
 * purge day too, unless the caller knows it `unchanged`. PostgreSQL compares an indexed column's
 * new value with its old one, and when they are equal updates the row in place (given room on
 * its page: the grants' fillfactor); SQLite rewrites the index entry of any column it sets, so
 * there the day is set only when it moved.
 */
export const useGrant = (db: Kysely<Database>, p: GrantUse, purgeDay: 'moved' | 'unchanged' = 'moved') =>
  db
    .updateTable('grants')
    .set({ last_used_at: p.now, expires_at: p.expiresAt, ...(purgeDay === 'moved' ? { purge_after: p.purgeAfter } : {}) })
    .where('grants.id', '=', p.grantId);

export type GrantsToRevoke = { grantId: string } | { userId: string } | { clientId: string } | { userId: string; clientId: string };

/** What a revocation picks grants by. */
export type RevokedBy = 'grantId' | 'userId' | 'clientId';

/** A revocation's arguments, whatever its shape: a prepared revocation takes them all, and reads those it picks by. */
export type GrantRevocation = { [K in RevokedBy]: string } & { now: number };

/** Revokes the grants not yet revoked that match `p` by `by`, at `p.now`; returns their ids. */
export function revokeQuery(db: Kysely<Database>, by: readonly RevokedBy[], p: GrantRevocation) {
  let query = db.updateTable('grants').set({ revoked_at: p.now }).where('revoked_at', 'is', null);
  if (by.includes('grantId')) query = query.where('id', '=', p.grantId);
  if (by.includes('userId')) query = query.where('user_id', '=', p.userId);
  if (by.includes('clientId')) query = query.where('client_id', '=', p.clientId);
  return query.returning('id');
}

const liveGrantOf = prepare((db, p: { clientId: string; userId: string; now: number }) =>
  db
    .selectFrom('grants')
    .select('id')
    .where('client_id', '=', p.clientId)
    .where('user_id', '=', p.userId)
    .where('revoked_at', 'is', null)
    .where('expires_at', '>', p.now)
    .limit(1),
);

/** Whether the person has a live grant with the client: not revoked, not expired. */
export async function hasLiveGrant(db: Kysely<Database>, p: { clientId: string; userId: string; now: number }): Promise<boolean> {
  return (await liveGrantOf.first(db, p)) !== undefined;
}
