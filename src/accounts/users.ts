/**
 * User accounts: creating, finding, editing, disabling and promoting them, shared by the CLI and the
 * admin pages. The changes record their own audit events, made by the given actor.
 */
import { InputError } from '../input-error.ts';
import { randomUUID } from 'node:crypto';
import type { Kysely } from 'kysely';
import { madeBy, type Actor } from '../audit.ts';
import type { AppContext } from '../context.ts';
import { isUuid } from '../oauth/client-auth.ts';
import { OAuthError } from '../protocol/errors.ts';
import { revoke } from '../oauth/revocation.ts';
import { normalizeClientName } from '../oauth/client-names.ts';
import { PAGE_SIZE, type Page, type PageCursor } from '../store/clients.ts';
import {
  countAdmins,
  deleteUserRow,
  findUserById,
  findUserByLogin,
  findUserByUsername,
  insertUser,
  listUserPage,
  listUsers,
  lookupKey,
  updateUser,
} from '../store/users.ts';
import type { Database, User } from '../store/schema.ts';
import { deleteLinks } from '../store/account-links.ts';
import { hashPassword, NO_PASSWORD, passwordProblem } from './passwords.ts';
import { endUserSessions } from './sessions.ts';
import { forgetProviderTokens } from '../store/connections.ts';

export type { User };

/** A problem with what was asked for, naming the field at fault. */
export class AccountError extends InputError {
  override name = 'AccountError';
}

const USERNAME = /^[A-Za-z0-9][A-Za-z0-9._-]{2,29}$/;
/**
 * An address with nothing a mail header would read otherwise: no spaces or control characters,
 * and none of the characters that separate addresses, quote or bracket them, or comment (a
 * list `a,b@x`, a name `victim<attacker@x>`), so the mailbox mail goes to is the address shown.
 */
const ADDRESS_PART = String.raw`[^\s\p{Cc}@,;:<>()[\]\\"]`;
const EMAIL = new RegExp(`^${ADDRESS_PART}{1,64}@${ADDRESS_PART}{1,255}\\.${ADDRESS_PART}{1,63}$`, 'u');

export function usernameProblem(username: string): string | null {
  return USERNAME.test(username) ? null : 'must be 3-30 characters: letters, digits, ".", "_" or "-", starting with a letter or digit';
}

export function emailProblem(email: string): string | null {
  return email.length <= 320 && EMAIL.test(email) ? null : 'must be an email address';
}

/** The most characters a display name holds. */
export const MAX_DISPLAY_NAME_LENGTH = 200;

/**
 * A display name as stored (null: none; an empty or blank one is none), or an AccountError.
 * It is shown to people and released as the OIDC `name` claim, so it follows the rules of
 * the client names that login pages show: no control, format or invisible characters.
 */
export function displayNameOf(raw: string | null | undefined): string | null {
  if (raw === undefined || raw === null || raw.trim() === '') return null;
  const normalized = normalizeClientName(raw, MAX_DISPLAY_NAME_LENGTH);
  if ('problem' in normalized) throw new AccountError('name', `display name ${normalized.problem}`);
  return normalized.name;
}

/**
 * The lookup key of a person with no email address: unique (the column is), and no address
 * (it has no `@`) nor username (it has a `:`), so no one else's address or name ever finds them.
 */
function noEmailKey(userId: string): string {
  return `none:${userId}`;
}

export interface NewAccount {
  username: string;
  /** Empty for none: a person created at a login through a provider that gave no address (SPEC §4.13). */
  email: string;
  /** null: no password (a person created at a login through a connection, SPEC §4.13). */
  password: string | null;
  isAdmin: boolean;
  displayName?: string | null;
  emailVerified?: boolean;
}

/**
 * Validates and stores a new account, recording nothing: for a caller that records the
 * event itself within a larger change (first-run setup), and for test fixtures. Everyone
 * else calls `createUser`.
 */
