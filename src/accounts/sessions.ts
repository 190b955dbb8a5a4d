/**
 * Login sessions: a session token (256 bits, see tokens.ts) identifies a signed-in person;
 * the database holds only its SHA-256. How the token travels (a cookie) is the HTTP
 * layer's business: see src/http/session.ts.
 */
import type { AppContext } from '../context.ts';
import { deleteSession, findSessionUser, insertSession } from '../store/sessions.ts';
import type { User } from '../store/schema.ts';
import { hashIfWellFormed, mintToken } from '../tokens.ts';

/**
 * Starts a session for the user and returns its token. The session the request came with,
 * if any, ends: a session id is never kept across a login.
 */
export async function startSession(ctx: AppContext, userId: string, previous: string | undefined): Promise<string> {
  await endSession(ctx, previous);
  const session = mintToken('session');
  const now = ctx.now();
  await insertSession(ctx.db, { idHash: session.hash, userId, now, expiresAt: now + ctx.config.sessionTtl * 1000 });
  return session.token;
}

export async function endSession(ctx: AppContext, token: string | undefined): Promise<void> {
  const hash = token === undefined ? null : hashIfWellFormed('session', token);
  if (hash !== null) await deleteSession(ctx.db, hash);
}

/** The user of a live session; null when the token is unknown, expired, or its user disabled. */
export async function sessionUser(ctx: AppContext, token: string | undefined): Promise<User | null> {
  const hash = token === undefined ? null : hashIfWellFormed('session', token);
  return hash === null ? null : ((await findSessionUser(ctx.db, hash, ctx.now())) ?? null);
}
