/**
 * Rows as the first schema wrote them, for the migration tests: they migrate a database to just
 * before the migration they test, and today's createAccount would write columns added since.
 */
import { randomUUID } from 'node:crypto';
import { Migrator, type Kysely } from 'kysely';
import { hashPassword } from '../../src/accounts/passwords.ts';
import { migrations } from '../../src/store/database.ts';
import { lookupKey } from '../../src/store/users.ts';

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

/** Migrates the database to just before the migration `name`: the schema the rows above were written to. */
export async function migrateToBefore(db: Kysely<any>, name: string): Promise<void> {
  const older = Object.fromEntries(Object.entries(migrations).filter(([migration]) => migration < name));
  const { error } = await new Migrator({ db, provider: { getMigrations: async () => older } }).migrateToLatest();
  if (error) throw error;
}
