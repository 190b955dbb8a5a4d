import { sql, type Kysely } from 'kysely';
import { keysetPage, type Page, type PageCursor } from './clients.ts';
import type { Database, NewUser, User } from './schema.ts';

/** Usernames and emails compare case-insensitively and after Unicode normalization. */
export function lookupKey(value: string): string {
  return value.normalize('NFKC').toLowerCase();
}

export async function insertUser(db: Kysely<Database>, user: NewUser): Promise<void> {
  await db.insertInto('users').values(user).execute();
}

export async function findUserById(db: Kysely<Database>, id: string): Promise<User | undefined> {
  return db.selectFrom('users').selectAll().where('id', '=', id).executeTakeFirst();
}

export async function findUserByUsername(db: Kysely<Database>, username: string): Promise<User | undefined> {
  return db.selectFrom('users').selectAll().where('username_key', '=', lookupKey(username)).executeTakeFirst();
}

/** The login form accepts a username or an email address. */
export async function findUserByLogin(db: Kysely<Database>, login: string): Promise<User | undefined> {
  const key = lookupKey(login);
  return db
    .selectFrom('users')
    .selectAll()
    .where((eb) => eb.or([eb('username_key', '=', key), eb('email_key', '=', key)]))
    .executeTakeFirst();
}

export async function listUsers(db: Kysely<Database>): Promise<User[]> {
  return db.selectFrom('users').selectAll().orderBy('username_key').execute();
}

/**
 * A page of at most `limit` users whose username or email contains `text` (all users when
 * empty), compared as lookup keys, in username order; LIKE's wildcards in `text` match
 * literally. Keyset paging, as for clients (store/clients.ts): the cursor is a username's
 * lookup key, which is unique.
 */
export async function listUserPage(db: Kysely<Database>, text: string, cursor: PageCursor, limit: number): Promise<Page<User>> {
  const pattern = `%${lookupKey(text).replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
  const contains = (column: 'username_key' | 'email_key') => sql<boolean>`${sql.ref(column)} like ${pattern} escape '\\'`;
  const backwards = 'before' in cursor;
  const from = 'after' in cursor ? cursor.after : 'before' in cursor ? cursor.before : undefined;
  const order = backwards ? 'desc' : 'asc';
  const rows = await db
    .selectFrom('users')
    .selectAll()
    .$if(text !== '', (query) => query.where((eb) => eb.or([contains('username_key'), contains('email_key')])))
    .$if(from !== undefined, (query) => query.where('username_key', backwards ? '<' : '>', lookupKey(from!)))
    .orderBy('username_key', order)
    .limit(limit + 1)
    .execute();
  return keysetPage(rows, cursor, limit, (user) => user.username_key);
}

export async function countAdmins(db: Kysely<Database>): Promise<number> {
  const row = await db
    .selectFrom('users')
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .where('is_admin', '=', 1)
    .where('disabled', '=', 0)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

export async function updateUser(
  db: Kysely<Database>,
  id: string,
  patch: Partial<Pick<User, 'password_hash' | 'is_admin' | 'disabled' | 'email' | 'email_key' | 'display_name' | 'email_verified'>>,
): Promise<boolean> {
  const result = await db.updateTable('users').set(patch).where('id', '=', id).executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/**
 * Deletes the user's row; everything that references it goes with it (foreign keys cascade):
 * grants and their tokens, codes, device requests, consents, sessions, pending logins,
 * passkeys, authenticator app, recovery codes, identities at connections, group memberships.
 * The audit trail names people by id without a reference, and back-channel logouts keep the
 * username (migration 20261128_002): both outlive the row. False when there was no such user.
 */
export async function deleteUserRow(db: Kysely<Database>, id: string): Promise<boolean> {
  const result = await db.deleteFrom('users').where('id', '=', id).executeTakeFirst();
  return result.numDeletedRows > 0n;
}

/** The user with this e-mail address (compared as usernames are), whatever their state. */
export async function findUserByEmail(db: Kysely<Database>, email: string): Promise<User | undefined> {
  return db.selectFrom('users').selectAll().where('email_key', '=', lookupKey(email)).executeTakeFirst();
}
