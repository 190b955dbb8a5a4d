/**
 * The authenticator app and recovery codes sections of `/account/security` (SPEC §4.12): set
 * up an app (a QR code and the secret, confirmed by a current code) and remove it; generate
 * recovery codes (ten, shown once). Each change needs a recent login, is CSRF-protected and
 * audited (accounts/second-factors.ts), and ends the person's other sessions.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import {
  beginAppSetup,
  confirmAppSetup,
  currentAppSetup,
  factorSummary,
  generateRecoveryCodes,
  hasSecondFactor,
  MAX_CODE_LENGTH,
  removeApp,
  type AppSetup,
} from '../accounts/second-factors.ts';
import type { AppContext } from '../context.ts';
import { single } from '../protocol/params.ts';
import { requireFormBody } from './helpers.ts';
import { formatTime, navigation, page } from './pages.ts';
import { notify, recentLoginOrRefuse, SECURITY_PATH } from './account-changes.ts';
import { formToken, renewCsrfSecret, sessionToken, setSessionCookie } from './session.ts';
import type { SignedIn } from '../login.ts';

/** What the security page shows of the app and the recovery codes; the template is src/views/security-factors.eta. */
export async function factorsSection(ctx: AppContext, userId: string) {
  const summary = await factorSummary(ctx, userId);
  return {
    app: summary.app ? { added: formatTime(summary.app.confirmedAt) } : null,
    recoveryCodesLeft: summary.recoveryCodesLeft,
    // Recovery codes alone are not a second factor: offered only to a person with one.
    canGenerateCodes: await hasSecondFactor(ctx, userId),
  };
}

export default async function accountFactorRoutes(app: FastifyInstance, { ctx }: { ctx: AppContext }) {
  const post = { ...page, preHandler: app.csrfProtection };

  /** The person's recent login, the proof a change takes (accounts/recent-login.ts); refused (403) otherwise. */
  const recentLogin = (request: FastifyRequest) => recentLoginOrRefuse(request, ctx);

  function setUpPage(request: FastifyRequest, reply: FastifyReply, signedIn: SignedIn, setup: AppSetup, error: string | null) {
    reply.header('Cache-Control', 'no-store');
    navigation(request, reply, signedIn.user);
    return reply.view('second-factor-setup.eta', {
      title: 'Set up an authenticator app',
      next: SECURITY_PATH,
      error,
      setup,
      action: `${SECURITY_PATH}/app/confirm`,
      required: false,
      csrfToken: formToken(reply),
      maxLength: MAX_CODE_LENGTH,
    });
  }

  function problemPage(request: FastifyRequest, reply: FastifyReply, signedIn: SignedIn, status: number, message: string) {
    navigation(request, reply, signedIn.user);
    return reply.code(status).view('security-problem.eta', { title: 'Security', message });
  }

  app.post(`${SECURITY_PATH}/app`, post, async (request, reply) => {
    requireFormBody(request);
    const signedIn = await recentLogin(request);
    const setup = await beginAppSetup(ctx, signedIn.user);
    if (!setup) return problemPage(request, reply, signedIn, 409, 'You have an authenticator app already. Remove it first to set up another.');
    return setUpPage(request, reply, signedIn, setup, null);
  });

  app.post(`${SECURITY_PATH}/app/confirm`, post, async (request, reply) => {
    const body = requireFormBody(request);
    const signedIn = await recentLogin(request);
    const session = sessionToken(request, ctx)!;
    const result = await confirmAppSetup(ctx, { user: signedIn.user, session, recent: signedIn }, single(body, 'code') ?? '', request.ip, session);
    if (result.ok) {
      request.log.info({ event: 'second_factor_added', factor: 'app', user: signedIn.user.id }, 'authenticator app set up');
      if (result.session !== session) {
        setSessionCookie(reply, ctx, result.session);
        renewCsrfSecret(reply, ctx);
      }
      notify(reply, ctx, signedIn.user.id, 'app-added');
      return reply.redirect(SECURITY_PATH, 303);
    }
    if (result.reason === 'exists')
      return problemPage(request, reply, signedIn, 409, 'You have an authenticator app already. Remove it first to set up another.');
    const setup = await currentAppSetup(ctx, signedIn.user);
    if (result.reason === 'no_setup' || !setup)
      return problemPage(request, reply, signedIn, 400, 'This set-up has expired. Start again from your security page.');
    const error =
      result.reason === 'malformed' ? result.problem : 'That code is not right. Check the time on your device and enter the code your app shows now.';
    return setUpPage(request, reply.code(result.reason === 'malformed' ? 400 : 401), signedIn, setup, error);
  });

  app.post(`${SECURITY_PATH}/app/remove`, post, async (request, reply) => {
    requireFormBody(request);
    const signedIn = await recentLogin(request);
    const result = await removeApp(ctx, signedIn, sessionToken(request, ctx), request.ip);
    if (!result.ok && result.reason === 'required') {
      return problemPage(request, reply, signedIn, 409, 'Your account must have a second factor: add a passkey or another app before you remove this one.');
    }
    if (result.ok) {
      request.log.info({ event: 'second_factor_removed', factor: 'app', user: signedIn.user.id }, 'authenticator app removed');
      notify(reply, ctx, signedIn.user.id, 'app-removed');
    }
    return reply.redirect(SECURITY_PATH, 303);
  });

  app.post(`${SECURITY_PATH}/recovery-codes`, post, async (request, reply) => {
    requireFormBody(request);
    const signedIn = await recentLogin(request);
    const codes = await generateRecoveryCodes(ctx, signedIn, sessionToken(request, ctx), request.ip);
    if (!codes) {
      const factors = ctx.config.webauthn === null ? 'an authenticator app: set one up first' : 'a passkey or an authenticator app: add one first';
      return problemPage(request, reply, signedIn, 409, `Recovery codes are for a person with ${factors}.`);
    }
    request.log.info({ event: 'recovery_codes_generated', user: signedIn.user.id }, 'recovery codes generated');
    reply.header('Cache-Control', 'no-store');
    navigation(request, reply, signedIn.user);
    return reply.view('security-recovery-codes.eta', { title: 'Your recovery codes', codes });
  });
}
