/**
 * `GET` and `POST /oauth/logout` (SPEC §4.10, the `end_session_endpoint`): RP-initiated
 * logout, decided in src/oauth/logout.ts. Also starts this instance's back-channel logout
 * deliveries (src/identity/backchannel-logout.ts), which run on the server only.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { logOut } from '../accounts/login.ts';
import type { AppContext } from '../context.ts';
import { logoutDecision, readLogoutRequest, type LogoutRequest } from '../oauth/logout.ts';
import type { RawParams } from '../protocol/params.ts';
import { requireFormBody } from './helpers.ts';
import { page } from './pages.ts';
import { clearSessionCookie, currentLogin, formToken, renewCsrfSecret, sessionToken } from './session.ts';

export const LOGOUT_PATH = '/oauth/logout';

export default async function logoutRoutes(app: FastifyInstance, { ctx }: { ctx: AppContext }) {
  app.addHook('onReady', async () => ctx.backchannelLogouts.start());
  app.addHook('onClose', async () => ctx.backchannelLogouts.close());

  app.get(LOGOUT_PATH, page, async (request, reply) => {
    reply.header('Cache-Control', 'no-store');
    const logout = await readLogoutRequest(ctx, request.query as RawParams);
    const signedIn = await currentLogin(request, ctx);
    switch (logoutDecision(logout, signedIn, ctx.config)) {
      case 'confirm':
        return reply.view('logout-confirm.eta', {
          title: 'Log out',
          user: signedIn!.user,
          clientName: logout.clientName,
          fields: logout.fields,
          csrfToken: formToken(reply),
        });
      case 'end':
        return loggedOut(request, reply, logout);
      case 'none':
        return finish(reply, logout);
    }
  });

  // The confirmation form carries a CSRF token, and only it: an application's own POST comes
  // from another site, without one (and, the cookies being SameSite=Lax, without the session).
  const confirmation = (request: FastifyRequest) => (request.body as RawParams | undefined)?._csrf !== undefined;
  app.post(
    LOGOUT_PATH,
    { ...page, preHandler: (request, reply, done) => (confirmation(request) ? app.csrfProtection(request, reply, done) : done()) },
    async (request, reply) => {
      reply.header('Cache-Control', 'no-store');
      const body = requireFormBody(request);
      const logout = await readLogoutRequest(ctx, body);
      if (confirmation(request)) return loggedOut(request, reply, logout);
      // The application's POST goes on as a GET, which a top-level navigation sends with the
      // session cookie: the person is then recognised, and asked like any other.
      return reply.redirect(`${LOGOUT_PATH}?${new URLSearchParams(logout.fields)}`, 303);
    },
  );

  /** Ends the request's session, then sends the person on. */
  async function loggedOut(request: FastifyRequest, reply: FastifyReply, logout: LogoutRequest) {
    await logOut(ctx, sessionToken(request, ctx), request.ip);
    clearSessionCookie(reply, ctx);
    renewCsrfSecret(reply, ctx);
    return finish(reply, logout);
  }

  /** Back to the application when it asked for a URL registered for it, else Gatehouse's own page. */
  function finish(reply: FastifyReply, logout: LogoutRequest) {
    if (logout.redirectTo !== null) return reply.redirect(logout.redirectTo, 303);
    return reply.view('logged-out.eta', { title: 'Logged out' });
  }
}
