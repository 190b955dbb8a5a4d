/**
 * A person's own password (SPEC §4.16): resetting a forgotten one through a link mailed to
 * their address, and changing it on /account/security.
 *
 * A reset request gets the same answer, after the same work, whether or not an account has
 * the address: it is throttled per account and per address like logins, then queued as a
 * message in every case, which is composed to nothing when no account has the address
 * (accounts/account-mail.ts) — so neither the answer nor its timing tells who has an account.
 * The link works once, for 30 minutes, and only while the password is still the one it was
 * made for. Setting a password by any way ends every session of the person (but the one
 * changing it, on /account/security), voids every reset link, and tells the person by mail. A
 * reset does not log anyone in: the person logs in with the new password, and a second
 * factor they have is still asked for.
 */
import { COMMAND_LINE, madeBy, type Actor } from '../audit.ts';
import type { AppContext } from '../context.ts';
import { deleteLinks, findLink, resetPasswordWithLink } from '../store/account-links.ts';
import { queueMail } from '../store/mail-outbox.ts';
import type { User } from '../store/schema.ts';
import { findUserByEmail, findUserById, updateUser } from '../store/users.ts';
import { loginAccountKey } from '../throttle.ts';
import { hashIfWellFormed } from '../tokens.ts';
import { passwordRefusedFor } from './connections/password-login.ts';
import { hashPassword, NO_PASSWORD, passwordFingerprint, passwordProblem, verifyPassword } from './passwords.ts';
import type { RecentLogin } from './recent-login.ts';
import { endOtherSessions, endUserSessions } from './sessions.ts';
import { AccountError, emailProblem } from './users.ts';

/** What a person reads where mail would help them and none can be sent (SMTP_URL unset). */
export const NO_MAIL = 'this server cannot send mail: ask an administrator';

/** A link that is unknown, expired, used, or no longer for the password it was made for. */
export class LinkInvalid extends Error {
  override name = 'LinkInvalid';
  constructor() {
    super('This link is not valid: it may have expired, been used already, or been replaced by a newer one.');
  }
}

/**
 * Asks for a reset link for the account with this email address, if there is one. Throws
 * AccountError for something that is not an address and Throttled over the limits; otherwise
 * the caller answers the same whatever happened.
 */
export async function requestPasswordReset(ctx: AppContext, typed: string, address: string): Promise<void> {
  if (!ctx.mail.enabled) throw new AccountError('email', NO_MAIL);
  const email = typed.trim();
  const problem = emailProblem(email);
  if (problem) throw new AccountError('email', `email ${problem}`);
  const user = await findUserByEmail(ctx.db, email);
  await ctx.services.throttle.mailRequest(loginAccountKey(user?.id, email), address, 'anyone');
  // To the address as the account has it; a message for no account is composed to nothing.
  await queueMail(ctx.db, { kind: 'password_reset', userId: user?.id ?? null, to: user?.email ?? email, address }, ctx.now());
  await ctx.audit({ type: 'password_reset_requested', userId: user?.id ?? null, address });
  ctx.mail.wake();
}

/** Whether the reset link `token` works now (the page that asks for the new password), without using it. */
export async function resetLinkWorks(ctx: AppContext, token: string | undefined): Promise<boolean> {
  const hash = token === undefined ? null : hashIfWellFormed('passwordReset', token);
  return hash !== null && (await findLink(ctx.db, 'password_reset', hash, ctx.now())) !== undefined;
}

/**
 * Sets the new password a reset link was for (AccountError for an unacceptable one, with the
 * link left unused; LinkInvalid for a link that does not work), ends every session, and clears
 * the account's login failures: whoever could read the mail has proven as much as a password.
 */
