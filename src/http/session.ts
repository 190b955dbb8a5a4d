/**
 * The session cookie: it carries the session token (src/accounts/sessions.ts). Cookies are
 * HttpOnly and SameSite=Lax (a cross-site POST carries no session), Secure and `__Host-`
 * prefixed behind https.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { sessionUser } from '../accounts/sessions.ts';
import type { User } from '../accounts/users.ts';
import type { AppContext } from '../context.ts';

export function sessionCookieName(ctx: AppContext): string {
  return isHttps(ctx) ? '__Host-gatehouse_session' : 'gatehouse_session';
}

export function isHttps(ctx: AppContext): boolean {
  return ctx.config.publicUrl.startsWith('https:');
}

/** The session token the request came with, if any. */
export function sessionToken(request: FastifyRequest, ctx: AppContext): string | undefined {
  return request.cookies[sessionCookieName(ctx)];
}

const resolved = new WeakMap<FastifyRequest, Promise<User | null>>();

/** The logged-in user of this request, or null; looked up once per request. */
export function currentUser(request: FastifyRequest, ctx: AppContext): Promise<User | null> {
  let user = resolved.get(request);
  if (!user) {
    user = sessionUser(ctx, sessionToken(request, ctx));
    resolved.set(request, user);
  }
  return user;
}

function cookieOptions(ctx: AppContext) {
  return { path: '/', httpOnly: true, sameSite: 'lax', secure: isHttps(ctx) } as const;
}

export function setSessionCookie(reply: FastifyReply, ctx: AppContext, token: string): void {
  reply.setCookie(sessionCookieName(ctx), token, { ...cookieOptions(ctx), maxAge: ctx.config.sessionTtl });
}

export function clearSessionCookie(reply: FastifyReply, ctx: AppContext): void {
  reply.clearCookie(sessionCookieName(ctx), cookieOptions(ctx));
}
