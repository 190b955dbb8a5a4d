/** Logging in and out, and the signed-in home page. */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { domainsOf, enabledConnections } from '../accounts/connections/connections.ts';
import { connectionForEmail, passwordOffered } from '../accounts/connections/password-login.ts';
import { logIn, logOut } from '../accounts/login.ts';
import type { AppContext } from '../context.ts';
import { single, type RawParams } from '../protocol/params.ts';
import { requireFormBody, uncheckedLogin } from './helpers.ts';
import { pendingAuthorization } from '../oauth/pending.ts';
import { safeNext } from './next.ts';
import { secondStepUrl, setPendingCookie } from './second-factor.ts';
import {
  clearSessionCookie,
  cookieOptions,
  currentUser,
  formToken,
  pendingCookieName,
  pendingIdentityCookieName,
  renewCsrfSecret,
  sessionToken,
  setSessionCookie,
  upstreamCookieName,
} from './session.ts';

const page = { config: { page: true } } as const;

/** What a person reads whose password may not log them in (PASSWORD_LOGIN, a required connection). */
const PASSWORD_OFF = 'Passwords cannot be used to log in to this account. Use one of the other ways to log in below.';

export default async function loginRoutes(app: FastifyInstance, { ctx }: { ctx: AppContext }) {
  /** Which application the login is for, whether an administrator checked it, and in a popup what closing it posts (SPEC §4.1). */
  async function loginContext(next: string, address: string, reauth = false) {
    const pending = await pendingAuthorization(next, ctx, address);
    const connections = await enabledConnections(ctx);
    return {
      application: pending?.clientName ?? null,
      notVetted: pending?.notVetted ?? null,
      popup: pending?.popup ?? null,
      loginHint: pending?.loginHint ?? null,
      // Passkeys (SPEC §4.12): the button and autofill, unless passkeys are off.
      passkeys: ctx.config.webauthn !== null,
      // Connections (SPEC §4.13): a button each, and the email-first form when some serve email domains.
      // Logging in again (a recent login) asks the provider to authenticate the person afresh.
      connections: connections.map((connection) => ({
        name: connection.name,
        url: `/login/connections/${encodeURIComponent(connection.id)}?${new URLSearchParams({ next, ...(reauth ? { reauth: '1' } : {}) })}`,
      })),
      emailFirst: connections.some((connection) => domainsOf(connection).length > 0),
      password: passwordOffered(ctx),
    };
  }

  /** The login page again, with what went wrong. */
  async function loginAgain(
    request: FastifyRequest,
    reply: FastifyReply,
    p: { status: number; error: string; next: string; username: string; /** The address the email-first form was refused for. */ email?: string },
  ) {
    reply.header('Cache-Control', 'no-store');
    return reply.code(p.status).view('login.eta', {
      title: 'Log in',
      next: p.next,
      csrfToken: formToken(reply),
      username: p.username,
      error: p.email === undefined ? p.error : null,
      emailFirstError: p.email === undefined ? null : p.error,
      email: p.email ?? '',
      current: null,
      reauth: false,
      ...(await loginContext(p.next, request.ip)),
    });
  }

  /** Where a login through `connection` starts, for the address typed (email-first). */
  const startAt = (id: string, next: string, loginHint: string) =>
    `/login/connections/${encodeURIComponent(id)}?${new URLSearchParams({ next, login_hint: loginHint })}`;

  app.get('/', page, async (request, reply) => {
    const user = await currentUser(request, ctx);
    if (!user) return reply.redirect('/login');
    return reply.view('home.eta', { title: 'Gatehouse', user, csrfToken: formToken(reply) });
  });

  app.get('/login', page, async (request, reply) => {
    const query = request.query as RawParams;
    const next = safeNext(single(query, 'next'), ctx.config.publicUrl);
    const user = await currentUser(request, ctx);
    // Already signed in, and not asked to switch account: carry on.
    if (user && single(query, 'switch') === undefined) return reply.redirect(next);
    reply.header('Cache-Control', 'no-store');
    // Asked to log in again (a change to how they log in needs a recent login: account-security.ts).
    const reauth = user !== null && single(query, 'reauth') !== undefined;
    const context = await loginContext(next, request.ip, reauth);
    return reply.view('login.eta', {
      title: 'Log in',
      next,
      csrfToken: formToken(reply),
      username: context.loginHint ?? (reauth && user ? user.username : ''),
      error: null,
      emailFirstError: null,
      email: '',
      current: user,
      reauth,
      ...context,
    });
  });

  // Email-first (SPEC §4.13): an address whose domain a connection serves goes to its provider.
  app.post('/login/email', { ...page, preHandler: app.csrfProtection }, async (request, reply) => {
    const body = requireFormBody(request);
    const email = (single(body, 'email') ?? '').trim().slice(0, 320);
    const next = safeNext(single(body, 'next'), ctx.config.publicUrl);
    const connection = await connectionForEmail(ctx, email);
    if (connection) return reply.redirect(startAt(connection.id, next, email), 303);
    return loginAgain(request, reply, {
      status: 400,
      error: 'No company login is set up for that address. Use one of the other ways to log in.',
      next,
      username: '',
      email,
    });
  });

  app.post('/login', { ...page, preHandler: app.csrfProtection }, async (request, reply) => {
    const body = requireFormBody(request);
    const login = (single(body, 'username') ?? '').trim();
    const next = safeNext(single(body, 'next'), ctx.config.publicUrl);
    // The people of a required connection's domains log in there, whatever they typed as a password.
    const required = await connectionForEmail(ctx, login);
    if (required?.required === 1) return reply.redirect(startAt(required.id, next, login), 303);
    if (!passwordOffered(ctx)) return loginAgain(request, reply, { status: 403, error: PASSWORD_OFF, next, username: login });
    const result = await logIn(ctx, { login, password: single(body, 'password') ?? '', address: request.ip, session: sessionToken(request, ctx) });
    if (result.ok && result.pending !== undefined) {
      // No session yet: the second step comes first (src/http/second-factor.ts).
      setPendingCookie(reply, ctx, result.pending);
      request.log.info({ event: 'login_second_step', user: result.user.id }, 'password accepted, second step next');
      return reply.redirect(secondStepUrl(result.next, next), 303);
    }
    if (result.ok) {
      setSessionCookie(reply, ctx, result.session);
      // A second step left half-done in this browser (another account's, say) is dropped.
      reply.clearCookie(pendingCookieName(ctx), cookieOptions(ctx));
      renewCsrfSecret(reply, ctx);
      request.log.info({ event: 'login', user: result.user.id }, 'logged in');
      return reply.redirect(next, 303);
    }
    if (result.reason === 'password_login_off') {
      request.log.info({ event: 'login_failed', reason: 'password_login_off' }, 'password login refused by PASSWORD_LOGIN or a required connection');
      return loginAgain(request, reply, { status: 403, error: PASSWORD_OFF, next, username: login });
    }
    const { status, text: error } =
      'retryAfter' in result ? uncheckedLogin(result.reason, result.retryAfter) : { status: 401, text: 'Wrong username or password.' };
    if ('retryAfter' in result) reply.header('Retry-After', String(result.retryAfter));
    else request.log.info({ event: 'login_failed' }, 'login failed');
    return loginAgain(request, reply, { status, error, next, username: login });
  });

  app.post('/logout', { ...page, preHandler: app.csrfProtection }, async (request, reply) => {
    const body = requireFormBody(request);
    await logOut(ctx, sessionToken(request, ctx), request.ip);
    clearSessionCookie(reply, ctx);
    // A login at a provider started here, or an identity waiting to be connected, is not the next person's to finish.
    reply.clearCookie(upstreamCookieName(ctx), cookieOptions(ctx));
    reply.clearCookie(pendingIdentityCookieName(ctx), cookieOptions(ctx));
    renewCsrfSecret(reply, ctx);
    const next = safeNext(single(body, 'next'), ctx.config.publicUrl);
    return reply.redirect(next === '/' ? '/login' : `/login?${new URLSearchParams({ next })}`, 303);
  });
}
