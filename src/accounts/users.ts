/** Creating and changing user accounts, shared by the CLI and the admin pages. */
import { randomUUID } from 'node:crypto';
import type { Kysely } from 'kysely';
import { deleteUserSessions } from '../store/sessions.ts';
import { findUserByLogin, findUserByUsername, insertUser, lookupKey, updateUser } from '../store/users.ts';
import type { Database, User } from '../store/schema.ts';
import { revoke } from '../oauth/revocation.ts';
import type { AppContext } from '../context.ts';
import { hashPassword, passwordProblem } from './passwords.ts';

export class AccountError extends Error {
  override name = 'AccountError';
  /** The form field the problem is about. */
  readonly field: string;
  constructor(field: string, message: string) {
    super(message);
    this.field = field;
  }
}

const USERNAME = /^[A-Za-z0-9][A-Za-z0-9._-]{2,29}$/;
const EMAIL = /^[^\s@]{1,64}@[^\s@]{1,255}\.[^\s@]{1,63}$/;

export function usernameProblem(username: string): string | null {
  return USERNAME.test(username) ? null : 'must be 3-30 characters: letters, digits, ".", "_" or "-", starting with a letter or digit';
}

export function emailProblem(email: string): string | null {
  return email.length <= 320 && EMAIL.test(email) ? null : 'must be an email address';
}

export interface NewAccount {
  username: string;
  email: string;
  password: string;
  isAdmin: boolean;
}

export async function createAccount(db: Kysely<Database>, account: NewAccount, now: number): Promise<User> {
  const problems: Array<[string, string | null]> = [
    ['username', usernameProblem(account.username)],
    ['email', emailProblem(account.email)],
    ['password', passwordProblem(account.password)],
  ];
  for (const [field, problem] of problems) if (problem) throw new AccountError(field, `${field} ${problem}`);
  if (await findUserByUsername(db, account.username)) throw new AccountError('username', `username "${account.username}" is taken`);
  if (await findUserByLogin(db, account.email)) throw new AccountError('email', 'that email address belongs to another account');
  const user: User = {
    id: randomUUID(),
    username: account.username,
    username_key: lookupKey(account.username),
    email: account.email,
    email_key: lookupKey(account.email),
    display_name: null,
    password_hash: await hashPassword(account.password),
    is_admin: account.isAdmin ? 1 : 0,
    disabled: 0,
    created_at: now,
  };
  await insertUser(db, user);
  return user;
}

export async function setPassword(db: Kysely<Database>, user: User, password: string): Promise<void> {
  const problem = passwordProblem(password);
  if (problem) throw new AccountError('password', `password ${problem}`);
  await updateUser(db, user.id, { password_hash: await hashPassword(password) });
}

/** Disables the account: its sessions end and every grant it gave is revoked. */
export async function disableAccount(ctx: AppContext, user: User): Promise<void> {
  await updateUser(ctx.db, user.id, { disabled: 1 });
  await deleteUserSessions(ctx.db, user.id);
  await revoke(ctx, { userId: user.id }, 'user_disabled');
}
