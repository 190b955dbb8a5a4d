/**
 * Authorization codes. A code is used at most once: `consumeCode` is one conditional UPDATE
 * in the transaction or statement that creates its grant (atomic-writes.ts `exchangeCode`).
 * A code not yet exchanged can be voided (deleted) when the access it would give is taken away.
 */
import type { Kysely, UpdateQueryBuilder, UpdateResult } from 'kysely';
import { joinedClientColumns, type JoinedClient } from './clients.ts';
import { rowByKey } from './shared-reads.ts';
import { tokenSettingsColumns } from './resources.ts';
import { allColumnsOf, type AuthCode, type Database, type SigningAlg, type TokenFormat } from './schema.ts';

export type NewCode = Omit<AuthCode, 'consumed_at' | 'grant_id'>;

/** The code's row; stored with its audit row by atomic-writes.ts `insertCode`. */
export const insertCodeRow = (db: Kysely<Database>, p: NewCode) =>
  db.insertInto('auth_codes').values({
    hash: p.hash,
    client_id: p.client_id,
    user_id: p.user_id,
    redirect_uri: p.redirect_uri,
    resource_id: p.resource_id,
    scopes: p.scopes,
    code_challenge: p.code_challenge,
    auth_time: p.auth_time,
    amr: p.amr,
    sid: p.sid,
    nonce: p.nonce,
    dpop_jkt: p.dpop_jkt,
    created_at: p.created_at,
    expires_at: p.expires_at,
  });

/**
 * The code row whatever its state, with whether its user is disabled, its client's scopes
 * as stored now and its resource server's token settings: the caller checks each.
 */
export const findCode: (
  db: Kysely<Database>,
  hash: string,
) => Promise<(AuthCode & JoinedTokenSettings & JoinedClient & { user_disabled: number; username: string }) | undefined> = rowByKey(
  'auth_codes.hash',
  'hash',
  (db) =>
    db
      .selectFrom('auth_codes')
      .innerJoin('users', 'users.id', 'auth_codes.user_id')
      .innerJoin('clients', 'clients.id', 'auth_codes.client_id')
      .leftJoin('resources', 'resources.id', 'auth_codes.resource_id')
      .select(allColumnsOf('auth_codes'))
      .select(['users.disabled as user_disabled', 'users.username', ...joinedClientColumns, ...tokenSettingsColumns]),
);

/** A resource server's token settings as a code or refresh token is read with them: NULL once it is deleted. */
export interface JoinedTokenSettings {
  resource_id: string;
  token_format: TokenFormat | null;
  signing_alg: SigningAlg | null;
  access_token_ttl: number | null;
  /** NULL for the built-in resource (its URI is PUBLIC_URL), and once the resource server is deleted. */
  resource_uri: string | null;
  /** 1 when its tokens need a login with a second factor (SPEC §4.12); NULL once it is deleted. */
  require_second_factor: number | null;
  /** 1 when its tokens are issued only with a DPoP proof (SPEC §4.14); NULL once it is deleted. */
  require_dpop: number | null;
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

export const consumeCode: Consume = (db, p) =>
  db.updateTable('auth_codes').set({ consumed_at: p.now, grant_id: p.grantId }).where('hash', '=', p.hash).where('consumed_at', 'is', null);

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
