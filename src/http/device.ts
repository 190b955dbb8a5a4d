/**
 * `/device` (SPEC §4.7): where a person enters the user code a device shows, checks what the
 * device asks for, and approves or denies it. Login is required, as on the authorization
 * page; a person who is not logged in comes back to the same code afterwards. The consent
 * form carries the user code back, and its answer checks the code again (through the same
 * throttle), so nothing but the code ties the answer to the request.
 */
import type { FastifyInstance, FastifyReply } from 'fastify';
import type { AppContext } from '../context.ts';
import { answerDevice, checkUserCode, stepUpNeeded, VERIFICATION_PATH, type PendingDevice } from '../oauth/device.ts';
import { secondStepUrl } from './second-factor.ts';
import { invalidRequest } from '../protocol/errors.ts';
import { single, type RawParams } from '../protocol/params.ts';
import { scopeDescriptions } from '../oauth/resources.ts';
import type { User } from '../accounts/users.ts';
import { requireFormBody } from './helpers.ts';
import { field, navigation, page, toLogin } from './pages.ts';
import { currentLogin, currentUser, formToken } from './session.ts';

/** Longer than any user code with dashes and spaces; what is typed beyond is not shown back. */
const MAX_TYPED = 64;

const PROBLEMS = {
  malformed: 'A code is 8 letters, like BCDF-GHJK. Check the code your device shows.',
  unknown: 'That code is not valid: it may be mistyped, expired or used already. Check the code your device shows, or start again on the device.',
} as const;

export default async function deviceRoutes(app: FastifyInstance, { ctx }: { ctx: AppContext }) {
  function codeForm(reply: FastifyReply, userCode: string, error: string | null) {
    return reply.view('device.eta', { title: 'Connect a device', userCode: userCode.slice(0, MAX_TYPED), error, csrfToken: formToken(reply) });
  }

  async function consentPage(reply: FastifyReply, user: User, device: PendingDevice) {
    const descriptions = await scopeDescriptions(ctx);
    return reply.view('device-consent.eta', {
      title: `Authorize ${device.client.name}`,
      user,
      device,
      resource: device.audience.builtin ? null : { name: device.audience.name, uri: device.audience.uri },
      scopes: device.scopes.map((scope) => ({ scope, description: descriptions.get(scope) ?? scope })),
      csrfToken: formToken(reply),
    });
  }

  app.get(VERIFICATION_PATH, page, async (request, reply) => {
    reply.header('Cache-Control', 'no-store');
    const user = await currentUser(request, ctx);
    if (!user) return toLogin(request, reply, VERIFICATION_PATH);
    navigation(request, reply, user);
    return codeForm(reply, single(request.query as RawParams, 'user_code') ?? '', null);
  });

  app.post(VERIFICATION_PATH, { ...page, preHandler: app.csrfProtection }, async (request, reply) => {
    reply.header('Cache-Control', 'no-store');
    const body = requireFormBody(request);
    const typed = field(body, 'user_code').trim();
    const signedIn = await currentLogin(request, ctx);
    if (!signedIn) return toLogin(request, reply, `${VERIFICATION_PATH}?${new URLSearchParams({ user_code: typed.slice(0, MAX_TYPED) })}`);
    const { user } = signedIn;
    const decision = single(body, 'decision');
    if (decision !== undefined && decision !== 'approve' && decision !== 'deny') throw invalidRequest('the form did not say whether to authorize');
    navigation(request, reply, user);
    const check = await checkUserCode(ctx, user, typed, request.ip);
    if (!check.ok) {
      if (check.reason !== 'throttled') return codeForm(reply.code(400), typed, PROBLEMS[check.reason]);
      reply.header('Retry-After', String(check.retryAfter));
      return codeForm(reply.code(429), typed, `Too many wrong codes. Try again in ${Math.ceil(check.retryAfter / 60)} minute(s).`);
    }
    // Step-up before consent: the person proves (or sets up) a second factor, then comes back to this code.
    if (decision !== 'deny' && stepUpNeeded(check.device, signedIn)) {
      return reply.redirect(secondStepUrl('code', `${VERIFICATION_PATH}?${new URLSearchParams({ user_code: check.device.userCode })}`), 303);
    }
    if (decision === undefined) return consentPage(reply, user, check.device);
    if (!(await answerDevice(ctx, signedIn, check.device, decision === 'approve', request.ip))) return codeForm(reply.code(400), typed, PROBLEMS.unknown);
    request.log.info(
      { event: decision === 'approve' ? 'device_approved' : 'device_denied', user: user.id, client: check.device.client.id },
      'device request answered',
    );
    return reply.view('device-done.eta', {
      title: decision === 'approve' ? 'Device connected' : 'Request denied',
      approved: decision === 'approve',
      client: check.device.client,
    });
  });
}
