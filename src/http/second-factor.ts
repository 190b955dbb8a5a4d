/**
 * The second step of a login (SPEC §4.12): after a right password, a person who has a second
 * factor enters an app code or a recovery code; one who must have one and has none sets up an
 * authenticator app first. The same pages serve step-up: a signed-in person whose login
 * proved no second factor, sent here by the authorization or device pages before consent.
 * The half-done login is held by its own cookie (a pending login: accounts/second-factors.ts),
 * never by the session cookie, so no other page treats it as a login.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import {
  beginAppSetup,
  confirmAppSetup,
  currentAppSetup,
  factorSummary,
  hasSecondFactor,
  MAX_CODE_LENGTH,
  submitCode,
  type AppSetup,
  type SetUpAt,
} from '../accounts/second-factors.ts';
import { findPending, PENDING_LOGIN_TTL_MS, type SecondStep } from '../accounts/second-step.ts';
import { canUsePasskey } from '../accounts/passkeys.ts';
import { isMultiFactor } from '../login.ts';
import { requireRecentLogin } from '../accounts/recent-login.ts';
import type { AppContext } from '../context.ts';
import { single, type RawParams } from '../protocol/params.ts';
import { requireFormBody, uncheckedLogin } from './helpers.ts';
import { safeNext } from './next.ts';
import { page } from './pages.ts';
import { cookieOptions, currentLogin, formToken, pendingCookieName, renewCsrfSecret, sessionToken, setSessionCookie } from './session.ts';

export const SECOND_STEP_PATH = '/login/second-factor';
export const SET_UP_PATH = '/login/second-factor/set-up';

/** Where a person goes for their second step, to come back to `next` (a safe relative path) after. */
export function secondStepUrl(step: 'code' | 'set_up', next: string): string {
  return `${step === 'code' ? SECOND_STEP_PATH : SET_UP_PATH}?${new URLSearchParams({ next })}`;
}

export function setPendingCookie(reply: FastifyReply, ctx: AppContext, token: string): void {
  reply.setCookie(pendingCookieName(ctx), token, { ...cookieOptions(ctx), maxAge: PENDING_LOGIN_TTL_MS / 1000 });
}

/**
 * Who is at a second step: the pending login of this browser first (a new password login),
 * else a session without a second factor. (Also for a passkey as the second step: passkey-login.ts.)
 */
export async function secondStepOf(request: FastifyRequest, ctx: AppContext): Promise<SecondStep | null> {
  const pending = await findPending(ctx, request.cookies[pendingCookieName(ctx)]);
  if (pending) return { user: pending.user, pending };
  const signedIn = await currentLogin(request, ctx);
  const session = sessionToken(request, ctx);
  if (signedIn && session !== undefined && !isMultiFactor(signedIn.login.amr)) return { user: signedIn.user, session, amr: signedIn.login.amr };
  return null;
}