export async function resetPassword(ctx: AppContext, token: string, password: string, address: string): Promise<void> {
  const hash = hashIfWellFormed('passwordReset', token);
  if (hash === null || !(await findLink(ctx.db, 'password_reset', hash, ctx.now()))) throw new LinkInvalid();
  const problem = await passwordProblem(password);
  if (problem) throw new AccountError('password', `password ${problem}`);
  const userId = await resetPasswordWithLink(ctx.db, hash, ctx.now(), await hashPassword(password), passwordFingerprint);
  if (userId === undefined) throw new LinkInvalid();
  await ctx.services.throttle.loginSucceeded(loginAccountKey(userId, ''), address);
  await passwordReplaced(ctx, userId, { how: 'with a reset link', actor: { userId: null, address }, type: 'password_reset' });
}

/**
 * The signed-in person changes their password (a recent login): the current one first, unless
 * they have none yet (an account made at a login through a connection). A wrong current
 * password counts as a failed login. Their other sessions end; this one goes on.
 */
export async function changeOwnPassword(
  ctx: AppContext,
  recent: RecentLogin,
  p: { current: string; password: string; /** This session's token. */ session: string | undefined; address: string },
): Promise<void> {
  const { user } = recent;
  if (await passwordRefusedFor(ctx, user)) throw new AccountError('password', 'passwords cannot be used to log in to this account');
  if (user.password_hash !== NO_PASSWORD) {
    const account = loginAccountKey(user.id, '');
    await ctx.services.throttle.reserveLogin(account, p.address);
    // Not checked after all (too many password checks under way, 503): the attempt is given back, as at a login.
    const right = await verifyPassword(p.current, user.password_hash).catch(async (error: unknown) => {
      await ctx.services.throttle.releaseLogin(account, p.address);
      throw error;
    });
    if (!right) {
      await ctx.audit({ type: 'login_failed', userId: user.id, address: p.address, detail: { reason: 'wrong_password', at: 'password_change' } });
      throw new AccountError('current', 'the current password is wrong');
    }
    await ctx.services.throttle.releaseLogin(account, p.address);
  }
  const problem = await passwordProblem(p.password);
  if (problem) throw new AccountError('password', `password ${problem}`);
  await updateUser(ctx.db, user.id, { password_hash: await hashPassword(p.password) });
  await endOtherSessions(ctx, user.id, p.session, p.address, { andPendingLogins: true });
  await passwordReplaced(ctx, user.id, { how: 'by you', actor: { userId: user.id, address: p.address }, type: 'password_changed', sessionsEnded: true });
}

/**
 * An administrator (or the command line) sets the person's password: every session of theirs
 * ends (whoever was signed in with the old password, perhaps the reason for the change).
 */
export async function setPassword(ctx: AppContext, user: User, password: string, actor: Actor = COMMAND_LINE): Promise<void> {
  const problem = await passwordProblem(password);
  if (problem) throw new AccountError('password', `password ${problem}`);
  await updateUser(ctx.db, user.id, { password_hash: await hashPassword(password) });
  await passwordReplaced(ctx, user.id, { how: 'by an administrator', actor, type: 'password_changed' });
}

/**
 * What follows every new password: every link goes (reset and verification: whoever asked for
 * one may be why), the sessions end (unless done already), the change is audited and the
 * person told.
 */
async function passwordReplaced(
  ctx: AppContext,
  userId: string,
  p: { how: string; actor: Actor; type: 'password_reset' | 'password_changed'; sessionsEnded?: boolean },
): Promise<void> {
  await deleteLinks(ctx.db, userId);
  if (!p.sessionsEnded) await endUserSessions(ctx, userId, p.actor.address);
  await ctx.audit({ type: p.type, ...madeBy(p.actor), userId });
  await tellPerson(ctx, userId, 'password_changed', { how: p.how }, p.actor.address);
}

/** Queues a notice to the person's current address, when mail is on and they have one. */
async function tellPerson(ctx: AppContext, userId: string, kind: 'password_changed', detail: Record<string, string>, address: string | null): Promise<void> {
  if (!ctx.mail.enabled) return;
  const user = await findUserById(ctx.db, userId);
  if (!user || user.email === '') return;
  await queueMail(ctx.db, { kind, userId, to: user.email, detail, address }, ctx.now());
  ctx.mail.wake();
}
