/**
 * Resource servers and their scopes (SPEC §3). The changes that take access away — deleting
 * a scope or a resource server — run in one transaction each: the scopes leave every client's
 * list first (so an exchange or refresh that read the old list finds its conditional write
 * refused, store/grants.ts), then the codes not yet exchanged that hold them are voided and
 * the grants that hold them revoked.
 */
import type { Kysely, Transaction } from 'kysely';
import { pageInCreationOrder, type Page, type PageCursor } from './clients.ts';
import { prepare } from './prepared.ts';
import { allColumnsOf, type Database, type NewClient, type Resource, type ScopeRow } from './schema.ts';

/** The id of the built-in resource: the service's own API. */
export const BUILTIN_RESOURCE_ID = 'builtin';

/**
 * How the resource server's access tokens are made, read with the code or refresh token that
 * is exchanged for them (no query of its own). Left-joined, since a used code and a revoked
 * grant outlive their resource server: NULL once it is deleted.
 */
export const tokenSettingsColumns = [
  'resources.token_format',
  'resources.signing_alg',
  'resources.access_token_ttl',
  'resources.uri as resource_uri',
  'resources.require_second_factor',
  'resources.require_dpop',
] as const;

const resourceByUri = prepare((db, p: { uri: string }) => db.selectFrom('resources').select(allColumnsOf('resources')).where('uri', '=', p.uri));
const resourceById = prepare((db, p: { id: string }) => db.selectFrom('resources').select(allColumnsOf('resources')).where('id', '=', p.id));
const scopesOf = prepare((db, p: { resourceId: string }) =>
  db.selectFrom('scopes').select(allColumnsOf('scopes')).where('resource_id', '=', p.resourceId).orderBy('name'),
);
/**
 * A resource server and its scopes in one statement (the authorization request and the
 * client_credentials grant read both): one row per scope, in name order, the resource's
 * columns on each — or one row with no scope when it has none.
 */
const withScopes = (db: Kysely<Database>) =>
  db
    .selectFrom('resources')
    .leftJoin('scopes', 'scopes.resource_id', 'resources.id')
    .select(allColumnsOf('resources'))
    .select(['scopes.name as scope_name', 'scopes.description as scope_description', 'scopes.created_at as scope_created_at'])
    .orderBy('scopes.name');
const resourceWithScopesById = prepare((db, p: { id: string }) => withScopes(db).where('resources.id', '=', p.id));
const resourceWithScopesByUri = prepare((db, p: { uri: string }) => withScopes(db).where('resources.uri', '=', p.uri));
const resourceOfClient = prepare((db, p: { clientId: string }) => db.selectFrom('resources').select(['id', 'uri']).where('client_id', '=', p.clientId));

/** The resource server whose own (introspection) client this is, if any. */
export function findResourceOfClient(db: Kysely<Database>, clientId: string): Promise<{ id: string; uri: string | null } | undefined> {
  return resourceOfClient.first(db, { clientId });
}

export async function findResourceByUri(db: Kysely<Database>, uri: string): Promise<Resource | undefined> {
  return resourceByUri.first(db, { uri });
}

export async function findResourceById(db: Kysely<Database>, id: string): Promise<Resource | undefined> {
  return resourceById.first(db, { id });
}

/** The resource server with this id or URI, and its scopes in name order; undefined when there is none. */
export async function findResourceWithScopes(
  db: Kysely<Database>,
  key: { id: string } | { uri: string },
): Promise<{ resource: Resource; scopes: ScopeRow[] } | undefined> {
  const { rows } = 'id' in key ? await resourceWithScopesById.execute(db, key) : await resourceWithScopesByUri.execute(db, key);
  if (rows.length === 0) return undefined;
  const { scope_name: _name, scope_description: _description, scope_created_at: _createdAt, ...resource } = rows[0]!;
  const scopes = rows.flatMap((row) =>
    row.scope_name === null ? [] : [{ name: row.scope_name, resource_id: resource.id, description: row.scope_description!, created_at: row.scope_created_at! }],
  );
  return { resource, scopes };
}

export async function scopesOfResource(db: Kysely<Database>, resourceId: string): Promise<ScopeRow[]> {
  return (await scopesOf.execute(db, { resourceId })).rows;
}

/** Whether the client is a resource server's own introspection client. */
export async function isResourceServerClient(db: Kysely<Database>, clientId: string): Promise<boolean> {
  return (await resourceOfClient.first(db, { clientId })) !== undefined;
}

export async function listResources(db: Kysely<Database>): Promise<Resource[]> {
  return db.selectFrom('resources').selectAll().orderBy('created_at').orderBy('id').execute();
}

/** A page of at most `limit` resource servers in creation order (the built-in one first). */
export async function listResourcePage(db: Kysely<Database>, cursor: PageCursor, limit: number): Promise<Page<Resource>> {
  return pageInCreationOrder(db, 'resources', cursor, limit);
}

/** Every scope of every resource server, by name. */
export async function listScopes(db: Kysely<Database>): Promise<ScopeRow[]> {
  return db.selectFrom('scopes').selectAll().orderBy('name').execute();
}

export async function findScope(db: Kysely<Database>, name: string): Promise<ScopeRow | undefined> {
  return db.selectFrom('scopes').selectAll().where('name', '=', name).executeTakeFirst();
}

