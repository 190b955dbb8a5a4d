/** Logging in and out, and the signed-in home page. */
import type { FastifyInstance } from 'fastify';
import { logIn, logOut } from '../accounts/login.ts';
import type { AppContext } from '../context.ts';
import { single, type RawParams } from '../protocol/params.ts';
import { requireFormBody, uncheckedLogin } from './helpers.ts';
import { pendingAuthorization } from '../oauth/pending.ts';
import { safeNext } from './next.ts';
import { secondStepUrl, setPendingCookie } from './second-factor.ts';
import { clearSessionCookie, cookieOptions, currentUser, formToken, pendingCookieName, renewCsrfSecret, sessionToken, setSessionCookie } from './session.ts';

const page = { config: { page: true } } as const;

export default async function loginRoutes(app: FastifyInstance, { ctx }: { ctx: AppContext }) {
  /** Which application the login is for, whether an administrator checked it, and in a popup what closing it posts (SPEC §4.1). */
  async function loginContext(next: string, address: string) {
    const pending = await pendingAuthorization(next, ctx, address);
    return {
      application: pending?.clientName ?? null,
      notVetted: pending?.notVetted ?? null,
      popup: pending?.popup ?? null,
      loginHint: pending?.loginHint ?? null,
      // Passkeys (SPEC §4.12): the button and autofill, unless passkeys are off.
      passkeys: ctx.config.webauthn !== null,
    };
  }

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
    const context = await loginContext(next, request.ip);
    // Asked to log in again (a change to how they log in needs a recent login: account-security.ts).
    const reauth = user !== null && single(query, 'reauth') !== undefined;
    return reply.view('login.eta', {
      title: 'Log in',
      next,
      csrfToken: formToken(reply),
      username: context.loginHint ?? (reauth && user ? user.username : ''),
      error: null,
      current: user,
      reauth,
      ...context,
    });
  });

  app.post('/login', { ...page, preHandler: app.csrfProtection }, async (request, reply) => {
    const body = requireFormBody(request);
    const login = (single(body, 'username') ?? '').trim();
    const next = safeNext(single(body, 'next'), ctx.config.publicUrl);
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
    const { status, text: error } =
      'retryAfter' in result ? uncheckedLogin(result.reason, result.retryAfter) : { status: 401, text: 'Wrong username or password.' };
    if ('retryAfter' in result) reply.header('Retry-After', String(result.retryAfter));
    else request.log.info({ event: 'login_failed' }, 'login failed');
    reply.header('Cache-Control', 'no-store');
    return reply.code(status).view('login.eta', {
      title: 'Log in',
      next,
      csrfToken: formToken(reply),
      username: login,
      error,
      current: null,
      reauth: false,
      ...(await loginContext(next, request.ip)),
    });
  });

  app.post('/logout', { ...page, preHandler: app.csrfProtection }, async (request, reply) => {
    const body = requireFormBody(request);
    await logOut(ctx, sessionToken(request, ctx), request.ip);
    clearSessionCookie(reply, ctx);
    renewCsrfSecret(reply, ctx);
    const next = safeNext(single(body, 'next'), ctx.config.publicUrl);
    return reply.redirect(next === '/' ? '/login' : `/login?${new URLSearchParams({ next })}`, 303);
  });
}