export default async function secondFactorRoutes(app: FastifyInstance, { ctx }: { ctx: AppContext }) {
  const secondStep = (request: FastifyRequest) => secondStepOf(request, ctx);

  /** No step here: back to the login page (or on, for a login that has its second factor already). */
  async function noStep(request: FastifyRequest, reply: FastifyReply, next: string) {
    if (await currentLogin(request, ctx)) return reply.redirect(next, 303);
    return reply.redirect(`/login?${new URLSearchParams({ next })}`, 303);
  }

  /**
   * Where the set-up is confirmed: at the pending login, or in the session (step-up). Setting
   * up a first factor from a session adds a factor, so it needs what the security page needs:
   * a recent login, the proof confirmAppSetup takes (accounts/recent-login.ts). Otherwise a
   * stolen or forgotten session would enrol someone else's app and, with it, a fresh two-factor
   * login. Null when it is not recent: the answer is to log in again, then back here (reauth).
   */
  async function setUpAt(request: FastifyRequest, step: SecondStep): Promise<SetUpAt | null> {
    if (step.session === undefined) return step;
    const signedIn = await currentLogin(request, ctx);
    const recent = signedIn && (await requireRecentLogin(ctx, signedIn));
    return recent ? { user: step.user, session: step.session, recent } : null;
  }

  function reauth(reply: FastifyReply, next: string) {
    return reply.redirect(`/login?${new URLSearchParams({ switch: '1', reauth: '1', next: secondStepUrl('set_up', next) })}`, 303);
  }

  function nextOf(params: RawParams): string {
    return safeNext(single(params, 'next'), ctx.config.publicUrl);
  }

  /** The step is done: the new session replaces the pending login (and any session before it). */
  function completed(reply: FastifyReply, session: string, next: string) {
    reply.clearCookie(pendingCookieName(ctx), cookieOptions(ctx));
    setSessionCookie(reply, ctx, session);
    renewCsrfSecret(reply, ctx);
    return reply.redirect(next, 303);
  }

  async function codePage(reply: FastifyReply, step: SecondStep, next: string, error: string | null) {
    reply.header('Cache-Control', 'no-store');
    // Which ways the person has: a passkey (when passkeys are on), and app or recovery codes.
    const [passkey, factors] = await Promise.all([canUsePasskey(ctx, step.user.id), factorSummary(ctx, step.user.id)]);
    const codes = factors.app !== null || factors.recoveryCodesLeft > 0;
    return reply.view('second-factor.eta', {
      title: codes ? 'Enter a code' : 'Use your passkey',
      passkey,
      app: factors.app !== null,
      codes,
      next,
      error,
      csrfToken: formToken(reply),
      stepUp: step.session !== undefined,
      maxLength: MAX_CODE_LENGTH,
    });
  }

  function setUpPage(reply: FastifyReply, step: SecondStep, setup: AppSetup, next: string, error: string | null) {
    reply.header('Cache-Control', 'no-store');
    return reply.view('second-factor-setup.eta', {
      title: 'Set up an authenticator app',
      next,
      error,
      setup,
      action: SET_UP_PATH,
      required: step.pending !== undefined,
      csrfToken: formToken(reply),
      maxLength: MAX_CODE_LENGTH,
    });
  }

  app.get(SECOND_STEP_PATH, page, async (request, reply) => {
    const next = nextOf(request.query as RawParams);
    const step = await secondStep(request);
    if (!step) return noStep(request, reply, next);
    if (!(await hasSecondFactor(ctx, step.user.id))) return reply.redirect(secondStepUrl('set_up', next), 303);
    return codePage(reply, step, next, null);
  });

  app.post(SECOND_STEP_PATH, { ...page, preHandler: app.csrfProtection }, async (request, reply) => {
    const body = requireFormBody(request);
    const next = nextOf(body);
    const step = await secondStep(request);
    if (!step) return noStep(request, reply, next);
    const result = await submitCode(ctx, step, single(body, 'code') ?? '', request.ip, sessionToken(request, ctx));
    if (result.ok) {
      request.log.info({ event: 'login', user: step.user.id }, 'logged in with a second factor');
      return completed(reply, result.session, next);
    }
    if (result.reason === 'expired') return noStep(request, reply, next);
    if (result.reason === 'throttled' || result.reason === 'busy') {
      reply.header('Retry-After', String(result.retryAfter));
      const { status, text } = uncheckedLogin(result.reason, result.retryAfter);
      return codePage(reply.code(status), step, next, text);
    }
    if (result.reason === 'malformed') return codePage(reply.code(400), step, next, result.problem);
    request.log.info({ event: 'login_failed' }, 'wrong second-factor code');
    return codePage(reply.code(401), step, next, 'That code is not right, or was used already. Wait for the next code from your app, or use a recovery code.');
  });

  app.get(SET_UP_PATH, page, async (request, reply) => {
    const next = nextOf(request.query as RawParams);
    const step = await secondStep(request);
    if (!step) return noStep(request, reply, next);
    // A person with a second factor proves it here; setting one up is for those without (confirmAppSetup refuses it too).
    if (await hasSecondFactor(ctx, step.user.id)) return reply.redirect(secondStepUrl('code', next), 303);
    if (!(await setUpAt(request, step))) return reauth(reply, next);
    const setup = await beginAppSetup(ctx, step.user);
    // Has a second factor already: the code, not a second app.
    if (!setup) return reply.redirect(secondStepUrl('code', next), 303);
    return setUpPage(reply, step, setup, next, null);
  });

  app.post(SET_UP_PATH, { ...page, preHandler: app.csrfProtection }, async (request, reply) => {
    const body = requireFormBody(request);
    const next = nextOf(body);
    const step = await secondStep(request);
    if (!step) return noStep(request, reply, next);
    const at = await setUpAt(request, step);
    if (!at) return reauth(reply, next);
    const result = await confirmAppSetup(ctx, at, single(body, 'code') ?? '', request.ip, sessionToken(request, ctx));
    if (result.ok) {
      request.log.info({ event: 'second_factor_added', factor: 'app', user: step.user.id }, 'authenticator app set up');
      return completed(reply, result.session, next);
    }
    if (result.reason === 'exists') return reply.redirect(secondStepUrl('code', next), 303);
    const setup = await currentAppSetup(ctx, step.user);
    if (result.reason === 'no_setup' || !setup) return reply.redirect(secondStepUrl('set_up', next), 303);
    const error =
      result.reason === 'malformed' ? result.problem : 'That code is not right. Check the time on your device and enter the code your app shows now.';
    return setUpPage(reply.code(result.reason === 'malformed' ? 400 : 401), step, setup, next, error);
  });
}
