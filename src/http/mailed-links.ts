/**
 * The pages of SPEC §4.16 that need no session: **Forgot your password?** (the form that mails
 * a reset link), and the pages the mailed links open — choosing a new password, verifying an
 * address. A link's token travels in the query (the request log keeps only the path) and then
 * in the form; opening a link changes nothing until its form is sent, so a mail scanner that
 * follows links uses none. Also starts this instance's mail deliveries (mail.ts), which run on
 * the server only.
 */
import type { FastifyInstance, FastifyReply } from 'fastify';
// Where the mailed links point is the composer's to say: it makes the links.
import { RESET_PATH, VERIFY_PATH } from '../accounts/account-mail.ts';
import { addressOfLink, verifyEmail } from '../accounts/email-verification.ts';
import { LinkInvalid, requestPasswordReset, resetLinkWorks, resetPassword } from '../accounts/password-changes.ts';
import { AccountError } from '../accounts/users.ts';
import type { AppContext } from '../context.ts';
import { single, type RawParams } from '../protocol/params.ts';
import { requireFormBody } from './helpers.ts';
import { field, page, sentence } from './pages.ts';
import { formToken } from './session.ts';

const FORGOT = '/password/forgot';

export default async function mailedLinkRoutes(app: FastifyInstance, { ctx }: { ctx: AppContext }) {
  app.addHook('onReady', async () => ctx.mail.start());

  app.addHook('onSend', async (_request, reply) => {
    // A page opened from a link: never cached, and its address (the token) never sent on as a Referer.
    reply.header('Cache-Control', 'no-store');
    reply.header('Referrer-Policy', 'no-referrer');
  });

  const forgotPage = (reply: FastifyReply, p: { email?: string; error?: string | null; sent?: boolean }) =>
    reply.view('password-forgot.eta', {
      title: 'Forgot your password?',
      mail: ctx.mail.enabled,
      email: p.email ?? '',
      error: p.error ?? null,
      sent: p.sent ?? false,
      csrfToken: formToken(reply),
    });

  function linkInvalid(reply: FastifyReply, error: LinkInvalid, again: { url: string; label: string }) {
    return reply.code(410).view('link-invalid.eta', { title: 'Link not valid', message: error.message, again });
  }
  const resetAgain = { url: FORGOT, label: 'Ask for a new link' };
  const verifyAgain = { url: '/account/security', label: 'Ask for a new link on your account page' };

  app.get(FORGOT, page, async (_request, reply) => forgotPage(reply, {}));

  app.post(FORGOT, { ...page, preHandler: app.csrfProtection }, async (request, reply) => {
    const email = field(requireFormBody(request), 'email').trim().slice(0, 320);
    try {
      await requestPasswordReset(ctx, email, request.ip);
    } catch (error) {
      if (!(error instanceof AccountError)) throw error;
      return forgotPage(reply.code(400), { email, error: sentence(error.message) });
    }
    // The same page whether or not an account has the address.
    return forgotPage(reply, { email, sent: true });
  });

  const resetPage = (reply: FastifyReply, p: { token?: string; errors?: Record<string, string>; done?: boolean }) =>
    reply.view('password-reset.eta', {
      title: 'Choose a new password',
      token: p.token ?? '',
      errors: p.errors ?? {},
      done: p.done ?? false,
      csrfToken: formToken(reply),
    });

  app.get(RESET_PATH, page, async (request, reply) => {
    const token = single(request.query as RawParams, 'token');
    if (!(await resetLinkWorks(ctx, token))) return linkInvalid(reply, new LinkInvalid(), resetAgain);
    return resetPage(reply, { token });
  });

  app.post(RESET_PATH, { ...page, preHandler: app.csrfProtection }, async (request, reply) => {
    const body = requireFormBody(request);
    const token = field(body, 'token');
    if (field(body, 'password') !== field(body, 'password_again'))
      return resetPage(reply.code(400), { token, errors: { password_again: 'The two passwords differ' } });
    try {
      await resetPassword(ctx, token, field(body, 'password'), request.ip);
    } catch (error) {
      if (error instanceof LinkInvalid) return linkInvalid(reply, error, resetAgain);
      if (!(error instanceof AccountError)) throw error;
      return resetPage(reply.code(400), { token, errors: { password: sentence(error.message) } });
    }
    request.log.info({ event: 'password_reset' }, 'password reset with a mailed link');
    return resetPage(reply, { done: true });
  });

  app.get(VERIFY_PATH, page, async (request, reply) => {
    const token = single(request.query as RawParams, 'token');
    const email = await addressOfLink(ctx, token);
    if (email === null) return linkInvalid(reply, new LinkInvalid(), verifyAgain);
    return reply.view('email-verify.eta', { title: 'Verify your email address', email, token, done: false, csrfToken: formToken(reply) });
  });

  app.post(VERIFY_PATH, { ...page, preHandler: app.csrfProtection }, async (request, reply) => {
    const token = field(requireFormBody(request), 'token');
    const email = await addressOfLink(ctx, token);
    try {
      if (email === null) throw new LinkInvalid();
      const { changed } = await verifyEmail(ctx, token, request.ip);
      return reply.view('email-verify.eta', { title: 'Email address verified', email, changed, done: true });
    } catch (error) {
      if (error instanceof LinkInvalid) return linkInvalid(reply, error, verifyAgain);
      if (!(error instanceof AccountError)) throw error;
      return reply.code(409).view('link-invalid.eta', { title: 'Address taken', message: sentence(error.message), again: verifyAgain });
    }
  });
}
