/** Logging in and out, and the signed-in home page. */
import type { FastifyInstance } from 'fastify';
import { decoyHash, verifyPassword } from '../accounts/passwords.ts';
import type { AppContext } from '../context.ts';
import { single, type RawParams } from '../oauth/params.ts';
import { findUserByLogin } from '../store/users.ts';
import { Throttled } from '../throttle.ts';
import { requireFormBody } from './helpers.ts';
import { pendingAuthorization } from '../oauth/pending.ts';
import { currentUser, endSession, safeNext, startSession } from './session.ts';

const page = { config: { page: true } } as const;

export default async function loginRoutes(app: FastifyInstance, { ctx }: { ctx: AppContext }) {
  /** Which application the login is for, and in a popup what closing it posts (SPEC §4.1). */
  async function loginContext(next: string) {
    const pending = await pendingAuthorization(next, ctx);
    return { application: pending?.clientName ?? null, popup: pending?.popup ?? null };
  }

  app.get('/', page, async (request, reply) => {
    const user = await currentUser(request, ctx);
    if (!user) return reply.redirect('/login');
    return reply.view('home.eta', { title: 'Gatehouse', user, csrfToken: reply.generateCsrf() });
  });

  app.get('/login', page, async (request, reply) => {
    const query = request.query as RawParams;
    const next = safeNext(single(query, 'next'), ctx);
    const user = await currentUser(request, ctx);
    // Already signed in, and not asked to switch account: carry on.
    if (user && single(query, 'switch') === undefined) return reply.redirect(next);
    reply.header('Cache-Control', 'no-store');
    return reply.view('login.eta', { title: 'Log in', next, csrfToken: reply.generateCsrf(), username: '', error: null, current: user, ...(await loginContext(next)) });
  });

  app.post('/login', { ...page, preHandler: app.csrfProtection }, async (request, reply) => {
    const body = requireFormBody(request);
    const login = (single(body, 'username') ?? '').trim();
    const password = single(body, 'password') ?? '';
    const next = safeNext(single(body, 'next'), ctx);
    const refuse = async (status: number, error: string) => {
      reply.header('Cache-Control', 'no-store');
      return reply.code(status).view('login.eta', { title: 'Log in', next, csrfToken: reply.generateCsrf(), username: login, error, current: null, ...(await loginContext(next)) });
    };
    const { throttle } = ctx.services;
    try {
      await throttle.checkLogin(login, request.ip);
    } catch (error) {
      if (!(error instanceof Throttled)) throw error;
      reply.header('Retry-After', String(error.retryAfter));
      return refuse(429, `Too many failed attempts. Try again in ${Math.ceil(error.retryAfter / 60)} minute(s).`);
    }
    const user = login === '' || login.length > 320 ? undefined : await findUserByLogin(ctx.db, login);
    // Unknown users cost a password check too, so timing does not tell which names exist.
    const valid = await verifyPassword(password, user?.password_hash ?? (await decoyHash()));
    if (!user || !valid || user.disabled) {
      request.log.info({ event: 'login_failed' }, 'login failed');
      // What was typed is not recorded for an unknown account: it may be a password typed
      // into the wrong field.
      const reason = !user ? 'unknown_account' : !valid ? 'wrong_password' : 'account_disabled';
      await ctx.audit({ type: 'login_failed', userId: user?.id ?? null, address: request.ip, detail: { reason } });
      await throttle.loginFailed(login, request.ip);
      return refuse(401, 'Wrong username or password.');
    }
    await throttle.loginSucceeded(login);
    await endSession(request, reply, ctx); // never keep a session id across a login
    await startSession(reply, ctx, user);
    request.log.info({ event: 'login', user: user.id }, 'logged in');
    await ctx.audit({ type: 'login_succeeded', userId: user.id, address: request.ip });
    return reply.redirect(next, 303);
  });

  app.post('/logout', { ...page, preHandler: app.csrfProtection }, async (request, reply) => {
    const body = requireFormBody(request);
    const user = await currentUser(request, ctx);
    await endSession(request, reply, ctx);
    if (user) await ctx.audit({ type: 'logout', userId: user.id, address: request.ip });
    const next = safeNext(single(body, 'next'), ctx);
    return reply.redirect(next === '/' ? '/login' : `/login?${new URLSearchParams({ next })}`, 303);
  });
}
