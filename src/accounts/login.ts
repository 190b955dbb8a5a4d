/**
 * The login decision (SPEC §4.5): whether a username (or email) and password open a
 * session. The order matters: the throttle is asked before anything is looked up, so a
 * throttled guess costs nothing and reveals nothing; an unknown user costs a password
 * check too, so timing does not tell which names exist; a disabled account is refused
 * like a wrong password. Every outcome is recorded in the audit trail.
 */
import type { AppContext } from '../context.ts';
import { findUserByLogin } from '../store/users.ts';
import { Throttled } from '../throttle.ts';
import { decoyHash, verifyPassword } from './passwords.ts';
import { endSession, sessionUser, startSession } from './sessions.ts';
import type { User } from './users.ts';

export type LoginResult =
  | { ok: true; user: User; /** The new session's token. */ session: string }
  | { ok: false; reason: 'throttled'; /** Seconds until the next attempt may be checked. */ retryAfter: number }
  | { ok: false; reason: 'unknown_account' | 'wrong_password' | 'account_disabled' };

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
  try {
    await throttle.checkLogin(login, address);
  } catch (error) {
    if (!(error instanceof Throttled)) throw error;
    return { ok: false, reason: 'throttled', retryAfter: error.retryAfter };
  }
  const user = login === '' || login.length > 320 ? undefined : await findUserByLogin(ctx.db, login);
  const valid = await verifyPassword(password, user?.password_hash ?? (await decoyHash()));
  if (!user || !valid || user.disabled) {
    // What was typed is not recorded for an unknown account: it may be a password typed
    // into the wrong field.
    const reason = !user ? 'unknown_account' : !valid ? 'wrong_password' : 'account_disabled';
    await ctx.audit({ type: 'login_failed', userId: user?.id ?? null, address, detail: { reason } });
    await throttle.loginFailed(login, address);
    return { ok: false, reason };
  }
  await throttle.loginSucceeded(login);
  const session = await startSession(ctx, user.id, attempt.session);
  await ctx.audit({ type: 'login_succeeded', userId: user.id, address });
  return { ok: true, user, session };
}

/** Ends the session; a logout is recorded when the session was a live one. */
export async function logOut(ctx: AppContext, session: string | undefined, address: string): Promise<void> {
  const user = await sessionUser(ctx, session);
  await endSession(ctx, session);
  if (user) await ctx.audit({ type: 'logout', userId: user.id, address });
}
