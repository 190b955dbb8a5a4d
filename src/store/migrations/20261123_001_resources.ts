/**
 * Resource servers and scopes as data (SPEC §3, RFC 8707). Frozen in time: it must not
 * import application types.
 *
 * The built-in resource (the service's own API) is the row 'builtin', whose URI is NULL:
 * it is always PUBLIC_URL, computed at run time, so changing PUBLIC_URL moves it. Existing
 * grants, codes and consents are for it. `grants.resource_id` and `auth_codes.resource_id`
 * are plain columns (SQLite cannot add a REFERENCES column with a non-NULL default while
 * foreign keys are on): the code enforces them, and revokes a resource's grants and voids
 * its codes before deleting it. Consents are keyed by user, client and resource, so the
 * table is rebuilt with that key and its rows carried over.
 */
import { sql, type Kysely } from 'kysely';

const BUILTIN = 'builtin';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('resources')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('uri', 'text', (c) => c.unique())
    .addColumn('name', 'text', (c) => c.notNull())
    // The resource server's own confidential client, with which it introspects; NULL for builtin.
    .addColumn('client_id', 'text', (c) => c.references('clients.id').onDelete('set null'))
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('resources_client_id').on('resources').column('client_id').execute();

  await db.schema
    .createTable('scopes')
    .addColumn('name', 'text', (c) => c.primaryKey())
    .addColumn('resource_id', 'text', (c) => c.notNull().references('resources.id').onDelete('cascade'))
    .addColumn('description', 'text', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('scopes_resource_id').on('scopes').column('resource_id').execute();

  const now = Date.now();
  await db.insertInto('resources').values({ id: BUILTIN, uri: null, name: 'This service', client_id: null, created_at: now }).execute();
  await db
    .insertInto('scopes')
    .values([
      { name: 'annotation:read', resource_id: BUILTIN, description: 'Read your annotations, including private ones', created_at: now },
      { name: 'annotation:write', resource_id: BUILTIN, description: 'Create, edit and delete annotations as you', created_at: now },
    ])
    .execute();

  await db.schema
    .alterTable('grants')
    .addColumn('resource_id', 'text', (c) => c.notNull().defaultTo(BUILTIN))
    .execute();
  await db.schema.createIndex('grants_resource_id').on('grants').column('resource_id').execute();
  await db.schema
    .alterTable('auth_codes')
    .addColumn('resource_id', 'text', (c) => c.notNull().defaultTo(BUILTIN))
    .execute();

  await db.schema
    .createTable('consents_by_resource')
    .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('client_id', 'text', (c) => c.notNull().references('clients.id').onDelete('cascade'))
    .addColumn('resource_id', 'text', (c) => c.notNull().references('resources.id').onDelete('cascade'))
    .addColumn('scopes', 'text', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint('consents_user_client_resource_pkey', ['user_id', 'client_id', 'resource_id'])
    .execute();
  await sql`insert into consents_by_resource (user_id, client_id, resource_id, scopes, created_at, expires_at)
    select user_id, client_id, ${BUILTIN}, scopes, created_at, expires_at from consents`.execute(db);
  await db.schema.dropTable('consents').execute();
  await db.schema.alterTable('consents_by_resource').renameTo('consents').execute();
  await db.schema.createIndex('consents_client_id').on('consents').column('client_id').execute();
  await db.schema.createIndex('consents_expires_at').on('consents').column('expires_at').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('consents_by_client')
    .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('client_id', 'text', (c) => c.notNull().references('clients.id').onDelete('cascade'))
    .addColumn('scopes', 'text', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint('consents_pkey', ['user_id', 'client_id'])
    .execute();
  await sql`insert into consents_by_client (user_id, client_id, scopes, created_at, expires_at)
    select user_id, client_id, scopes, created_at, expires_at from consents where resource_id = ${BUILTIN}`.execute(db);
  await db.schema.dropTable('consents').execute();
  await db.schema.alterTable('consents_by_client').renameTo('consents').execute();
  await db.schema.createIndex('consents_client_id').on('consents').column('client_id').execute();
  await db.schema.createIndex('consents_expires_at').on('consents').column('expires_at').execute();
  await db.schema.dropIndex('grants_resource_id').execute();
  await db.schema.alterTable('auth_codes').dropColumn('resource_id').execute();
  await db.schema.alterTable('grants').dropColumn('resource_id').execute();
  await db.schema.dropTable('scopes').execute();
  await db.schema.dropTable('resources').execute();
}
