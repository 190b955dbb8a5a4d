import { sql, type Kysely, type Selectable, type Transaction } from 'kysely';
import { insertAuditEvent, type AuditEventRow } from './audit-events.ts';
import { onPostgres } from './chained-writes.ts';
import { rowByKey } from './shared-reads.ts';
import { allColumnsOf, type Client, type Database, type NewClient } from './schema.ts';

/**
 * `client_confidential`: 1 when the client must authenticate: it has a secret, or keys for private_key_jwt
 * (oauth/assertions/client-keys.ts `isConfidential`). A jwt-bearer (publisher) client's tokens
 * are refreshed and revoked by the page that holds them, which does not hold the secret that
 * signs grant tokens (SPEC §4.11, as in h): 0 for them too.
 */
export const clientConfidential = sql<number>`case when clients.grant_type = 'urn:ietf:params:oauth:grant-type:jwt-bearer'
    or (clients.secret_hash is null and clients.jwks is null and clients.jwks_uri is null) then 0 else 1 end`.as('client_confidential');

/** The client's columns read with a code or a token, at the same moment. */
export interface JoinedClient {
  /** 1 when the client is confidential as stored now (`clientConfidential`): the code or token is good only with its secret or key. */
  client_confidential: number;
  /** Its scopes as stored now: what an exchange or a refresh decides by. */
  client_scopes: string;
  /** With the two flags: what a secret checked against the client cache is confirmed by (`StoredCredentials`). */
  client_secret_hash: string | null;
  client_blocked: number;
  client_disabled: number;
}

/** `JoinedClient`'s columns, for a read that joins `clients`. */
export const joinedClientColumns = [
  clientConfidential,
  'clients.scopes as client_scopes',
  'clients.secret_hash as client_secret_hash',
  'clients.blocked as client_blocked',
  'clients.disabled as client_disabled',
] as const;

/**
 * What a secret checked against a copy of its client is confirmed by (oauth/client-auth.ts
 * `confirmSecret`): the client's row as stored, or these columns of it read with a code or token.
 */
export type StoredCredentials = Pick<Client, 'secret_hash' | 'blocked' | 'disabled'>;

/** `StoredCredentials` from a row read with the client joined. */
export function joinedCredentials(row: JoinedClient): StoredCredentials {
  return { secret_hash: row.client_secret_hash, blocked: row.client_blocked, disabled: row.client_disabled };
}

/**
 * Whether an administrator has switched the client off: blocked (a client no administrator
 * registered, SPEC §4.8) or disabled (any kind, SPEC §4.16). Either is refused everywhere alike.
 */
export function isSwitchedOff(client: Pick<Client, 'blocked' | 'disabled'>): boolean {
  return client.blocked === 1 || client.disabled === 1;
}

export async function insertClient(db: Kysely<Database>, client: NewClient): Promise<void> {
  await db.insertInto('clients').values(client).execute();
}

/** The client with this id as stored now; under load on PostgreSQL, one read for the requests that ask together. */
export const findClient: (db: Kysely<Database>, id: string) => Promise<Client | undefined> = rowByKey('clients.id', 'id', (db) =>
  db.selectFrom('clients').select(allColumnsOf('clients')),
);

/**
 * Where a page of a list starts: after the row with this key (the next page), or before it
 * (the previous one); neither: the first page.
 */
export type PageCursor = { after: string } | { before: string } | Record<string, never>;

/** The most rows a page of an admin list shows (SPEC §4.5), and `gatehouse client list` prints unless told otherwise. */
export const PAGE_SIZE = 100;

export interface Page<T> {
  rows: T[];
  /** The cursors of the pages either side; null when there is none. */
  next: { after: string } | null;
  previous: { before: string } | null;
}

/**
 * A page of at most `limit` clients, oldest first (by creation, then id). Keyset paging:
 * each page costs the same however far in it is, and a page reached by a link shows the rows
 * next to the one it was reached from even while clients are added or removed meanwhile —
 * which an offset would shift. The cursor is a client id; a cursor naming no client (deleted
 * meanwhile) gives an empty page.
 */
export async function listClients(db: Kysely<Database>, cursor: PageCursor, limit: number): Promise<Page<Client>> {
  return pageInCreationOrder(db, 'clients', cursor, limit);
}

/**
 * A page of at most `limit` rows of a table whose rows have a `created_at` and a unique `id`,
 * in that order, keyset-paged as `listClients` says; the cursor is a row's id.
 */
export async function pageInCreationOrder<T extends 'clients' | 'resources'>(
  db: Kysely<Database>,
  table: T,
  cursor: PageCursor,
  limit: number,
): Promise<Page<Selectable<Database[T]>>> {
  const backwards = 'before' in cursor;
  const from = 'after' in cursor ? cursor.after : 'before' in cursor ? cursor.before : undefined;
  const order = backwards ? 'desc' : 'asc';
  // Kysely cannot type a query over a table chosen by a parameter; both tables have these columns.
  const rows = (await (db as Kysely<any>)
    .selectFrom(table)
    .selectAll()
    .$if(from !== undefined, (query) =>
      query.where(
        sql<boolean>`(${sql.ref(`${table}.created_at`)}, ${sql.ref(`${table}.id`)}) ${sql.raw(backwards ? '<' : '>')}
          (select k.created_at, k.id from ${sql.table(table)} k where k.id = ${from})`,
      ),
    )
    .orderBy('created_at', order)
    .orderBy('id', order)
    .limit(limit + 1)
    .execute()) as Array<Selectable<Database[T]> & { id: string }>;
  return keysetPage(rows, cursor, limit, (row) => row.id);
}

