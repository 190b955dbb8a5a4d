/**
 * Upstream identity providers' rows (SPEC §4.13): connections, people's identities at them,
 * and logins under way at them. src/connections/ decides what they hold.
 */
import type { Insertable, Kysely, Updateable } from 'kysely';
import { queueBackchannelLogouts } from './backchannel-logouts.ts';
import type { Connection, ConnectionsTable, Database, PendingIdentitiesTable, UpstreamLoginsTable, UserIdentity } from './schema.ts';

/** Whether `text` has the shape of a connection's id (`slugOf`, perhaps with `-<n>` after it): what a lookup by id may be given. */
export function isConnectionId(text: string): boolean {
  return text.length <= 50 && /^[a-z0-9]+(?:-[a-z0-9]+)*$/.test(text);
}

/**
 * A resource server that may exchange a person's token for the provider's (SPEC §4.15): its id
 * decides — one deleted and another registered later at its URI is not it, even where a
 * connection's list still names the URI — and its URI is what is shown.
 */
export interface TokenResource {
  id: string;
  uri: string;
}

export function tokenResourcesOf(row: Pick<Connection, 'token_resources'>): TokenResource[] {
  return JSON.parse(row.token_resources) as TokenResource[];
}

export function findConnection(db: Kysely<Database>, id: string): Promise<Connection | undefined> {
  return db.selectFrom('connections').selectAll().where('id', '=', id).executeTakeFirst();
}

/** Every connection, in the order of their names (an administrator registers a handful). */
export function listConnections(db: Kysely<Database>): Promise<Connection[]> {
  return db.selectFrom('connections').selectAll().orderBy('name').orderBy('id').execute();
}

/** Whether a connection with this id exists (ids are made from names and must be unique). */
export async function connectionIdTaken(db: Kysely<Database>, id: string): Promise<boolean> {
  return (await db.selectFrom('connections').select('id').where('id', '=', id).executeTakeFirst()) !== undefined;
}

/** False when a connection with that id exists already. */
export async function insertConnection(db: Kysely<Database>, row: Insertable<ConnectionsTable>): Promise<boolean> {
  const inserted = await db
    .insertInto('connections')
    .values(row)
    .onConflict((oc) => oc.column('id').doNothing())
    .executeTakeFirst();
  return Number(inserted.numInsertedOrUpdatedRows ?? 0) > 0;
}

export async function updateConnection(db: Kysely<Database>, id: string, patch: Updateable<ConnectionsTable>): Promise<boolean> {
  const updated = await db.updateTable('connections').set(patch).where('id', '=', id).executeTakeFirst();
  return Number(updated.numUpdatedRows) > 0;
}

/**
 * Ends every session (and half-done second step) that came through the connection, with their
 * back-channel logouts queued in the same transaction (from `o.address`, the administrator's;
 * null: the command line); with `remove`, deletes the connection too (its identities and
 * logins under way go with it). Returns how many deliveries were queued.
 */
export async function endConnectionSessions(db: Kysely<Database>, id: string, now: number, o: { remove: boolean; address: string | null }): Promise<number> {
  return db.transaction().execute(async (trx) => {
    const ended = await trx.deleteFrom('sessions').where('connection_id', '=', id).returning('sid').execute();
    await trx.deleteFrom('pending_logins').where('connection_id', '=', id).execute();
    if (o.remove) await trx.deleteFrom('connections').where('id', '=', id).execute();
    return queueBackchannelLogouts(
      trx,
      ended.map((session) => session.sid),
      now,
      o.address,
    );
  });
}

/** An identity as logins and the account pages read it: without the provider tokens it may keep, sealed, which only the vault reads. */
export type LinkedIdentity = Omit<UserIdentity, 'provider_tokens' | 'provider_tokens_refreshing_until'>;

const LINKED_IDENTITY_COLUMNS = [
  'user_identities.connection_id',
  'user_identities.subject',
  'user_identities.user_id',
  'user_identities.email',
  'user_identities.groups',
  'user_identities.created_at',
  'user_identities.last_login_at',
] as const satisfies ReadonlyArray<`user_identities.${keyof LinkedIdentity}`>;

