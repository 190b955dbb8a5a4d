/**
 * The first-run setup page (SPEC §1): opened from the one-time link `gatehouse serve` prints
 * while there is no administrator, it creates the first administrator and logs them in.
 * See accounts/setup.ts for the link's rules.
 */
import type { FastifyInstance, FastifyReply } from 'fastify';
import { SetupLinkInvalid, checkSetupToken, createFirstAdministrator, firstAdministratorLogin } from '../accounts/setup.ts';
import { AccountError } from '../accounts/users.ts';
import type { AppContext } from '../context.ts';
import { single, type RawParams } from '../protocol/params.ts';
import { requireFormBody } from './helpers.ts';
import { field, page, sentence } from './pages.ts';
import { secondStepUrl, setPendingCookie } from './second-factor.ts';
import { formToken, sessionToken, setSessionCookie } from './session.ts';

export default async function setupRoutes(app: FastifyInstance, { ctx }: { ctx: AppContext }) {
  function setupPage(reply: FastifyReply, data: { token: string; values: { username: string; email: string }; errors: Record<string, string> }) {
    return reply.view('setup.eta', { title: 'Set up Gatehouse', csrfToken: formToken(reply), ...data });
  }

  function linkInvalid(reply: FastifyReply, error: SetupLinkInvalid) {
    return reply.code(410).view('setup-invalid.eta', { title: 'Setup link not valid', message: error.message });
  }

  app.get('/setup', page, async (request, reply) => {
    reply.header('Cache-Control', 'no-store');
    const token = single(request.query as RawParams, 'token');
    try {
      await checkSetupToken(ctx, token);
    } catch (error) {
      if (error instanceof SetupLinkInvalid) return linkInvalid(reply, error);
      throw error;
    }
    return setupPage(reply, { token: token!, values: { username: '', email: '' }, errors: {} });
  });

  app.post('/setup', { ...page, preHandler: app.csrfProtection }, async (request, reply) => {
    reply.header('Cache-Control', 'no-store');
    const body = requireFormBody(request);
    const token = field(body, 'token');
    const values = { username: field(body, 'username').trim(), email: field(body, 'email').trim() };
    try {
      await checkSetupToken(ctx, token);
      if (field(body, 'password') !== field(body, 'password_again')) {
        return setupPage(reply.code(400), { token, values, errors: { password_again: 'The two passwords differ' } });
      }
      const user = await createFirstAdministrator(ctx, token, { ...values, password: field(body, 'password') }, request.ip);
      request.log.info({ event: 'first_administrator_created', user: user.id }, 'first administrator created');
      const login = await firstAdministratorLogin(ctx, user, sessionToken(request, ctx), request.ip);
      if (login.pending !== undefined) {
        setPendingCookie(reply, ctx, login.pending);
        return reply.redirect(secondStepUrl('set_up', '/admin/oauthclients'), 303);
      }
      setSessionCookie(reply, ctx, login.session);
      return reply.redirect('/admin/oauthclients', 303);
    } catch (error) {
      if (error instanceof SetupLinkInvalid) return linkInvalid(reply, error);
      if (!(error instanceof AccountError)) throw error;
      return setupPage(reply.code(400), { token, values, errors: { [error.field]: sentence(error.message) } });
    }
  });
}
