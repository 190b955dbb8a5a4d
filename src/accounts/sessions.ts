/**
 * Login sessions: a session token (256 bits, see tokens.ts) identifies a signed-in person;
 * the database holds only its SHA-256. How the token travels (a cookie) is the HTTP
 * layer's business: see src/http/session.ts.
 */
import { randomBytes } from 'node:crypto';
import type { AppContext } from '../context.ts';
import { deleteSessions, findSessionUser, insertSession } from '../store/sessions.ts';
import { deleteUserPendingLogins } from '../store/second-factors.ts';
import type { User } from '../store/schema.ts';
import { isMultiFactor, mustHaveSecondFactor, type SignedIn } from '../login.ts';
import { hashIfWellFormed, mintToken } from '../tokens.ts';

/**
 * Starts a session for the user, logged in by `amr` (through `connectionId`, for a login at an
 * upstream provider), and returns its token. The session the request came with, if any, ends
 * (its back-channel logouts from `address`, the login request's): a session id is never kept
 * across a login.
 */
export async function startSession(
  ctx: AppContext,
  userId: string,
  previous: string | undefined,
  amr: string,
  connectionId: string | null,
  address: string,
): Promise<string> {
  await endSession(ctx, previous, address);
  const session = mintToken('session');
  const now = ctx.now();
  const sid = randomBytes(16).toString('base64url');
  await insertSession(ctx.db, { idHash: session.hash, userId, now, expiresAt: now + ctx.config.sessionTtl * 1000, amr, sid, connectionId });
  return session.token;
}

// Every way a session ends says where the end came from — `address`, that of the request
// (a person's logout, an administrator's change), or null for the command line — so that the
// back-channel logouts it queues are audited with it when they are delivered, later and
// perhaps by another instance.

/** Ends the session, and has the clients that got an ID token in it told (back-channel logout, SPEC §4.10). */
export async function endSession(ctx: AppContext, token: string | undefined, address: string | null): Promise<void> {
  const hash = token === undefined ? null : hashIfWellFormed('session', token);
  if (hash !== null && (await deleteSessions(ctx.db, { idHash: hash }, ctx.now(), address)) > 0) ctx.backchannelLogouts.wake();
}

/**
 * Ends every session of the user (a password change, an account disabled), with their
 * back-channel logouts; and their pending logins, which a password before the change opened.
 */
export async function endUserSessions(ctx: AppContext, userId: string, address: string | null): Promise<void> {
  await deleteUserPendingLogins(ctx.db, userId);
  if ((await deleteSessions(ctx.db, { userId }, ctx.now(), address)) > 0) ctx.backchannelLogouts.wake();
}

/**
 * Ends every session of the user but the one `current` names (a factor removed: whoever holds
 * another session may be the reason), with their back-channel logouts; with `andPendingLogins`,
 * their half-done logins too (a factor added at one: the others were opened without it).
 */
export async function endOtherSessions(
  ctx: AppContext,
  userId: string,
  current: string | undefined,
  address: string | null,
  o: { andPendingLogins?: boolean } = {},
): Promise<void> {
  if (o.andPendingLogins) await deleteUserPendingLogins(ctx.db, userId);
  const except = current === undefined ? undefined : (hashIfWellFormed('session', current) ?? undefined);
  if ((await deleteSessions(ctx.db, { userId, except }, ctx.now(), address)) > 0) ctx.backchannelLogouts.wake();
}

/**
 * The person of a live session and their login; null when the token is unknown, expired, or
 * its user disabled — or when REQUIRE_SECOND_FACTOR now covers the person and the login proved
 * no second factor. Such a session (from before the setting, or before the person became an
 * administrator under `admins`) ends at its next request, with its back-channel logouts: the
 * person logs in again, and the login asks for the set-up a covered person needs. Ending it,
 * rather than sending it to the set-up, holds the rule that a stale session may not enrol a
 * factor (the set-up from a session needs a recent login).
 */
export async function sessionLogin(ctx: AppContext, token: string | undefined, address: string): Promise<SignedIn | null> {
  const hash = token === undefined ? null : hashIfWellFormed('session', token);
  const found = hash === null ? undefined : await findSessionUser(ctx.db, hash, ctx.now());
  if (found === undefined) return null;
  const { auth_time: authTime, session_amr: amr, session_sid: sid, ...user } = found;
  if (mustHaveSecondFactor(ctx.config, user) && !isMultiFactor(amr)) {
    await endSession(ctx, token, address);
    return null;
  }
  return { user, login: { authTime, amr, sid } };
}

/** The user of a live session; null when the token is unknown, expired, or its user disabled. */
export async function sessionUser(ctx: AppContext, token: string | undefined, address: string): Promise<User | null> {
  return (await sessionLogin(ctx, token, address))?.user ?? null;
}
