/**
 * What the routes that change a person's factors share (`/account/security`: passkeys in
 * account-security.ts, the app and recovery codes in account-factors.ts): the recent-login gate
 * that makes the proof those changes take (accounts/recent-login.ts), and the notice a change
 * leaves for the page. Both route files import it; neither imports the other for it.
 */
import { PageRefusal } from './errors.ts';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { NOT_RECENT, requireRecentLogin, type RecentLogin } from '../accounts/recent-login.ts';
import type { AppContext } from '../context.ts';
import { cookieOptions, currentLogin, securityNoticeCookieName } from './session.ts';

export const SECURITY_PATH = '/account/security';

/** Where "log in again" leads: the login page, for the same person, back to the security page afterwards. */
export const REAUTH_URL = `/login?${new URLSearchParams({ switch: '1', reauth: '1', next: SECURITY_PATH })}`;

/** How long the notice of a change waits for the page it is shown on. */
const NOTICE_TTL = 60;
/** The notices the page may show, by the cookie's value: fixed texts, nothing from the request. */
export const NOTICES = {
  'passkey-added': 'Passkey added. You can now log in with it, without your password.',
  'passkey-renamed': 'Passkey renamed.',
  'passkey-removed': 'Passkey removed. Your other sessions have been logged out.',
  'app-added': 'Authenticator app set up. From now on you log in with your password and a code from it. Your other sessions have been logged out.',
  'app-removed': 'Authenticator app removed. Your other sessions have been logged out.',
  'identity-linked': 'Identity connected. You can now log in with it.',
  'identity-unlinked': 'Identity disconnected. Your other sessions that came through it have been logged out.',
  'password-changed': 'Password changed. Your other sessions have been logged out.',
  'verification-sent': 'A link to verify your address is on its way to it. It works once, for 24 hours.',
  'email-change-sent': 'A link to confirm your new address is on its way to it. Your account keeps its current address until you open that link.',
} as const satisfies Record<string, string>;

/** The signed-in person, whose login is recent enough to change their factors, as the proof those changes take; refused otherwise. */
export async function recentLoginOrRefuse(request: FastifyRequest, ctx: AppContext): Promise<RecentLogin> {
  const signedIn = await currentLogin(request, ctx);
  if (!signedIn) throw new PageRefusal(401, 'You are not logged in. Log in and try again.', 'no session');
  const recent = await requireRecentLogin(ctx, signedIn);
  if (!recent) throw new PageRefusal(403, NOT_RECENT, 'login not recent');
  return recent;
}

/** Leaves the notice of a change for the person's next view of the page, in this browser. */
export function notify(reply: FastifyReply, ctx: AppContext, userId: string, notice: keyof typeof NOTICES): void {
  reply.setCookie(securityNoticeCookieName(ctx), `${userId} ${notice}`, { ...cookieOptions(ctx), maxAge: NOTICE_TTL });
}

/** The notice this person's own change in this browser left, taken (never from the URL); null for none. */
export function takeNotice(request: FastifyRequest, reply: FastifyReply, ctx: AppContext, userId: string): string | null {
  const cookie = request.cookies[securityNoticeCookieName(ctx)];
  if (cookie !== undefined) reply.clearCookie(securityNoticeCookieName(ctx), cookieOptions(ctx));
  if (!cookie?.startsWith(`${userId} `)) return null;
  const key = cookie.slice(userId.length + 1);
  return Object.hasOwn(NOTICES, key) ? NOTICES[key as keyof typeof NOTICES] : null;
}
