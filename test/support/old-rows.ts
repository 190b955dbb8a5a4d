/**
 * Rows as the first schema wrote them, for the migration tests: they migrate a database to just
 * before the migration they test, and today's createAccount would write columns added since.
 */
import { randomUUID } from 'node:crypto';
import { Migrator, type Kysely } from 'kysely';
import { hashPassword } from '../../src/accounts/passwords.ts';
import { parseDatabaseUrl } from '../../src/config.ts';
import { migrations, openStore, type Store } from '../../src/store/database.ts';
import { lookupKey } from '../../src/store/users.ts';
import type { Backend } from './backends.ts';
import { PASSWORD } from './server.ts';

/** A user with the columns of the initial schema; returns its id. */
export async function insertOldUser(db: Kysely<any>, user: { username: string; email: string; password: string; isAdmin: boolean }, now: number) {
  const id = randomUUID();
  await db
    .insertInto('users')
    .values({
      id,
      username: user.username,
      username_key: lookupKey(user.username),
      email: user.email,
      email_key: lookupKey(user.email),
      display_name: null,
      password_hash: await hashPassword(user.password),
      is_admin: user.isAdmin ? 1 : 0,
      disabled: 0,
      created_at: now,
    })
    .execute();
  return { id };
}

/**
 * A registered client with the columns every schema since the client kinds migration
 * (20261123_002) requires (those added later have defaults); `more`: any of those later ones.
 */
export async function insertOldClient(db: Kysely<any>, client: { id: string; scopes: string; more?: Record<string, unknown> }, now: number) {
  await db
    .insertInto('clients')
    .values({
      id: client.id,
      name: 'Notes',
      kind: 'registered',
      grant_type: 'authorization_code',
      redirect_uris: '["https://notes.example/cb"]',
      secret_hash: null,
      trusted: 0,
      require_pkce: 1,
      scopes: client.scopes,
      created_at: now,
      ...client.more,
    })
    .execute();
}

/** Migrates the database to just before the migration `name`: the schema the rows above were written to. */
export async function migrateToBefore(db: Kysely<any>, name: string): Promise<void> {
  const older = Object.fromEntries(Object.entries(migrations).filter(([migration]) => migration < name));
  const { error } = await new Migrator({ db, provider: { getMigrations: async () => older } }).migrateToLatest();
  if (error) throw error;
}

/**
 * A grant of the built-in resource with a refresh token, as the code from the resources
 * migration (20261123_001) until the OpenID Connect one wrote them: no login time, no `sid`.
 */
export async function insertOldGrant(db: Kysely<any>, grant: { clientId: string; userId: string; scopes: string; refreshHash: string }, now: number) {
  const id = randomUUID();
  const expiresAt = now + 86_400_000;
  await db
    .insertInto('grants')
    .values({
      id,
      client_id: grant.clientId,
      user_id: grant.userId,
      resource_id: 'builtin',
      scopes: grant.scopes,
      created_at: now,
      last_used_at: now,
      expires_at: expiresAt,
    })
    .execute();
  await db.insertInto('refresh_tokens').values({ hash: grant.refreshHash, grant_id: id, created_at: now, expires_at: expiresAt }).execute();
}

/** A database of `backend` migrated to just before `name`, holding one grant as the code of then wrote it: see `grantedBefore`. */
export interface OldDatabase {
  database: { url: string; drop(): Promise<void> };
  store: Store;
  db: Kysely<any>;
}

/**
 * A new database migrated to just before the migration `name`, with a person, a client of
 * `annotation:read` and her grant to it, whose refresh token has the hash `refreshHash`, made at `grantedAt`.
 */
export async function grantedBefore(backend: Backend, name: string, refreshHash: string, grantedAt: number): Promise<OldDatabase> {
  const database = await backend.create();
  const store = openStore(parseDatabaseUrl(database.url));
  const db = store.db as unknown as Kysely<any>;
  await migrateToBefore(db, name);
  const now = Date.now();
  const { id: userId } = await insertOldUser(db, { username: 'alice', email: 'alice@example.com', password: PASSWORD, isAdmin: false }, now);
  const clientId = '00000000-0000-4000-8000-000000000001';
  await insertOldClient(db, { id: clientId, scopes: 'annotation:read' }, now);
  await insertOldGrant(db, { clientId, userId, scopes: 'annotation:read', refreshHash }, grantedAt);
  return { database, store, db };
}
