/**
 * User accounts: creating, finding, disabling and promoting them, shared by the CLI and the
 * admin pages. The changes record their own audit events, made by the given actor.
 */
import { InputError } from '../input-error.ts';
import { randomUUID } from 'node:crypto';
import type { Kysely } from 'kysely';
import { madeBy, type Actor } from '../audit.ts';
import type { AppContext } from '../context.ts';
import { isUuid } from '../oauth/client-auth.ts';
import { OAuthError } from '../oauth/errors.ts';
import { revoke } from '../oauth/revocation.ts';
import { findUserById, findUserByLogin, findUserByUsername, insertUser, listUsers, lookupKey, searchUsers, updateUser } from '../store/users.ts';
import type { Database, User } from '../store/schema.ts';
import { hashPassword, passwordProblem } from './passwords.ts';
import { endUserSessions } from './sessions.ts';

export type { User };

/** A problem with what was asked for, naming the field at fault. */
export class AccountError extends InputError {
  override name = 'AccountError';
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

/**
 * Validates and stores a new account, recording nothing: for a caller that records the
 * event itself within a larger change (first-run setup), and for test fixtures. Everyone
 * else calls `createUser`.
 */
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
    email_verified: 0,
    password_hash: await hashPassword(account.password),
    is_admin: account.isAdmin ? 1 : 0,
    disabled: 0,
    created_at: now,
  };
  await insertUser(db, user);
  return user;
}

/** Creates the account (an AccountError names the field at fault) and records who did. */
export async function createUser(ctx: AppContext, account: NewAccount, actor: Actor): Promise<User> {
  const user = await createAccount(ctx.db, account, ctx.now());
  await ctx.audit({ type: 'user_created', ...madeBy(actor), userId: user.id, detail: { admin: user.is_admin === 1 } });
  return user;
}

/** The user with this id; undefined for an unknown or malformed one. */
export async function findUser(ctx: AppContext, id: string): Promise<User | undefined> {
  return isUuid(id) ? findUserById(ctx.db, id) : undefined; // both are UUIDs
}

/** The user with this username (compared as the login form compares it). */
export async function findUserNamed(ctx: AppContext, username: string): Promise<User | undefined> {
  return findUserByUsername(ctx.db, username);
}

/** Every user, in username order (`gatehouse user list`). */
export function allUsers(ctx: AppContext): Promise<User[]> {
  return listUsers(ctx.db);
}

/** Users whose username or email contains `text`, in username order; at most `limit`. */
export async function findUsers(ctx: AppContext, text: string, limit: number): Promise<User[]> {
  return searchUsers(ctx.db, text, limit);
}

/**
 * Changes the password and ends every session of the user (SPEC §4.5): whoever was signed in
 * with the old password, perhaps the reason for the change, is signed out.
 */
export async function setPassword(ctx: AppContext, user: User, password: string): Promise<void> {
  const problem = passwordProblem(password);
  if (problem) throw new AccountError('password', `password ${problem}`);
  await updateUser(ctx.db, user.id, { password_hash: await hashPassword(password) });
  await endUserSessions(ctx, user.id);
}

/** Disables the account: its sessions end and every grant it gave is revoked. */
export async function disableUser(ctx: AppContext, user: User, actor: Actor): Promise<void> {
  // Disabling oneself would lock the last administrator out as easily as anyone else.
  if (user.id === actor.userId) throw new OAuthError('invalid_request', 'You cannot disable your own account.');
  await updateUser(ctx.db, user.id, { disabled: 1 });
  await endUserSessions(ctx, user.id);
  await revoke(ctx, { userId: user.id }, 'user_disabled');
  await ctx.audit({ type: 'user_disabled', ...madeBy(actor), userId: user.id });
}

export async function promoteUser(ctx: AppContext, user: User, actor: Actor): Promise<void> {
  if (user.disabled === 1) throw new OAuthError('invalid_request', 'A disabled account cannot be made an administrator.');
  await updateUser(ctx.db, user.id, { is_admin: 1 });
  await ctx.audit({ type: 'user_promoted', ...madeBy(actor), userId: user.id });
}
