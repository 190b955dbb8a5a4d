/**
 * Access and refresh tokens: their rows and every lookup of them. A token is live only
 * while its grant is not revoked (`liveToken`): every validity check joins the grant, so a
 * revocation ends all of a grant's tokens at once. The writes that change a grant together
 * with its tokens — issuing, rotating — are in atomic-writes.ts.
 */
import { sql, type Kysely, type Transaction } from 'kysely';
import { clientConfidential, joinedClientColumns, type JoinedClient } from './clients.ts';
import { bigint, gated, type Gate } from './chained-writes.ts';
import type { JoinedTokenSettings } from './codes.ts';
import { prepare } from './prepared.ts';
import { rowByKey, unexpired } from './shared-reads.ts';
import { tokenSettingsColumns } from './resources.ts';
import type { ClientKind, Database } from './schema.ts';

type TokenTable = 'access_tokens' | 'refresh_tokens';

export interface IssuedTokens {
  accessHash: string;
  accessExpiresAt: number;
  /** Null for grants without refresh tokens (client_credentials). */
  refreshHash: string | null;
  refreshExpiresAt: number;
  scopes: string;
  /** The keys the tokens are bound to (DPoP): oauth/issue.ts `KeyBinding`. */
  binding: { access: string | null; refresh: string | null };
  /** Who acts for the person, as JSON (`AccessTokensTable.act`): an exchange's token only. */
  act?: string | null;
}

/** A token's grant in force: not revoked, its user (if any) not disabled. */
const grantInForce = sql<boolean>`grants.revoked_at is null and (grants.user_id is null or users.disabled = 0)`;

/**
 * The one rule for a usable token: not expired, its grant in force. For queries that join
 * `grants` and left-join `users`: every lookup of a live token, here and in liveness.ts — but
 * introspection's and token exchange's, read by the requests that arrive together, which ask
 * for `grantInForce` and check the expiry each against its own clock (`unexpired`). A condition
 * added here belongs in `grantInForce`.
 */
export function liveToken(table: TokenTable, now: number) {
  return sql<boolean>`(${sql.ref(`${table}.expires_at`)} > ${now} and ${grantInForce})`;
}

/** A grant's new tokens as the statements that store them see them. */
export interface TokenRows {
  grantId: string;
  now: number;
  accessHash: string;
  accessScopes: string;
  accessExpiresAt: number;
  refreshHash: string | null;
  refreshExpiresAt: number;
  /** The pair sealed for the grace window of the token it replaces (a rotation); null otherwise. */
  replayBox: string | null;
  accessJkt: string | null;
  refreshJkt: string | null;
  act: string | null;
}

export function tokenRows(grantId: string, tokens: IssuedTokens, now: number, replayBox: string | null = null): TokenRows {
  const { accessHash, accessExpiresAt, refreshHash, refreshExpiresAt, scopes, binding, act = null } = tokens;
  const jkts = { accessJkt: binding.access, refreshJkt: binding.refresh };
  return { grantId, now, accessHash, accessScopes: scopes, accessExpiresAt, refreshHash, refreshExpiresAt, replayBox, act, ...jkts };
}

// INSERT … SELECT rather than VALUES, so that `gate` can make the insert conditional: on
// PostgreSQL, a token is inserted only when the statement's earlier steps did their part
// (atomic-writes.ts `exchangeCode`, `insertGrant`, `rotateRefreshToken`). Without a gate,
// the plain insert.
export const insertAccessTokenRow = (db: Kysely<Database>, p: TokenRows, gate?: Gate) =>
  db
    .insertInto('access_tokens')
    .columns(['hash', 'grant_id', 'scopes', 'created_at', 'expires_at', 'dpop_jkt', 'act'])
    .expression(
      gated(
        db.selectNoFrom((eb) => [
          eb.val(p.accessHash).as('hash'),
          eb.val(p.grantId).as('grant_id'),
          eb.val(p.accessScopes).as('scopes'),
          bigint(eb, p.now).as('created_at'),
          bigint(eb, p.accessExpiresAt).as('expires_at'),
          eb.val(p.accessJkt).as('dpop_jkt'),
          eb.val(p.act).as('act'),
        ]),
        gate,
      ),
    );

