/**
 * The people the suites start with. Each is created as `createAccount` creates anyone, with a
 * real scrypt hash of their password — but the hash of the usual PASSWORD is made once per
 * test process and given to every such person: scrypt costs a tenth of a second of CPU by
 * design, and the suites create hundreds of people on a two-core machine. What a login
 * checks is unchanged: the stored hash is one `hashPassword` made.
 */
import type { Kysely } from 'kysely';
import { hashPassword } from '../../src/accounts/passwords.ts';
import { createAccount } from '../../src/accounts/users.ts';
import type { Database, User } from '../../src/store/schema.ts';

export const PASSWORD = 'correct horse battery staple';

let usualHash: Promise<string> | undefined;

export async function createPerson(db: Kysely<Database>, username: string, options: { admin?: boolean; password?: string }, now: number): Promise<User> {
  const account = { username, email: `${username}@example.com`, isAdmin: options.admin ?? false };
  if (options.password !== undefined && options.password !== PASSWORD) return createAccount(db, { ...account, password: options.password }, now);
  const user = await createAccount(db, { ...account, password: null }, now);
  const password_hash = await (usualHash ??= hashPassword(PASSWORD));
  await db.updateTable('users').set({ password_hash }).where('id', '=', user.id).execute();
  return { ...user, password_hash };
}
