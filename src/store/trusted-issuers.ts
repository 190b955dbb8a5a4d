/** Trusted issuers' rows and jwt-bearer clients' readable secrets (SPEC §4.11; src/oauth/assertions decides what they hold). */
import type { Insertable, Kysely } from 'kysely';
import { keysetPage, type Page, type PageCursor } from './clients.ts';
import type { ClientGrantSecretsTable, Database, TrustedIssuer, TrustedIssuersTable } from './schema.ts';

export function findTrustedIssuer(db: Kysely<Database>, issuer: string): Promise<TrustedIssuer | undefined> {
  return db.selectFrom('trusted_issuers').selectAll().where('issuer', '=', issuer).executeTakeFirst();
}

/** False when an issuer with that URL exists already. */
export async function insertTrustedIssuer(db: Kysely<Database>, row: Insertable<TrustedIssuersTable>): Promise<boolean> {
  const inserted = await db
    .insertInto('trusted_issuers')
    .values(row)
    .onConflict((oc) => oc.column('issuer').doNothing())
    .executeTakeFirst();
  return Number(inserted.numInsertedOrUpdatedRows ?? 0) > 0;
}

export async function deleteTrustedIssuer(db: Kysely<Database>, issuer: string): Promise<boolean> {
  const deleted = await db.deleteFrom('trusted_issuers').where('issuer', '=', issuer).executeTakeFirst();
  return Number(deleted.numDeletedRows) > 0;
}

/** A page of at most `limit` issuers in the order of their URLs, keyset-paged by URL (store/clients.ts `keysetPage`). */
export async function listTrustedIssuers(db: Kysely<Database>, cursor: PageCursor, limit: number): Promise<Page<TrustedIssuer>> {
  const backwards = 'before' in cursor;
  const rows = await db
    .selectFrom('trusted_issuers')
    .selectAll()
    .$if('after' in cursor, (q) => q.where('issuer', '>', (cursor as { after: string }).after))
    .$if(backwards, (q) => q.where('issuer', '<', (cursor as { before: string }).before))
    .orderBy('issuer', backwards ? 'desc' : 'asc')
    .limit(limit + 1)
    .execute();
  return keysetPage(rows, cursor, limit, (row) => row.issuer);
}

export function findClientGrantSecret(db: Kysely<Database>, clientId: string) {
  return db.selectFrom('client_grant_secrets').select(['secret', 'encrypted']).where('client_id', '=', clientId).executeTakeFirst();
}

/** Stores (or replaces, on rotation) a jwt-bearer client's sealed secret. */
export async function putClientGrantSecret(db: Kysely<Database>, row: Insertable<ClientGrantSecretsTable>): Promise<void> {
  await db
    .insertInto('client_grant_secrets')
    .values(row)
    .onConflict((oc) => oc.column('client_id').doUpdateSet({ secret: row.secret, encrypted: row.encrypted }))
    .execute();
}
