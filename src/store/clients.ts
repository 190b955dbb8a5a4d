import { sql, type Kysely } from 'kysely';
import { prepare } from './prepared.ts';
import type { Client, Database, NewClient } from './schema.ts';

/**
 * `client_confidential`: 1 when the client (joined as `clients`) has a secret, else 0. A
 * confidential client must authenticate wherever its tokens are presented.
 */
export const clientConfidential = sql<number>`case when clients.secret_hash is null then 0 else 1 end`.as('client_confidential');

export async function insertClient(db: Kysely<Database>, client: NewClient): Promise<void> {
  await db.insertInto('clients').values(client).execute();
}

const clientById = prepare((db, p: { id: string }) => db.selectFrom('clients').selectAll().where('id', '=', p.id));

export async function findClient(db: Kysely<Database>, id: string): Promise<Client | undefined> {
  return clientById.first(db, { id });
}

export async function listClients(db: Kysely<Database>): Promise<Client[]> {
  return db.selectFrom('clients').selectAll().orderBy('created_at').orderBy('id').execute();
}

export async function updateClient(
  db: Kysely<Database>,
  id: string,
  patch: Partial<Pick<Client, 'name' | 'redirect_uri' | 'secret_hash' | 'trusted' | 'require_pkce' | 'scopes'>>,
): Promise<boolean> {
  const result = await db.updateTable('clients').set(patch).where('id', '=', id).executeTakeFirst();
  return result.numUpdatedRows > 0n;
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
