/**
 * Verified email addresses (SPEC §4.16): a person whose address is not verified asks for a
 * link on /account/security (an administrator can have one sent too); opening it marks the
 * address verified, and `email_verified` in ID tokens and userinfo follows. Changing one's
 * address (a recent login) sends the link to the new address and keeps the old one until the
 * new one is verified, and tells the old address. A link works once, for 24 hours; a newer
 * one replaces it.
 */
import { madeBy, type Actor } from '../audit.ts';
import type { AppContext } from '../context.ts';
import { findLink, verifyEmailWithLink } from '../store/account-links.ts';
import { isUniqueViolation } from '../store/database.ts';
import { queueMail } from '../store/mail-outbox.ts';
import type { User } from '../store/schema.ts';
import { findUserByLogin, lookupKey } from '../store/users.ts';
import { loginAccountKey } from '../throttle.ts';
import { hashIfWellFormed } from '../tokens.ts';
import { LinkInvalid, NO_MAIL } from './password-changes.ts';
import type { RecentLogin } from './recent-login.ts';
import { AccountError, emailProblem } from './users.ts';

/**
 * Sends the person a link that verifies their address: asked by themselves on
 * /account/security (throttled like reset requests) or by an administrator.
 */
export async function sendVerification(ctx: AppContext, user: User, actor: Actor): Promise<void> {
  if (!ctx.mail.enabled) throw new AccountError('email', NO_MAIL);
  if (user.email === '') throw new AccountError('email', `${user.username} has no email address`);
  if (user.email_verified === 1) throw new AccountError('email', `${user.email} is verified already`);
  await ctx.services.throttle.mailRequest(loginAccountKey(user.id, ''), actor.address ?? 'command line', 'the person');
  await queueMail(ctx.db, { kind: 'verify_email', userId: user.id, to: user.email, address: actor.address }, ctx.now());
  await ctx.audit({ type: 'email_verification_requested', ...madeBy(actor), userId: user.id });
  ctx.mail.wake();
}

/**
 * The signed-in person (a recent login) asks to change their address to `typed`: a link goes
 * to it and a notice to the old one. An address another account has gets the same answer and
 * no link (the form must not tell who has an account); its holder is not bothered, and the
 * person's old address is still told. Throttled before anything is looked up.
 */
export async function requestEmailChange(ctx: AppContext, recent: RecentLogin, typed: string, address: string): Promise<void> {
  const { user } = recent;
  if (!ctx.mail.enabled) throw new AccountError('email', NO_MAIL);
  const email = typed.trim();
  const problem = emailProblem(email);
  if (problem) throw new AccountError('email', `email ${problem}`);
  if (lookupKey(email) === user.email_key) throw new AccountError('email', 'that is your address already');
  await ctx.services.throttle.mailRequest(loginAccountKey(user.id, ''), address, 'the person');
  const holder = await findUserByLogin(ctx.db, email);
  const now = ctx.now();
  // The change is for the address the account has now: a link composed after it changed otherwise is not sent (account-mail.ts).
  const detail = { from: user.email_key };
  if (!holder) await queueMail(ctx.db, { kind: 'verify_email', userId: user.id, to: email, detail, address }, now);
  if (user.email !== '') await queueMail(ctx.db, { kind: 'email_change_notice', userId: user.id, to: user.email, detail: { new_email: email }, address }, now);
  await ctx.audit({ type: 'email_change_requested', ...madeBy({ userId: user.id, address }), userId: user.id });
  ctx.mail.wake();
}

/** The address a verification link would verify (the page that asks to confirm it), without using it; null when the link does not work. */
export async function addressOfLink(ctx: AppContext, token: string | undefined): Promise<string | null> {
  const hash = token === undefined ? null : hashIfWellFormed('emailVerification', token);
  return (hash === null ? undefined : await findLink(ctx.db, 'verify_email', hash, ctx.now()))?.email ?? null;
}

/**
 * Verifies the address of a link, saying whether it became the person's address: LinkInvalid
 * for a link that does not work, AccountError when another account took the address meanwhile.
 */
export async function verifyEmail(ctx: AppContext, token: string, address: string): Promise<{ changed: boolean }> {
  const hash = hashIfWellFormed('emailVerification', token);
  if (hash === null) throw new LinkInvalid();
  let verified;
  try {
    verified = await verifyEmailWithLink(ctx.db, hash, ctx.now(), lookupKey);
  } catch (error) {
    if (!isUniqueViolation(error)) throw error;
    throw new AccountError('email', 'that email address belongs to another account now');
  }
  if (!verified) throw new LinkInvalid();
  await ctx.audit({ type: verified.changed ? 'email_changed' : 'email_verified', userId: verified.userId, address });
  return { changed: verified.changed };
}
