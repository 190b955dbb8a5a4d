/**
 * Logging in with a passkey (SPEC §4.12), for /static/passkeys.js on the login page:
 * `POST /login/passkey/options` hands out a challenge bound to this browser, `POST
 * /login/passkey` answers it; `/login/second-factor/passkey(/options)` the same for a
 * passkey as the second step after a password (the page of src/http/second-factor.ts). Both are CSRF-protected like the password form (the login page
 * has set the CSRF secret), and answer JSON. The browser library itself is served from its
 * package, as a static file: no bundler, no inline script.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { authenticationOptions, canUsePasskey, logInWithPasskey } from '../accounts/passkeys.ts';
import type { AppContext } from '../context.ts';
import { OAuthError } from '../protocol/errors.ts';
import { field } from './pages.ts';
import { PageRefusal } from './errors.ts';
import { requireFormBody, uncheckedLogin } from './helpers.ts';
import { safeNext } from './next.ts';
import { secondStepOf } from './second-factor.ts';
import { cookieOptions, pendingCookieName, renewCsrfSecret, sessionToken, setSessionCookie, webauthnBinding, webauthnCookieName } from './session.ts';

/** @simplewebauthn/browser's UMD bundle (global `SimpleWebAuthnBrowser`), read once from the installed package. */
function browserLibrary(): Buffer {
  const main = createRequire(import.meta.url).resolve('@simplewebauthn/browser'); // …/script/index.js
  return readFileSync(join(dirname(main), '..', 'dist', 'bundle', 'index.umd.min.js'));
}

export default async function passkeyLoginRoutes(app: FastifyInstance, { ctx }: { ctx: AppContext }) {
  const library = browserLibrary();
  app.get('/static/simplewebauthn-browser.js', async (_request, reply) =>
    reply.header('Content-Type', 'text/javascript; charset=utf-8').header('Cache-Control', 'public, max-age=3600').send(library),
  );

  app.post('/login/passkey/options', { preHandler: app.csrfProtection }, async (request, reply) => {
    const options = await authenticationOptions(ctx, webauthnBinding(request, reply, ctx));
    return reply.header('Cache-Control', 'no-store').send(options);
  });

  // A passkey as the second step after a right password, or as step-up (SPEC §4.12): the
  // person is known (their pending login, or their session), and the passkey must be theirs.
  app.post('/login/second-factor/passkey/options', { preHandler: app.csrfProtection }, async (request, reply) => {
    const step = await secondStepOf(request, ctx);
    if (!step || !(await canUsePasskey(ctx, step.user.id)))
      throw new PageRefusal(403, 'There is no login waiting for a passkey here. Log in again.', 'no second step');
    const options = await authenticationOptions(ctx, webauthnBinding(request, reply, ctx), step.user);
    return reply.header('Cache-Control', 'no-store').send(options);
  });

  app.post('/login/passkey', { preHandler: app.csrfProtection }, (request, reply) => answer(request, reply, false));
  app.post('/login/second-factor/passkey', { preHandler: app.csrfProtection }, (request, reply) => answer(request, reply, true));

  async function answer(request: FastifyRequest, reply: FastifyReply, asSecondStep: boolean) {
    if (ctx.config.webauthn === null) throw new PageRefusal(404, 'Passkeys are not available on this server.', 'passkeys are off');
    const body = requireFormBody(request);
    const next = safeNext(field(body, 'next') || undefined, ctx.config.publicUrl);
    const step = asSecondStep ? await secondStepOf(request, ctx) : undefined;
    if (step === null) throw new PageRefusal(403, 'There is no login waiting for a passkey here. Log in again.', 'no second step');
    const result = await logInWithPasskey(ctx, {
      response: field(body, 'response'),
      binding: request.cookies[webauthnCookieName(ctx)],
      address: request.ip,
      session: sessionToken(request, ctx),
      secondStep: step,
    });
    reply.header('Cache-Control', 'no-store');
    if (result.ok) {
      if (step?.pending) reply.clearCookie(pendingCookieName(ctx), cookieOptions(ctx));
      setSessionCookie(reply, ctx, result.session);
      renewCsrfSecret(reply, ctx);
      request.log.info({ event: 'login', user: result.user.id, method: 'passkey' }, 'logged in');
      return reply.send({ redirect: next });
    }
    if ('retryAfter' in result) {
      reply.header('Retry-After', String(result.retryAfter));
      const { status, text } = uncheckedLogin(result.reason, result.retryAfter);
      throw new OAuthError('temporarily_unavailable', text, `login ${result.reason}`, status);
    }
    request.log.info({ event: 'login_failed', method: 'passkey' }, 'login failed');
    const detail = result.reason === 'passkey_refused' ? result.passkeyReason : result.reason;
    throw new OAuthError(
      'access_denied',
      asSecondStep ? 'This passkey was not accepted. Try again, or enter a code.' : 'This passkey was not accepted. Try again, or log in with your password.',
      `passkey login refused: ${detail}`,
      401,
    );
  }
}
