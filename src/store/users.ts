import { sql, type Kysely } from 'kysely';
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
 * Users whose username or email contains `text`, compared as lookup keys, in username order;
 * at most `limit`. LIKE's wildcards in `text` match literally.
 */
export async function searchUsers(db: Kysely<Database>, text: string, limit: number): Promise<User[]> {
  const pattern = `%${lookupKey(text).replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
  const contains = (column: 'username_key' | 'email_key') => sql<boolean>`${sql.ref(column)} like ${pattern} escape '\\'`;
  return db
    .selectFrom('users')
    .selectAll()
    .where((eb) => eb.or([contains('username_key'), contains('email_key')]))
    .orderBy('username_key')
    .limit(limit)
    .execute();
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
  patch: Partial<Pick<User, 'password_hash' | 'is_admin' | 'disabled' | 'email' | 'email_key' | 'display_name'>>,
): Promise<boolean> {
  const result = await db.updateTable('users').set(patch).where('id', '=', id).executeTakeFirst();
  return result.numUpdatedRows > 0n;
}
