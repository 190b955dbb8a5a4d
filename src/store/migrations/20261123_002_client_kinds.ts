/**
 * Clients that no administrator registered (SPEC §3, §4.8): each client gets a `kind`
 * ('registered', 'metadata_document' or 'dynamic') and a `blocked` flag, and several
 * redirect URLs — `redirect_uris`, a JSON array, replaces `redirect_uri` (existing rows keep
 * theirs as a one-element list). `client_blocks` holds the URL prefixes an administrator
 * blocked: every metadata document under one is refused. Frozen in time.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('clients')
    .addColumn('kind', 'text', (c) => c.notNull().defaultTo('registered'))
    .execute();
  await db.schema
    .alterTable('clients')
    .addColumn('blocked', 'integer', (c) => c.notNull().defaultTo(0))
    .execute();
  await db.schema
    .alterTable('clients')
    .addColumn('redirect_uris', 'text', (c) => c.notNull().defaultTo('[]'))
    .execute();
  const rows: Array<{ id: string; redirect_uri: string | null }> = await db.selectFrom('clients').select(['id', 'redirect_uri']).execute();
  for (const row of rows) {
    if (row.redirect_uri === null) continue;
    await db
      .updateTable('clients')
      .set({ redirect_uris: JSON.stringify([row.redirect_uri]) })
      .where('id', '=', row.id)
      .execute();
  }
  await db.schema.alterTable('clients').dropColumn('redirect_uri').execute();
  // The purge looks for dynamic clients by kind and age.
  await db.schema.createIndex('clients_kind_created_at').on('clients').columns(['kind', 'created_at']).execute();

  await db.schema
    .createTable('client_blocks')
    .addColumn('prefix', 'text', (c) => c.primaryKey())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('client_blocks').execute();
  await db.schema.dropIndex('clients_kind_created_at').execute();
  await db.schema.alterTable('clients').addColumn('redirect_uri', 'text').execute();
  const rows: Array<{ id: string; redirect_uris: string }> = await db.selectFrom('clients').select(['id', 'redirect_uris']).execute();
  for (const row of rows) {
    const [first] = JSON.parse(row.redirect_uris) as string[];
    if (first !== undefined) await db.updateTable('clients').set({ redirect_uri: first }).where('id', '=', row.id).execute();
  }
  await db.deleteFrom('clients').where('kind', '!=', 'registered').execute();
  for (const column of ['redirect_uris', 'blocked', 'kind']) await db.schema.alterTable('clients').dropColumn(column).execute();
}