export const insertRefreshTokenRow = (db: Kysely<Database>, p: TokenRows, gate?: Gate) =>
  db
    .insertInto('refresh_tokens')
    .columns(['hash', 'grant_id', 'created_at', 'expires_at', 'replay_box', 'dpop_jkt'])
    .expression(
      gated(
        db.selectNoFrom((eb) => [
          eb.val(p.refreshHash).as('hash'),
          eb.val(p.grantId).as('grant_id'),
          bigint(eb, p.now).as('created_at'),
          bigint(eb, p.refreshExpiresAt).as('expires_at'),
          eb.val(p.replayBox).as('replay_box'),
          eb.val(p.refreshJkt).as('dpop_jkt'),
        ]),
        gate,
      ),
    );

const insertAccessToken = prepare((db, p: TokenRows) => insertAccessTokenRow(db, p));
const insertRefreshToken = prepare((db, p: TokenRows) => insertRefreshTokenRow(db, p));

/** SQLite: stores the grant's new tokens inside the transaction that creates or extends the grant (PostgreSQL: in that change's one statement). */
export async function insertTokens(db: Kysely<Database>, trx: Transaction<Database>, rows: TokenRows): Promise<void> {
  await insertAccessToken.execute(db, rows, trx);
  if (rows.refreshHash !== null) await insertRefreshToken.execute(db, rows, trx);
}

/** What the resource side (`/api/profile`, `/ws`) needs of a live access token. */
export interface BearerTokenInfo {
  grant_id: string;
  scopes: string;
  created_at: number;
  expires_at: number;
  client_id: string;
  user_id: string | null;
  username: string | null;
  display_name: string | null;
  /** The resource server the token is for. */
  resource_id: string;
  /** The thumbprint of the key each use must prove (DPoP); null for a bearer token. */
  dpop_jkt: string | null;
}

export interface AccessTokenInfo extends BearerTokenInfo {
  client_confidential: number;
  /** The resource server's URI; NULL for the built-in one (PUBLIC_URL). */
  resource_uri: string | null;
  /** The resource server's own introspection client, if any. */
  resource_client_id: string | null;
  /** The login that approved the grant (GrantsTable), for introspection's `auth_time` and `amr`. */
  auth_time: number | null;
  amr: string | null;
  sid: string | null;
  /** Who acts for the person (RFC 8693 `act`, JSON): a token made by an exchange; null otherwise (and for refresh tokens). */
  act: string | null;
}

/** The token's audience, and the login of its grant, for introspection: queries that join `grants` and `resources`. */
const introspectionColumns = [
  'resources.uri as resource_uri',
  'resources.client_id as resource_client_id',
  'grants.auth_time',
  'grants.amr',
  'grants.sid',
] as const;

/** An access token with its grant and its user, for the caller to choose which. */
const accessTokenQuery = (db: Kysely<Database>) =>
  db
    .selectFrom('access_tokens')
    .innerJoin('grants', 'grants.id', 'access_tokens.grant_id')
    .leftJoin('users', 'users.id', 'grants.user_id')
    .select([
      'access_tokens.grant_id',
      'access_tokens.scopes',
      'access_tokens.created_at',
      'access_tokens.expires_at',
      'access_tokens.dpop_jkt',
      'grants.client_id',
      'grants.user_id',
      'grants.resource_id',
      'users.username',
      'users.display_name',
    ]);

/** A live access token by hash. */
const liveAccessTokenQuery = (db: Kysely<Database>, p: { hash: string; now: number }) =>
  accessTokenQuery(db).where('access_tokens.hash', '=', p.hash).where(liveToken('access_tokens', p.now));

/**
 * The bearer check joins neither the client nor the resource: a grant's client and resource
 * exist while the grant does (both foreign keys cascade on delete), so those joins would only
 * add two index lookups to the hottest query (docs/performance.md).
 */
