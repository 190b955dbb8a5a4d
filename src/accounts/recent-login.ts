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
 *
 * Adding a factor counts as using it: the session that adds a person's first second factor
 * becomes a login with it (provingNewFactor), so it may go on changing factors without logging in again.
 *
 * The rule as a value: requireRecentLogin is the only maker of a RecentLogin, and every action
 * that changes a person's factors takes one instead of a bare user, so a new route cannot
 * reach such an action without the check (the type will not let it).
 */
import type { AppContext } from '../context.ts';
import { countPasskeys } from '../store/passkeys.ts';
import { usersWithApp, type ThenInTransaction } from '../store/second-factors.ts';
import { upgradeSession } from '../store/sessions.ts';
import { hashIfWellFormed, mintToken } from '../tokens.ts';
import { isMultiFactor, type SignedIn } from '../login.ts';

/** How recent a login must be for a change to the person's factors. */
export const RECENT_LOGIN_MS = 5 * 60 * 1000;

/** The refusal of a change without a recent login. */
export const NOT_RECENT =
  'To change how you log in, log in again first: ' + `it must be within the last ${RECENT_LOGIN_MS / 60_000} minutes, with every factor you have.`;

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
export function includesSecondFactor(factors: SecondFactors): boolean {
  return factors.passkeys > 0 || factors.app;
}

/**
 * Whether the session's login may change the person's factors: recent enough, and with
 * every factor they have. When it may not, the page asks them to log in again.
 */
export function isRecentLogin(ctx: AppContext, signedIn: SignedIn, factors: SecondFactors): boolean {
  if (ctx.now() - signedIn.login.authTime > RECENT_LOGIN_MS) return false;
  return !includesSecondFactor(factors) || isMultiFactor(signedIn.login.amr);
}

/** Brands a RecentLogin; not exported, so nothing outside this file makes one. */
const checkedRecent: unique symbol = Symbol('recent login');

/**
 * A signed-in person whose login was found recent enough, with every factor they have, to
 * change their factors (isRecentLogin) — the proof the actions that change factors take. Only
 * requireRecentLogin makes one; it is checked for a request, so it lives as long as the request.
 */
export type RecentLogin = SignedIn & { readonly [checkedRecent]: true };

/** The person's login as a proof that it may change their factors; null (refuse: NOT_RECENT) when it may not. */
export async function requireRecentLogin(ctx: AppContext, signedIn: SignedIn): Promise<RecentLogin | null> {
  if (!isRecentLogin(ctx, signedIn, await secondFactorsOf(ctx, signedIn.user.id))) return null;
  return { ...signedIn, [checkedRecent]: true };
}

/** What adding a factor does to the session that adds it: `record` runs in the transaction that adds the factor. */
export interface NewFactorProof {
  /** The token of the session that replaces the one that added the factor (for the cookie). */
  session: string;
  /** Replaces the session; false, and the factor is not added, when it ended or went stale meanwhile. */
  record: ThenInTransaction;
}

/**
 * Adding a factor counts as using it (SPEC §4.12): a WebAuthn registration with user
 * verification, or an app confirmed by a current code, proves the factor as a login with it
 * would. The caller has checked that the session's login is recent (a RecentLogin, or a
 * pending login's second step), and `record` checks it again as it writes. Then a login that proved no second factor becomes one
 * that did (`factorAmr` added to its own) at the time of the proof — as a second step completes
 * a login after its password — in the same transaction as the factor, under a new token.
 *
 * Why this is safe. Only a session that could add the factor anyway gains, once: its login
 * was at most RECENT_LOGIN_MS old when the factor was proven, and a login with `mfa` gains
 * nothing more (null), so adding factor after factor never stretches the window past five
 * minutes after the first one. A stale session cannot add a factor to begin with. The person's
 * other sessions gain nothing: without `mfa` they are not recent for a person with a second
 * factor. Null too without a session to replace.
 */
export function provingNewFactor(
  ctx: AppContext,
  adding: RecentLogin,
  /** Its token. */ session: string | undefined,
  factorAmr: string,
): NewFactorProof | null {
  if (isMultiFactor(adding.login.amr)) return null;
  const idHash = session === undefined ? null : hashIfWellFormed('session', session);
  if (idHash === null) return null;
  const next = mintToken('session');
  const now = ctx.now();
  return {
    session: next.token,
    record: (trx) =>
      upgradeSession(trx, {
        idHash,
        newIdHash: next.hash,
        userId: adding.user.id,
        amr: factorAmr,
        now,
        expiresAt: now + ctx.config.sessionTtl * 1000,
        recentSince: now - RECENT_LOGIN_MS,
      }),
  };
}