export function findIdentity(db: Kysely<Database>, connectionId: string, subject: string): Promise<LinkedIdentity | undefined> {
  return db
    .selectFrom('user_identities')
    .select(LINKED_IDENTITY_COLUMNS)
    .where('connection_id', '=', connectionId)
    .where('subject', '=', subject)
    .executeTakeFirst();
}

/** The person's identities, with their connections' names, in the order of those names. */
export function identitiesOf(db: Kysely<Database>, userId: string) {
  return db
    .selectFrom('user_identities')
    .innerJoin('connections', 'connections.id', 'user_identities.connection_id')
    .select(LINKED_IDENTITY_COLUMNS)
    .select(['connections.name as connection_name', 'connections.enabled as connection_enabled'])
    .where('user_identities.user_id', '=', userId)
    .orderBy('connections.name')
    .execute();
}

/** The identities of several people at once (the admin list of users), by user id. */
export async function identitiesOfUsers(db: Kysely<Database>, userIds: readonly string[]): Promise<Map<string, string[]>> {
  const byUser = new Map<string, string[]>();
  if (userIds.length === 0) return byUser;
  const rows = await db
    .selectFrom('user_identities')
    .innerJoin('connections', 'connections.id', 'user_identities.connection_id')
    .select(['user_identities.user_id', 'connections.name'])
    .where('user_identities.user_id', 'in', userIds)
    .orderBy('connections.name')
    .execute();
  for (const row of rows) byUser.set(row.user_id, [...(byUser.get(row.user_id) ?? []), row.name]);
  return byUser;
}

/**
 * Links the identity to the person: false when the identity is linked already (to anyone), or
 * the person already has an identity at this connection — the database decides (either unique
 * key), so two concurrent links of one identity make one.
 */
export async function insertIdentity(
  db: Kysely<Database>,
  row: { connectionId: string; subject: string; userId: string; email: string | null; now: number },
): Promise<boolean> {
  const inserted = await db
    .insertInto('user_identities')
    .values({
      connection_id: row.connectionId,
      subject: row.subject,
      user_id: row.userId,
      email: row.email,
      groups: '[]',
      created_at: row.now,
      last_login_at: row.now,
    })
    .onConflict((oc) => oc.doNothing())
    .executeTakeFirst();
  return Number(inserted.numInsertedOrUpdatedRows ?? 0) > 0;
}

/** Whether the connection exists and is enabled (asked again after a login's session is made: disabling it may have come between). */
export async function connectionEnabled(db: Kysely<Database>, id: string): Promise<boolean> {
  return (await db.selectFrom('connections').select('id').where('id', '=', id).where('enabled', '=', 1).executeTakeFirst()) !== undefined;
}

/** Records a login through the identity: when, and the email and group memberships the provider gave. */
export async function touchIdentity(
  db: Kysely<Database>,
  connectionId: string,
  subject: string,
  patch: { email: string | null; groups: string[]; now: number },
) {
  await db
    .updateTable('user_identities')
    .set({ email: patch.email, groups: JSON.stringify(patch.groups), last_login_at: patch.now })
    .where('connection_id', '=', connectionId)
    .where('subject', '=', subject)
    .execute();
}

/** Unlinks the person's identity at the connection: the removed row, or undefined when there was none. */
export async function deleteIdentity(db: Kysely<Database>, userId: string, connectionId: string): Promise<LinkedIdentity | undefined> {
  return db
    .deleteFrom('user_identities')
    .where('user_id', '=', userId)
    .where('connection_id', '=', connectionId)
    .returning(LINKED_IDENTITY_COLUMNS)
    .executeTakeFirst();
}

/** How many identities are linked at the connection. */
export async function countIdentities(db: Kysely<Database>, connectionId: string): Promise<number> {
  const row = await db
    .selectFrom('user_identities')
    .select((eb) => eb.fn.countAll<number>().as('count'))
    .where('connection_id', '=', connectionId)
    .executeTakeFirstOrThrow();
  return Number(row.count);
}