const liveBearerToken = prepare(liveAccessTokenQuery);

const accessTokenInForce = rowByKey('access_tokens.hash', 'hash', (db) =>
  accessTokenQuery(db)
    .innerJoin('clients', 'clients.id', 'grants.client_id')
    .innerJoin('resources', 'resources.id', 'grants.resource_id')
    .select(clientConfidential)
    .select(introspectionColumns)
    .select(['access_tokens.act', 'access_tokens.hash'])
    .where(grantInForce),
);

/**
 * The bearer check's answer with the counter of its grant's shard (token-epochs), read in the
 * same snapshot: PostgreSQL only, for the bearer-token cache (bearer-token-cache.ts).
 */
const liveBearerTokenWithEpoch = prepare((db, p: { hash: string; now: number }) =>
  liveAccessTokenQuery(db, p)
    .innerJoin('token_epochs', (join) => join.on('token_epochs.shard', '=', sql<string>`gatehouse_token_shard(grants.id)`))
    .select(['token_epochs.shard', 'token_epochs.epoch']),
);

/** A live access token: not expired, its grant not revoked, its user (if any) not disabled. */
export async function findLiveAccessToken(db: Kysely<Database>, hash: string, now: number): Promise<AccessTokenInfo | undefined> {
  return unexpired(await accessTokenInForce(db, hash), now);
}

/** The same check for the resource side, without what only introspection reads. */
export async function findLiveBearerToken(db: Kysely<Database>, hash: string, now: number): Promise<BearerTokenInfo | undefined> {
  return liveBearerToken.first(db, { hash, now });
}

/** A grant's shard and its counter of changes, as `token_epochs` holds them. */
export interface ShardEpoch {
  shard: string;
  epoch: number;
}

/** As `findLiveBearerToken`, with the shard of the token's grant and its counter as of the same read (PostgreSQL). */
export async function findLiveBearerTokenWithEpoch(db: Kysely<Database>, hash: string, now: number): Promise<(BearerTokenInfo & ShardEpoch) | undefined> {
  return liveBearerTokenWithEpoch.first(db, { hash, now });
}

const shardEpochs = prepare((db, p: { shards: readonly string[] }) =>
  db
    .selectFrom('token_epochs')
    .select(['shard', 'epoch'])
    .where(sql<boolean>`shard = any(${p.shards}::text[])`),
);

/** The counters of these shards now (PostgreSQL). */
export async function readShardEpochs(db: Kysely<Database>, shards: readonly string[]): Promise<ShardEpoch[]> {
  return (await shardEpochs.execute(db, { shards })).rows;
}

export interface RefreshTokenInfo extends JoinedTokenSettings, JoinedClient {
  hash: string;
  grant_id: string;
  expires_at: number;
  rotated_at: number | null;
  successor_hash: string | null;
  /** The successor's sealed pair, while the grace window lasts (`RefreshTokensTable.replay_box`). */
  successor_box: string | null;
  /** Whether the successor has been used itself (null: not, or no successor). */
  successor_rotated_at: number | null;
  client_id: string;
  /** Who made the client known (SPEC §3): clients no administrator registered may have any scope of the resource. */
  client_kind: ClientKind;
  user_id: string | null;
  /** The grant's user's; null for a client acting as itself. */
  username: string | null;
  resource_id: string;
  scopes: string;
  revoked_at: number | null;
  /** The grant's purge day (GrantsTable), which a rotation moves only when the day changes. */
  purge_after: number;
  /** The login that approved the grant (GrantsTable), kept by every refresh. */
  auth_time: number | null;
  amr: string | null;
  sid: string | null;
  /** The key a refresh must prove: a public client's bound refresh token (RFC 9449 §5); null otherwise. */
  dpop_jkt: string | null;
}

