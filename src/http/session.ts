/**
 * The session cookie: it carries the session token (src/accounts/sessions.ts). Cookies are
 * HttpOnly and SameSite=Lax (a cross-site POST carries no session), Secure and `__Host-`
 * prefixed behind https. The CSRF secret's cookie (@fastify/csrf-protection, registered in
 * app.ts) is named and set the same way, and is renewed at login and logout.
 */
import { type SignedIn } from '../login.ts';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { bindingFor } from '../accounts/passkeys.ts';
import { sessionLogin } from '../accounts/sessions.ts';
import type { User } from '../accounts/users.ts';
import type { Config } from '../config.ts';
import type { AppContext } from '../context.ts';

/** `__Host-` pins a cookie to this host and path `/`, over https only: nothing else can set or shadow it. */
function cookieName(ctx: AppContext, name: string): string {
  return isHttps(ctx.config) ? `__Host-${name}` : name;
}

export function sessionCookieName(ctx: AppContext): string {
  return cookieName(ctx, 'gatehouse_session');
}

export function csrfCookieName(ctx: AppContext): string {
  return cookieName(ctx, 'gatehouse_csrf');
}

/** The pending login of a password login whose second step is to come (src/http/second-factor.ts). */
export function pendingCookieName(ctx: AppContext): string {
  return cookieName(ctx, 'gatehouse_pending');
}

/** The one-time notice a page shows after the redirect that follows a form (src/http/account.ts). */
export function noticeCookieName(ctx: AppContext): string {
  return cookieName(ctx, 'gatehouse_notice');
}

/** The notice /account/security shows once after a change made in this browser (src/http/account-changes.ts). */
export function securityNoticeCookieName(ctx: AppContext): string {
  return cookieName(ctx, 'gatehouse_security_notice');
}

/** The browser's binding to its logins under way at upstream providers (src/http/connections.ts). */
export function upstreamCookieName(ctx: AppContext): string {
  return cookieName(ctx, 'gatehouse_upstream');
}

/** An identity waiting for its person to log in to the account that has its email (src/http/connections.ts). */
export function pendingIdentityCookieName(ctx: AppContext): string {
  return cookieName(ctx, 'gatehouse_identity');
}

/** The browser's WebAuthn binding: which challenges this browser may answer (src/accounts/passkeys.ts). */
export function webauthnCookieName(ctx: AppContext): string {
  return cookieName(ctx, 'gatehouse_webauthn');
}

/** The browser's WebAuthn binding cookie, set when new (SameSite=Strict: no other site's page sends it). */
export function webauthnBinding(request: FastifyRequest, reply: FastifyReply, ctx: AppContext): string {
  const binding = bindingFor(request.cookies[webauthnCookieName(ctx)]);
  if (binding.fresh) reply.setCookie(webauthnCookieName(ctx), binding.token, { ...cookieOptions(ctx), sameSite: 'strict', maxAge: 3600 });
  return binding.token;
}

export function isHttps(config: Config): boolean {
  return config.publicUrl.startsWith('https:');
}

/** The session token the request came with, if any. */
export function sessionToken(request: FastifyRequest, ctx: AppContext): string | undefined {
  return request.cookies[sessionCookieName(ctx)];
}

const resolved = new WeakMap<FastifyRequest, Promise<SignedIn | null>>();

/** The logged-in person of this request and their login, or null; looked up once per request. */
export function currentLogin(request: FastifyRequest, ctx: AppContext): Promise<SignedIn | null> {
  let signedIn = resolved.get(request);
  if (!signedIn) {
    signedIn = sessionLogin(ctx, sessionToken(request, ctx), request.ip);
    resolved.set(request, signedIn);
  }
  return signedIn;
}

/** The logged-in user of this request, or null. */
export async function currentUser(request: FastifyRequest, ctx: AppContext): Promise<User | null> {
  return (await currentLogin(request, ctx))?.user ?? null;
}

export function cookieOptions(ctx: AppContext) {
  return { path: '/', httpOnly: true, sameSite: 'lax', secure: isHttps(ctx.config) } as const;
}

export function setSessionCookie(reply: FastifyReply, ctx: AppContext, token: string): void {
  reply.setCookie(sessionCookieName(ctx), token, { ...cookieOptions(ctx), maxAge: ctx.config.sessionTtl });
}

export function clearSessionCookie(reply: FastifyReply, ctx: AppContext): void {
  reply.clearCookie(sessionCookieName(ctx), cookieOptions(ctx));
}

/**
 * Drops the CSRF secret, so that the next page that needs one makes a new one: at login and
 * logout, a secret planted or seen before is useless after.
 */
export function renewCsrfSecret(reply: FastifyReply, ctx: AppContext): void {
  reply.clearCookie(csrfCookieName(ctx), cookieOptions(ctx));
}

const formTokens = new WeakMap<FastifyReply, string>();

/**
 * The CSRF token for every form of this response. @fastify/csrf-protection makes a new secret
 * on each call when the request brought none (the first page after a login, which renews the
 * secret): the navigation's **Log out** and the page's own form would get tokens of two
 * secrets, only the last of which reaches the browser. One token per response keeps them on one.
 */
export function formToken(reply: FastifyReply): string {
  let token = formTokens.get(reply);
  if (token === undefined) formTokens.set(reply, (token = reply.generateCsrf()));
  return token;
}