/** How many identities the person has at enabled connections, but the one at `except`. */
export async function countOtherIdentities(db: Kysely<Database>, userId: string, except: string): Promise<number> {
  const row = await db
    .selectFrom('user_identities')
    .innerJoin('connections', 'connections.id', 'user_identities.connection_id')
    .select((eb) => eb.fn.countAll<number>().as('count'))
    .where('user_identities.user_id', '=', userId)
    .where('user_identities.connection_id', '<>', except)
    .where('connections.enabled', '=', 1)
    .executeTakeFirstOrThrow();
  return Number(row.count);
}

export async function insertUpstreamLogin(db: Kysely<Database>, row: Insertable<UpstreamLoginsTable>): Promise<void> {
  await db.insertInto('upstream_logins').values(row).execute();
}

/**
 * Takes the login under way whose `state` hashes to `stateHash`, for the browser whose binding
 * hashes to `bindingHash`: deleted as it is read, so a callback is answered once however many
 * arrive; undefined when unknown, expired, taken already — or another browser's, which then
 * stays for its own browser.
 */
export async function takeUpstreamLogin(db: Kysely<Database>, p: { stateHash: string; bindingHash: string; now: number }) {
  return db
    .deleteFrom('upstream_logins')
    .where('state_hash', '=', p.stateHash)
    .where('binding_hash', '=', p.bindingHash)
    .where('expires_at', '>', p.now)
    .returningAll()
    .executeTakeFirst();
}

export async function insertPendingIdentity(db: Kysely<Database>, row: Insertable<PendingIdentitiesTable>): Promise<void> {
  await db.insertInto('pending_identities').values(row).execute();
}

export function findPendingIdentity(db: Kysely<Database>, idHash: string, now: number) {
  return db
    .selectFrom('pending_identities')
    .innerJoin('connections', 'connections.id', 'pending_identities.connection_id')
    .selectAll('pending_identities')
    .select('connections.name as connection_name')
    .where('pending_identities.id_hash', '=', idHash)
    .where('pending_identities.expires_at', '>', now)
    .where('connections.enabled', '=', 1)
    .executeTakeFirst();
}

/** Takes the pending identity (single use): true for the one caller that found it live. */
export async function takePendingIdentity(db: Kysely<Database>, idHash: string, now: number): Promise<boolean> {
  const deleted = await db.deleteFrom('pending_identities').where('id_hash', '=', idHash).where('expires_at', '>', now).executeTakeFirst();
  return Number(deleted.numDeletedRows) === 1;
}

/** Ends the person's sessions that came through the connection (but the one `except` names), with their back-channel logouts queued (from `address`). */
export async function endIdentitySessions(
  db: Kysely<Database>,
  p: { userId: string; connectionId: string; except?: string; now: number; address: string | null },
): Promise<number> {
  return db.transaction().execute(async (trx) => {
    let remove = trx.deleteFrom('sessions').where('user_id', '=', p.userId).where('connection_id', '=', p.connectionId);
    if (p.except !== undefined) remove = remove.where('id_hash', '<>', p.except);
    const ended = await remove.returning('sid').execute();
    return queueBackchannelLogouts(
      trx,
      ended.map((session) => session.sid),
      p.now,
      p.address,
    );
  });
}

/** An identity's kept provider tokens (SPEC §4.15), as stored: sealed. */
export interface KeptTokensRow {
  subject: string;
  provider_tokens: string;
  /** A refresh under way at another instance, until then (UserIdentitiesTable). */
  provider_tokens_refreshing_until: number | null;
}

/**
 * Stores the provider's tokens of an identity's login, sealed, replacing any kept before — only
 * while `previous` is what the row holds (undefined: whatever it holds), so that of two
 * refreshes of the same tokens one is kept. False when nothing was replaced.
 */