/** The refresh token row, its grant, and its successor's grace-window state, whatever their state. */
export const findRefreshToken: (db: Kysely<Database>, hash: string) => Promise<RefreshTokenInfo | undefined> = rowByKey('refresh_tokens.hash', 'hash', (db) =>
  db
    .selectFrom('refresh_tokens')
    .innerJoin('grants', 'grants.id', 'refresh_tokens.grant_id')
    .innerJoin('clients', 'clients.id', 'grants.client_id')
    .leftJoin('resources', 'resources.id', 'grants.resource_id')
    .leftJoin('users', 'users.id', 'grants.user_id')
    .leftJoin('refresh_tokens as successor', 'successor.hash', 'refresh_tokens.successor_hash')
    .select(tokenSettingsColumns)
    .select(joinedClientColumns)
    .select([
      'refresh_tokens.hash',
      'refresh_tokens.grant_id',
      'refresh_tokens.expires_at',
      'refresh_tokens.rotated_at',
      'refresh_tokens.successor_hash',
      'refresh_tokens.dpop_jkt',
      'successor.replay_box as successor_box',
      'successor.rotated_at as successor_rotated_at',
      'grants.client_id',
      'clients.kind as client_kind',
      'grants.user_id',
      'users.username',
      'grants.resource_id',
      'grants.scopes',
      'grants.revoked_at',
      'grants.purge_after',
      'grants.auth_time',
      'grants.amr',
      'grants.sid',
    ]),
);

const refreshTokenInForce = rowByKey('refresh_tokens.hash', 'hash', (db) =>
  db
    .selectFrom('refresh_tokens')
    .innerJoin('grants', 'grants.id', 'refresh_tokens.grant_id')
    .innerJoin('clients', 'clients.id', 'grants.client_id')
    .innerJoin('resources', 'resources.id', 'grants.resource_id')
    .leftJoin('users', 'users.id', 'grants.user_id')
    .select(clientConfidential)
    .select(introspectionColumns)
    .select([
      'refresh_tokens.grant_id',
      'grants.scopes',
      'refresh_tokens.created_at',
      'refresh_tokens.expires_at',
      'refresh_tokens.dpop_jkt',
      'grants.client_id',
      'grants.user_id',
      'grants.resource_id',
      'users.username',
      'users.display_name',
      'refresh_tokens.hash',
      sql<null>`null`.as('act'),
    ])
    .where('refresh_tokens.rotated_at', 'is', null)
    .where(grantInForce),
);

/**
 * A refresh token that can still be used: not expired, not rotated, its grant not revoked,
 * its user (if any) not disabled. In the shape of an access token's, for introspection.
 */
export async function findLiveRefreshToken(db: Kysely<Database>, hash: string, now: number): Promise<AccessTokenInfo | undefined> {
  return unexpired(await refreshTokenInForce(db, hash), now);
}

export interface RotationMark {
  hash: string;
  now: number;
  successorHash: string | null;
}

/** Marks the refresh token rotated and records its successor, when no rotation has yet: the exactly-once write of a refresh. */
export const markRotated = (db: Kysely<Database>, p: RotationMark) =>
  db.updateTable('refresh_tokens').set({ rotated_at: p.now, successor_hash: p.successorHash }).where('hash', '=', p.hash).where('rotated_at', 'is', null);

export interface TokenOwner extends JoinedClient {
  grant_id: string;
  client_id: string;
  user_id: string | null;
  revoked_at: number | null;
}

const ownerOf = (table: TokenTable) =>
  rowByKey(`${table}.hash`, 'hash', (db) =>
    db
      .selectFrom(table)
      .innerJoin('grants', 'grants.id', `${table}.grant_id`)
      .innerJoin('clients', 'clients.id', 'grants.client_id')
      .select([`${table}.hash`, 'grants.id as grant_id', 'grants.client_id', 'grants.user_id', 'grants.revoked_at', ...joinedClientColumns]),
  );
const tokenOwners = { access_tokens: ownerOf('access_tokens'), refresh_tokens: ownerOf('refresh_tokens') };

/** The grant and client a token was issued under, expired or not: what revocation needs. */
export async function findTokenOwner(db: Kysely<Database>, table: TokenTable, hash: string): Promise<TokenOwner | undefined> {
  return tokenOwners[table](db, hash);
}
