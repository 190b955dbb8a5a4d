/**
 * Login sessions. The cookie holds a session token; the database holds only its SHA-256.
 * Cookies are HttpOnly and SameSite=Lax (a cross-site POST carries no session), Secure and
 * `__Host-` prefixed behind https.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { AppContext } from '../context.ts';
import { deleteSession, findSessionUser, insertSession } from '../store/sessions.ts';
import type { User } from '../store/schema.ts';
import { hashIfWellFormed, mintToken } from '../tokens.ts';

export function sessionCookieName(ctx: AppContext): string {
  return isHttps(ctx) ? '__Host-gatehouse_session' : 'gatehouse_session';
}

export function isHttps(ctx: AppContext): boolean {
  return ctx.config.publicUrl.startsWith('https:');
}

const resolved = new WeakMap<FastifyRequest, Promise<User | null>>();

/** The logged-in user of this request, or null; looked up once per request. */
export function currentUser(request: FastifyRequest, ctx: AppContext): Promise<User | null> {
  let user = resolved.get(request);
  if (!user) {
    const token = request.cookies[sessionCookieName(ctx)];
    const hash = token === undefined ? null : hashIfWellFormed('session', token);
    user = hash === null ? Promise.resolve(null) : findSessionUser(ctx.db, hash, ctx.now()).then((u) => u ?? null);
    resolved.set(request, user);
  }
  return user;
}

export async function startSession(reply: FastifyReply, ctx: AppContext, user: User): Promise<void> {
  const session = mintToken('session');
  const now = ctx.now();
  await insertSession(ctx.db, { idHash: session.hash, userId: user.id, now, expiresAt: now + ctx.config.sessionTtl * 1000 });
  reply.setCookie(sessionCookieName(ctx), session.token, {
    path: '/',
    httpOnly: true,
    sameSite: 'lax',
    secure: isHttps(ctx),
    maxAge: ctx.config.sessionTtl,
  });
}

export async function endSession(request: FastifyRequest, reply: FastifyReply, ctx: AppContext): Promise<void> {
  const name = sessionCookieName(ctx);
  const token = request.cookies[name];
  const hash = token === undefined ? null : hashIfWellFormed('session', token);
  if (hash !== null) await deleteSession(ctx.db, hash);
  reply.clearCookie(name, { path: '/', httpOnly: true, sameSite: 'lax', secure: isHttps(ctx) });
}

/**
 * A `next` target we may redirect to after login: a same-origin relative path only.
 * Anything else (absolute URLs, `//host`, backslashes, control characters) falls back to `/`.
 */
export function safeNext(next: string | undefined, ctx: AppContext): string {
  if (next === undefined || !next.startsWith('/') || next.startsWith('//') || /[\\\x00-\x1f]/.test(next)) return '/';
  const base = new URL(ctx.config.publicUrl);
  const url = new URL(next, base);
  const path = url.pathname + url.search;
  // Parsing collapses dot segments ("/.//evil.example" becomes "//evil.example"), so the
  // result is checked again: a path starting with "//" is a URL on another host.
  return url.origin === base.origin && !path.startsWith('//') ? path : '/';
}