export async function createAccount(db: Kysely<Database>, account: NewAccount, now: number): Promise<User> {
  const problems: Array<[string, string | null]> = [
    ['username', usernameProblem(account.username)],
    ['email', account.email === '' && account.password === null ? null : emailProblem(account.email)],
    ['password', account.password === null ? null : await passwordProblem(account.password)],
  ];
  for (const [field, problem] of problems) if (problem) throw new AccountError(field, `${field} ${problem}`);
  const displayName = displayNameOf(account.displayName);
  if (await findUserByUsername(db, account.username)) throw new AccountError('username', `username "${account.username}" is taken`);
  if (account.email !== '' && (await findUserByLogin(db, account.email))) throw new AccountError('email', 'that email address belongs to another account');
  const id = randomUUID();
  const user: User = {
    id,
    username: account.username,
    username_key: lookupKey(account.username),
    email: account.email,
    email_key: account.email === '' ? noEmailKey(id) : lookupKey(account.email),
    display_name: displayName,
    email_verified: account.emailVerified ? 1 : 0,
    password_hash: account.password === null ? NO_PASSWORD : await hashPassword(account.password),
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

/**
 * What an administrator may change of a user's profile; an absent field stays as it is. A
 * display name of '' or null removes it.
 */
export interface ProfileChanges {
  displayName?: string | null;
  email?: string;
  emailVerified?: boolean;
}

/**
 * Changes the user's display name, e-mail address and its verified flag (an AccountError
 * names the field at fault; nothing is changed then) and records who did. A new address is
 * unverified unless `emailVerified` says otherwise in the same change (SPEC §4.10): the flag
 * vouched for the old one. Resolves to the user as changed.
 */
export async function updateProfile(ctx: AppContext, user: User, changes: ProfileChanges, actor: Actor): Promise<User> {
  const patch: Partial<Pick<User, 'display_name' | 'email' | 'email_key' | 'email_verified'>> = {};
  if (changes.displayName !== undefined) patch.display_name = displayNameOf(changes.displayName);
  if (changes.email !== undefined && changes.email !== user.email) {
    const problem = emailProblem(changes.email);
    if (problem) throw new AccountError('email', `email ${problem}`);
    const holder = await findUserByLogin(ctx.db, changes.email);
    if (holder && holder.id !== user.id) throw new AccountError('email', 'that email address belongs to another account');
    Object.assign(patch, { email: changes.email, email_key: lookupKey(changes.email), email_verified: 0 });
  }
  if (changes.emailVerified !== undefined) patch.email_verified = changes.emailVerified ? 1 : 0;
  const changed = (Object.keys(patch) as Array<keyof typeof patch>).filter((column) => column !== 'email_key' && patch[column] !== user[column]);
  if (changed.length === 0) return user;
  await updateUser(ctx.db, user.id, patch);
  // Links mailed to the old address are not for the new one.
  if (patch.email !== undefined) await deleteLinks(ctx.db, user.id);
  // Which fields changed, not their values: the trail records who changed what.
  await ctx.audit({ type: 'user_updated', ...madeBy(actor), userId: user.id, detail: { changed: changed.join(' ') } });
  return { ...user, ...patch };
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

/** A page of the users whose username or email contains `text` (all when empty), in username order. */
export async function findUsers(ctx: AppContext, text: string, cursor: PageCursor): Promise<Page<User>> {
  return listUserPage(ctx.db, text, cursor, PAGE_SIZE);
}

/** Disables the account: its sessions end and every grant it gave is revoked. */
export async function disableUser(ctx: AppContext, user: User, actor: Actor): Promise<void> {
  // Disabling oneself would lock the last administrator out as easily as anyone else.
  if (user.id === actor.userId) throw new OAuthError('invalid_request', 'You cannot disable your own account.');
  await updateUser(ctx.db, user.id, { disabled: 1 });
  // Links mailed before are not to work again if the account is enabled.
  await deleteLinks(ctx.db, user.id);
  await endUserSessions(ctx, user.id, actor.address);
  await revoke(ctx, { userId: user.id }, 'user_disabled');
  // The provider's tokens kept for them (SPEC §4.15) are theirs no more to be used.
  await forgetProviderTokens(ctx.db, { userId: user.id });
  await ctx.audit({ type: 'user_disabled', ...madeBy(actor), userId: user.id });
}

/** Enables a disabled account (SPEC §4.16): the person may log in again. False when it was not disabled. */
export async function enableUser(ctx: AppContext, user: User, actor: Actor): Promise<boolean> {
  if (user.disabled !== 1) return false;
  await updateUser(ctx.db, user.id, { disabled: 0 });
  await ctx.audit({ type: 'user_enabled', ...madeBy(actor), userId: user.id });
  return true;
}

/**
 * Deletes the account (SPEC §4.16). Refused for oneself and for the last enabled
 * administrator (the first-run setup would open again). In order: the account is disabled,
 * so that no exchange or refresh under way issues anything more (store/grants.ts); its
 * sessions end with their back-channel logouts queued (delivered after the row is gone);
 * every grant is revoked, with the revocation's fan-out; then the row goes, and with it
 * (foreign keys cascade) the person's grants and tokens, codes, consents, passkeys,
 * authenticator app, recovery codes, identities at connections and group memberships. The
 * audit trail keeps the person's id; `user_deleted` also names their username.
 */
export async function deleteUser(ctx: AppContext, user: User, actor: Actor): Promise<void> {
  if (user.id === actor.userId) throw new AccountError('user', 'you cannot delete your own account');
  if (user.is_admin === 1 && user.disabled === 0 && (await countAdmins(ctx.db)) <= 1)
    throw new AccountError('user', `${user.username} is the last administrator: make another person an administrator first`);
  await updateUser(ctx.db, user.id, { disabled: 1 });
  await endUserSessions(ctx, user.id, actor.address);
  await revoke(ctx, { userId: user.id }, 'user_deleted');
  await deleteUserRow(ctx.db, user.id);
  await ctx.audit({ type: 'user_deleted', ...madeBy(actor), userId: user.id, detail: { username: user.username } });
}

export async function promoteUser(ctx: AppContext, user: User, actor: Actor): Promise<void> {
  if (user.disabled === 1) throw new OAuthError('invalid_request', 'A disabled account cannot be made an administrator.');
  await updateUser(ctx.db, user.id, { is_admin: 1 });
  await ctx.audit({ type: 'user_promoted', ...madeBy(actor), userId: user.id });
}