export async function keepProviderTokens(
  db: Kysely<Database>,
  p: { connectionId: string; subject: string; sealed: string; previous?: string; leaseUntil?: number },
): Promise<boolean> {
  const updated = await db
    .updateTable('user_identities')
    .set({ provider_tokens: p.sealed, provider_tokens_refreshing_until: null })
    .where('connection_id', '=', p.connectionId)
    .where('subject', '=', p.subject)
    .$if(p.previous !== undefined, (q) => q.where('provider_tokens', '=', p.previous!))
    .$if(p.leaseUntil !== undefined, (q) => q.where('provider_tokens_refreshing_until', '=', p.leaseUntil!))
    // Only while the connection keeps tokens and the person is enabled: a login or refresh that
    // read them so, and writes after `--no-keep-tokens` or a disable deleted them, keeps nothing.
    .where((eb) =>
      eb.and([
        eb.exists(
          eb
            .selectFrom('connections')
            .select('connections.id')
            .whereRef('connections.id', '=', 'user_identities.connection_id')
            .where('connections.keep_tokens', '=', 1),
        ),
        eb.exists(eb.selectFrom('users').select('users.id').whereRef('users.id', '=', 'user_identities.user_id').where('users.disabled', '=', 0)),
      ]),
    )
    .executeTakeFirst();
  return Number(updated.numUpdatedRows) > 0;
}

/** The person's kept provider tokens at the connection, if any. */
export function keptTokensOf(db: Kysely<Database>, connectionId: string, userId: string): Promise<KeptTokensRow | undefined> {
  return db
    .selectFrom('user_identities')
    .select(['subject', 'provider_tokens', 'provider_tokens_refreshing_until'])
    .where('connection_id', '=', connectionId)
    .where('user_id', '=', userId)
    .where('provider_tokens', 'is not', null)
    .executeTakeFirst() as Promise<KeptTokensRow | undefined>;
}

/**
 * Takes the identity's refresh lease until `until`: only while what is kept is still `previous`
 * and no other instance holds an unexpired lease. True when this caller now holds it.
 */
export async function takeRefreshLease(
  db: Kysely<Database>,
  p: { connectionId: string; subject: string; previous: string; now: number; until: number },
): Promise<boolean> {
  const updated = await db
    .updateTable('user_identities')
    .set({ provider_tokens_refreshing_until: p.until })
    .where('connection_id', '=', p.connectionId)
    .where('subject', '=', p.subject)
    .where('provider_tokens', '=', p.previous)
    .where((eb) => eb.or([eb('provider_tokens_refreshing_until', 'is', null), eb('provider_tokens_refreshing_until', '<=', p.now)]))
    .executeTakeFirst();
  return Number(updated.numUpdatedRows) > 0;
}

/** Gives the lease back after a refresh that kept nothing: only the lease taken until `until`, not one another instance took since. */
export async function releaseRefreshLease(db: Kysely<Database>, p: { connectionId: string; subject: string; until: number }): Promise<void> {
  await db
    .updateTable('user_identities')
    .set({ provider_tokens_refreshing_until: null })
    .where('connection_id', '=', p.connectionId)
    .where('subject', '=', p.subject)
    .where('provider_tokens_refreshing_until', '=', p.until)
    .execute();
}

/** Deletes the kept provider tokens of a person (disabled), or of a connection (it keeps them no more). */
export async function forgetProviderTokens(db: Kysely<Database>, of: { userId: string } | { connectionId: string }): Promise<void> {
  await db
    .updateTable('user_identities')
    .set({ provider_tokens: null, provider_tokens_refreshing_until: null })
    .$if('userId' in of, (q) => q.where('user_id', '=', (of as { userId: string }).userId))
    .$if('connectionId' in of, (q) => q.where('connection_id', '=', (of as { connectionId: string }).connectionId))
    .where('provider_tokens', 'is not', null)
    .execute();
}

/** Takes a deleted resource server off every connection's list, which then shows what is allowed (its id matches nothing any more). */
export async function dropTokenResource(db: Kysely<Database>, resourceId: string): Promise<void> {
  await db.transaction().execute(async (trx) => {
    for (const row of await trx.selectFrom('connections').select(['id', 'token_resources']).execute()) {
      const listed = tokenResourcesOf(row);
      if (listed.some((each) => each.id === resourceId)) {
        await trx
          .updateTable('connections')
          .set({ token_resources: JSON.stringify(listed.filter((each) => each.id !== resourceId)) })
          .where('id', '=', row.id)
          .execute();
      }
    }
  });
}