/** The names among `names` that are taken by a scope already. */
export async function takenScopeNames(db: Kysely<Database>, names: readonly string[]): Promise<string[]> {
  if (names.length === 0) return [];
  return (await db.selectFrom('scopes').select('name').where('name', 'in', names).execute()).map((row) => row.name);
}

/** A resource server with its introspection client and scopes, all or nothing. */
export async function insertResource(
  db: Kysely<Database>,
  resource: Resource,
  client: NewClient,
  scopes: ReadonlyArray<{ name: string; description: string }>,
): Promise<void> {
  await db.transaction().execute(async (trx) => {
    await trx.insertInto('clients').values(client).execute();
    await trx.insertInto('resources').values(resource).execute();
    if (scopes.length > 0) {
      await trx
        .insertInto('scopes')
        .values(scopes.map((s) => ({ name: s.name, resource_id: resource.id, description: s.description, created_at: resource.created_at })))
        .execute();
    }
  });
}

export async function updateResource(
  db: Kysely<Database>,
  id: string,
  patch: Partial<Pick<Resource, 'name' | 'uri' | 'token_format' | 'signing_alg' | 'access_token_ttl' | 'require_second_factor'>>,
): Promise<void> {
  await db.updateTable('resources').set(patch).where('id', '=', id).execute();
}

export async function insertScope(db: Kysely<Database>, scope: ScopeRow): Promise<void> {
  await db.insertInto('scopes').values(scope).execute();
}

export async function updateScopeDescription(db: Kysely<Database>, name: string, description: string): Promise<void> {
  await db.updateTable('scopes').set({ description }).where('name', '=', name).execute();
}

const holds = (stored: string, names: ReadonlySet<string>) => stored.split(' ').some((s) => names.has(s));

/** What taking access away changed: the grants revoked, and the clients changed or deleted. */
export interface Withdrawal {
  grantIds: string[];
  clientIds: string[];
}

/**
 * Takes the scopes away: from every client's list, from the codes not yet exchanged (voided)
 * and from the live grants (revoked), then deletes them.
 */
async function withdrawScopes(trx: Transaction<Database>, names: ReadonlySet<string>, now: number): Promise<Withdrawal> {
  const clientIds: string[] = [];
  for (const client of await trx.selectFrom('clients').select(['id', 'scopes']).execute()) {
    if (!holds(client.scopes, names)) continue;
    const kept = client.scopes
      .split(' ')
      .filter((s) => !names.has(s))
      .join(' ');
    await trx.updateTable('clients').set({ scopes: kept }).where('id', '=', client.id).execute();
    clientIds.push(client.id);
  }
  const codes = await trx.selectFrom('auth_codes').select(['hash', 'scopes']).where('consumed_at', 'is', null).execute();
  const voided = codes.filter((code) => holds(code.scopes, names)).map((code) => code.hash);
  if (voided.length > 0) await trx.deleteFrom('auth_codes').where('hash', 'in', voided).execute();
  const grants = await trx.selectFrom('grants').select(['id', 'scopes']).where('revoked_at', 'is', null).execute();
  const revoked = grants.filter((grant) => holds(grant.scopes, names)).map((grant) => grant.id);
  if (revoked.length > 0) await trx.updateTable('grants').set({ revoked_at: now }).where('id', 'in', revoked).where('revoked_at', 'is', null).execute();
  if (names.size > 0)
    await trx
      .deleteFrom('scopes')
      .where('name', 'in', [...names])
      .execute();
  return { grantIds: revoked, clientIds };
}

/** Deletes the scope and takes it away from everyone. */
export async function deleteScope(db: Kysely<Database>, name: string, now: number): Promise<Withdrawal> {
  return db.transaction().execute((trx) => withdrawScopes(trx, new Set([name]), now));
}

/**
 * Deletes the resource server: its scopes are taken away as above, every grant for it is
 * revoked and every code for it voided, and its introspection client goes with it. Returns
 * whether it existed, and what it changed.
 */
export async function deleteResource(db: Kysely<Database>, id: string, now: number): Promise<Withdrawal & { deleted: boolean }> {
  return db.transaction().execute(async (trx) => {
    const resource = await trx.selectFrom('resources').select(['id', 'client_id']).where('id', '=', id).executeTakeFirst();
    if (!resource) return { deleted: false, grantIds: [], clientIds: [] };
    const scopes = await trx.selectFrom('scopes').select('name').where('resource_id', '=', id).execute();
    const withdrawn = await withdrawScopes(trx, new Set(scopes.map((s) => s.name)), now);
    const revoked = new Set(withdrawn.grantIds);
    await trx.deleteFrom('auth_codes').where('resource_id', '=', id).where('consumed_at', 'is', null).execute();
    const grants = await trx
      .updateTable('grants')
      .set({ revoked_at: now })
      .where('resource_id', '=', id)
      .where('revoked_at', 'is', null)
      .returning('id')
      .execute();
    for (const grant of grants) revoked.add(grant.id);
    await trx.deleteFrom('resources').where('id', '=', id).execute();
    // Its introspection client's grants (it obtains none) and consents go with it.
    if (resource.client_id !== null) await trx.deleteFrom('clients').where('id', '=', resource.client_id).execute();
    const clientIds = resource.client_id === null ? withdrawn.clientIds : [...withdrawn.clientIds, resource.client_id];
    return { deleted: true, grantIds: [...revoked], clientIds };
  });
}