/**
 * The page of a keyset query that read up to `limit + 1` rows from the cursor on, in the
 * direction of the cursor (backwards for `before`), with the cursors either side.
 */
export function keysetPage<T>(rows: T[], cursor: PageCursor, limit: number, key: (row: T) => string): Page<T> {
  const backwards = 'before' in cursor;
  const more = rows.length > limit;
  const page = rows.slice(0, limit);
  if (backwards) page.reverse();
  const first = page[0];
  const last = page.at(-1);
  return {
    rows: page,
    // Beyond the page in the direction read: rows when there were more than the limit. Behind
    // it: the cursor's own row, when the page was reached from one.
    next: last !== undefined && (backwards || more) ? { after: key(last) } : null,
    previous: first !== undefined && (backwards ? more : 'after' in cursor) ? { before: key(first) } : null,
  };
}

export async function updateClient(
  db: Kysely<Database>,
  id: string,
  patch: Partial<
    Pick<
      Client,
      | 'name'
      | 'redirect_uris'
      | 'secret_hash'
      | 'trusted'
      | 'require_pkce'
      | 'scopes'
      | 'post_logout_redirect_uris'
      | 'backchannel_logout_uri'
      | 'id_token_alg'
      | 'jwks'
      | 'jwks_uri'
    >
  >,
): Promise<boolean> {
  const result = await db.updateTable('clients').set(patch).where('id', '=', id).executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/** The names of the clients administrators registered (with the index on kind). */
export async function registeredClientNames(db: Kysely<Database>): Promise<string[]> {
  const rows = await db.selectFrom('clients').select('name').where('kind', '=', 'registered').execute();
  return rows.map((row) => row.name);
}

/** The client's grants that are not revoked, with their scopes. */
export async function liveGrantsOfClient(db: Kysely<Database>, id: string): Promise<Array<{ id: string; scopes: string }>> {
  return db.selectFrom('grants').select(['id', 'scopes']).where('client_id', '=', id).where('revoked_at', 'is', null).execute();
}

/**
 * Deletes the client; its grants, tokens, codes and consents go with it (foreign keys
 * cascade), so nothing issued to it stays valid. Returns the ids of the grants that were
 * live, for revocation fan-out.
 */
export async function deleteClient(db: Kysely<Database>, id: string): Promise<{ deleted: boolean; grantIds: string[] }> {
  return db.transaction().execute(async (trx) => {
    const grants = await trx.selectFrom('grants').select('id').where('client_id', '=', id).where('revoked_at', 'is', null).execute();
    const result = await trx.deleteFrom('clients').where('id', '=', id).executeTakeFirst();
    return { deleted: result.numDeletedRows > 0n, grantIds: grants.map((g) => g.id) };
  });
}

/** A metadata-document client as its document describes it now. */
export type MetadataClientRow = Pick<Client, 'id' | 'name' | 'redirect_uris' | 'scopes' | 'created_at' | DescribedColumn>;

/** What a metadata document says besides the name, each updated when the document changes it. */
const DESCRIBED = [
  'redirect_uris',
  'post_logout_redirect_uris',
  'backchannel_logout_uri',
  'id_token_alg',
  'jwks',
  'jwks_uri',
  'require_dpop',
  'require_par',
] as const;
type DescribedColumn = (typeof DESCRIBED)[number];

/** The row of a metadata-document client as `client` describes it: DESCRIBED is the one list of what its document decides. */
export function metadataClientRow(client: Client): MetadataClientRow {
  const described = Object.fromEntries(DESCRIBED.map((column) => [column, client[column]])) as Pick<Client, DescribedColumn>;
  return { id: client.id, name: client.name, scopes: client.scopes, created_at: client.created_at, ...described };
}

/** Whether the stored row says what the document says. */
const describedAlike = (stored: Client, client: MetadataClientRow) =>
  stored.name === client.name && DESCRIBED.every((column) => stored[column] === client[column]);

/**
 * Records a client known by its metadata document as its document describes it now, so that
 * consents, codes and grants can reference it: inserted the first time, its name, redirect
 * URLs and OpenID Connect settings updated when the document changed, with the audit row `event(previous)` (previous:
 * the row as it was, undefined the first time) in the same transaction. Returns whether
 * anything was written. Its id is the document's URL, which no other kind of client has.
 *
 * Concurrent approvals of one client: the insert does nothing for all but one; the others
 * read the row locked (PostgreSQL; SQLite's transaction holds the only write lock from its
 * start), so one change of the document is written and audited once.
 */
export async function recordMetadataClient(
  db: Kysely<Database>,
  client: MetadataClientRow,
  event: (previous: Client | undefined) => AuditEventRow,
): Promise<boolean> {
  const stored = await findClient(db, client.id);
  if (stored && describedAlike(stored, client)) return false;
  return db.transaction().execute(async (trx) => {
    const inserted = await trx
      .insertInto('clients')
      .values({ ...client, kind: 'metadata_document', grant_type: 'authorization_code', secret_hash: null, trusted: 0, require_pkce: 1 })
      .onConflict((conflict) => conflict.column('id').doNothing())
      .returning('id')
      .executeTakeFirst();
    if (inserted) {
      await insertAuditEvent(db, event(undefined), trx);
      return true;
    }
    const previous = await trx
      .selectFrom('clients')
      .selectAll()
      .where('id', '=', client.id)
      .where('kind', '=', 'metadata_document')
      .$if(onPostgres(db), (query) => query.forUpdate())
      .executeTakeFirst();
    if (!previous || describedAlike(previous, client)) return false;
    const { name, redirect_uris, post_logout_redirect_uris, backchannel_logout_uri, id_token_alg, jwks, jwks_uri } = client;
    await trx
      .updateTable('clients')
      .set({ name, redirect_uris, post_logout_redirect_uris, backchannel_logout_uri, id_token_alg, jwks, jwks_uri })
      .where('id', '=', client.id)
      .execute();
    await insertAuditEvent(db, event(previous), trx);
    return true;
  });
}

/** Sets the client's blocked flag; false when there is no such client. */
export async function setClientBlocked(db: Kysely<Database>, id: string, blocked: boolean): Promise<boolean> {
  const result = await db
    .updateTable('clients')
    .set({ blocked: blocked ? 1 : 0 })
    .where('id', '=', id)
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/** Sets the client's disabled flag (SPEC §4.16); false when there is no such client or it was so already. */
export async function setClientDisabled(db: Kysely<Database>, id: string, disabled: boolean): Promise<boolean> {
  const result = await db
    .updateTable('clients')
    .set({ disabled: disabled ? 1 : 0 })
    .where('id', '=', id)
    .where('disabled', '=', disabled ? 0 : 1)
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/** `substr(value, 1, length(prefix)) = prefix`: a prefix test with no LIKE wildcards to escape, on both backends. */
const startsWith = (value: ReturnType<typeof sql>, prefix: ReturnType<typeof sql>) => sql<boolean>`substr(${value}, 1, length(${prefix})) = ${prefix}`;

/** Sets the blocked flag of the metadata-document clients known under `prefix`; returns their ids. */
async function flagClientsUnder(trx: Transaction<Database>, prefix: string, blocked: boolean): Promise<string[]> {
  const rows = await trx
    .updateTable('clients')
    .set({ blocked: blocked ? 1 : 0 })
    .where('kind', '=', 'metadata_document')
    .where(startsWith(sql.ref('clients.id'), sql.val(prefix)))
    .returning('id')
    .execute();
  return rows.map((row) => row.id);
}

/** Blocks every metadata document under `prefix`, and flags the clients already known under it; returns their ids. */
export async function insertClientBlock(db: Kysely<Database>, prefix: string, now: number): Promise<string[]> {
  return db.transaction().execute(async (trx) => {
    await trx
      .insertInto('client_blocks')
      .values({ prefix, created_at: now })
      .onConflict((conflict) => conflict.column('prefix').doNothing())
      .execute();
    return flagClientsUnder(trx, prefix, true);
  });
}

/** Lifts the block on `prefix` and on the clients known under it; their ids, or null when the prefix was not blocked. */
export async function deleteClientBlock(db: Kysely<Database>, prefix: string): Promise<string[] | null> {
  return db.transaction().execute(async (trx) => {
    const result = await trx.deleteFrom('client_blocks').where('prefix', '=', prefix).executeTakeFirst();
    const unblocked = await flagClientsUnder(trx, prefix, false);
    return result.numDeletedRows > 0n ? unblocked : null;
  });
}

export async function listClientBlocks(db: Kysely<Database>): Promise<Array<{ prefix: string; created_at: number }>> {
  return db.selectFrom('client_blocks').selectAll().orderBy('prefix').execute();
}

/** Whether the client with this id is switched off: blocked or disabled by its own flags, or under a blocked prefix of its URL. */
export async function isClientBlocked(db: Kysely<Database>, id: string): Promise<boolean> {
  const row = await db
    .selectNoFrom((eb) => [
      eb
        .exists(
          eb
            .selectFrom('clients')
            .select('id')
            .where('id', '=', id)
            .where((w) => w.or([w('blocked', '=', 1), w('disabled', '=', 1)])),
        )
        .as('flagged'),
      eb
        .exists(
          eb
            .selectFrom('client_blocks')
            .select('prefix')
            .where(startsWith(sql.val(id), sql.ref('prefix'))),
        )
        .as('prefixed'),
    ])
    .executeTakeFirstOrThrow();
  return Boolean(Number(row.flagged)) || Boolean(Number(row.prefixed));
}
