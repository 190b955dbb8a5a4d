/**
 * The "recent login" rule (SPEC §4.12): every change to a person's factors — adding or
 * removing a passkey, setting up or removing an authenticator app, generating recovery
 * codes — needs a login with every factor the person has, within the last five minutes. A
 * session left open on a shared computer, or a stolen session cookie, is then not enough to
 * take over the account by adding a factor or to weaken it by removing one.
 *
 * "Every factor the person has": a person with a second factor (a passkey or an
 * authenticator app) must have logged in with two factors (`mfa` in the session's `amr`: a
 * passkey, or a password and a second step); a person with none, with their password.
 */
import type { AppContext } from '../context.ts';
import { countPasskeys } from '../store/passkeys.ts';
import { usersWithSecondFactor as usersWithApp } from '../store/second-factors.ts';
import type { SignedIn } from './sessions.ts';

/** How recent a login must be for a change to the person's factors. */
export const RECENT_LOGIN_MS = 5 * 60 * 1000;

/** The second factors a person has. */
export interface SecondFactors {
  passkeys: number;
  /** A confirmed authenticator app. */
  app: boolean;
}

export async function secondFactorsOf(ctx: AppContext, userId: string): Promise<SecondFactors> {
  const [passkeys, apps] = await Promise.all([countPasskeys(ctx.db, userId), usersWithApp(ctx.db, [userId])]);
  return { passkeys, app: apps.has(userId) };
}

/** Whether the person has a second factor (recovery codes alone are not one). */
export function hasSecondFactor(factors: SecondFactors): boolean {
  return factors.passkeys > 0 || factors.app;
}

/**
 * Whether the session's login may change the person's factors: recent enough, and with
 * every factor they have. When it may not, the page asks them to log in again.
 */
export function isRecentLogin(ctx: AppContext, signedIn: SignedIn, factors: SecondFactors): boolean {
  if (ctx.now() - signedIn.login.authTime > RECENT_LOGIN_MS) return false;
  return !hasSecondFactor(factors) || signedIn.login.amr.split(' ').includes('mfa');
}

/**
 * Whether REQUIRE_SECOND_FACTOR (`admins` or `all`) requires the person to keep one: then
 * removing their last second factor is refused.
 */
export function mustKeepSecondFactor(ctx: AppContext, user: { is_admin: number }): boolean {
  const rule = ctx.config.requireSecondFactor;
  return rule === 'all' || (rule === 'admins' && user.is_admin === 1);
}
