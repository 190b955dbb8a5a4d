/**
 * The login decision (SPEC §4.5): whether a username (or email) and password open a
 * session. The order matters: the attempt is reserved on the throttle's counters before the
 * password is checked, so of many simultaneous guesses only the limit's worth are checked
 * and the rest cost nothing and reveal nothing (a refusal looks the same whether or not the
 * account exists); an unknown user costs a password check too, so timing does not tell
 * which names exist; a disabled account is refused like a wrong password. Every checked
 * attempt is recorded in the audit trail.
 */
import type { AppContext } from '../context.ts';
import { findUserByLogin } from '../store/users.ts';
import { loginAccountKey, Throttled } from '../throttle.ts';
import { DECOY_HASH, NO_PASSWORD, verifyPassword } from './passwords.ts';
import { passwordRefusedFor } from './connections/password-login.ts';
import { endSession, sessionUser, startSession } from './sessions.ts';
import { mustHaveSecondFactor, PASSWORD_LOGIN_AMR } from '../login.ts';
import { hasSecondFactor } from './second-factors.ts';
import { startPendingLogin } from './second-step.ts';
import type { User } from './users.ts';

export type LoginResult =
  | { ok: true; user: User; /** The new session's token. */ session: string; pending?: undefined }
  /**
   * The password was right, and a second step comes before any session (SPEC §4.12): a code
   * (`code`: the person has a second factor) or setting one up (`set_up`: REQUIRE_SECOND_FACTOR).
   * `pending` is the pending login's token (accounts/second-factors.ts).
   */
  | { ok: true; user: User; session?: undefined; pending: string; next: 'code' | 'set_up' }
  | {
      ok: false;
      /** Refused unchecked: too many failures (429), or too many password checks under way (503). */
      reason: 'throttled' | 'busy';
      /** Seconds until the next attempt may be checked. */
      retryAfter: number;
    }
  | { ok: false; reason: 'unknown_account' | 'wrong_password' | 'account_disabled' }
  /** The password was right, but PASSWORD_LOGIN or a required connection of the person's email domain says they log in otherwise (SPEC §4.13). */
  | { ok: false; reason: 'password_login_off' }
  /** A passkey's response refused (accounts/passkeys.ts), and why — for the log, never the page. */
  | { ok: false; reason: 'passkey_refused'; passkeyReason: PasskeyFailure };

/** Why a passkey's response was refused (accounts/passkeys.ts): for the log and the audit trail, never the page. */
export type PasskeyFailure =
  | 'malformed_response'
  | 'unknown_challenge'
  | 'unknown_credential'
  | 'user_handle_mismatch'
  | 'not_verified'
  | 'sign_count_regressed'
  | 'concurrent_use'
  | 'account_disabled'
  /** The pending login this second step was for expired, or was completed meanwhile. */
  | 'second_step_ended';

/** A login that starts a session or is refused: one with no second step (a passkey is two factors itself). */
export type SessionLoginResult = Exclude<LoginResult, { pending: string }>;

export interface LoginAttempt {
  /** A username or an email address, as typed (trimmed). */
  login: string;
  password: string;
  /** The client address, for the throttle and the audit trail. */
  address: string;
  /** The session the attempt came with, if any: it ends, never to be reused by the new login. */
  session: string | undefined;
}

export async function logIn(ctx: AppContext, attempt: LoginAttempt): Promise<LoginResult> {
  const { login, password, address } = attempt;
  const { throttle } = ctx.services;
  const user = login === '' || login.length > 320 ? undefined : await findUserByLogin(ctx.db, login);
  const account = loginAccountKey(user?.id, login);
  try {
    await throttle.reserveLogin(account, address);
  } catch (error) {
    return refused(error);
  }
  let valid: boolean;
  try {
    // A person with no password costs a check too: timing does not tell who has one.
    valid = (await verifyPassword(password, user?.password_hash || DECOY_HASH)) && user?.password_hash !== NO_PASSWORD;
  } catch (error) {
    // Not checked after all (too many checks under way): the attempt is given back.
    await throttle.releaseLogin(account, address);
    return refused(error);
  }
  if (!user || !valid || user.disabled) {
    // What was typed is not recorded for an unknown account: it may be a password typed
    // into the wrong field.
    const reason = !user ? 'unknown_account' : !valid ? 'wrong_password' : 'account_disabled';
    await ctx.audit({ type: 'login_failed', userId: user?.id ?? null, address, detail: { reason } });
    return { ok: false, reason };
  }
  // Only a right password learns that the person must log in otherwise: a refusal before the
  // check would tell anyone which accounts are administrators.
  if (await passwordRefusedFor(ctx, user)) {
    await throttle.releaseLogin(account, address);
    await ctx.audit({ type: 'login_failed', userId: user.id, address, detail: { reason: 'password_login_off' } });
    return { ok: false, reason: 'password_login_off' };
  }
  const needsCode = await hasSecondFactor(ctx, user.id);
  if (needsCode || mustHaveSecondFactor(ctx.config, user)) {
    // The password was no failure, but the account's count of failures stays until the
    // second step succeeds: a known password must not reset the count of wrong codes.
    await throttle.releaseLogin(account, address);
    const pending = await startPendingLogin(ctx, user.id);
    return { ok: true, user, pending, next: needsCode ? 'code' : 'set_up' };
  }
  await throttle.loginSucceeded(account, address);
  const session = await startSession(ctx, user.id, attempt.session, PASSWORD_LOGIN_AMR, null, address);
  await ctx.audit({ type: 'login_succeeded', userId: user.id, address });
  return { ok: true, user, session };
}

/** A login refused unchecked; any other error goes on up. */
function refused(error: unknown): LoginResult {
  if (!(error instanceof Throttled)) throw error;
  return { ok: false, reason: error.status === 503 ? 'busy' : 'throttled', retryAfter: error.retryAfter };
}

/** Ends the session; a logout is recorded when the session was a live one. */
export async function logOut(ctx: AppContext, session: string | undefined, address: string): Promise<void> {
  const user = await sessionUser(ctx, session, address);
  await endSession(ctx, session, address);
  if (user) await ctx.audit({ type: 'logout', userId: user.id, address });
}
