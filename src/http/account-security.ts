/**
 * `/account/security` (SPEC §4.12): how the signed-in person logs in — their passkeys here;
 * the authenticator app and recovery codes in src/http/account-factors.ts. Every
 * change needs a recent login with every factor the person has (accounts/recent-login.ts):
 * without one, the page offers to log in again instead of the forms, and the endpoints refuse.
 *
 * Adding a passkey is a WebAuthn ceremony run by /static/passkeys.js: it asks
 * `/account/security/passkeys/options` for the options, lets the browser make the passkey,
 * and posts the result to `/account/security/passkeys`; both answer JSON.
 */
import { type SignedIn } from '../login.ts';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { addPasskey, bindingFor, passkeysOf, registrationOptions, removeUserPasskey, renameUserPasskey } from '../accounts/passkeys.ts';
import { isRecentLogin, NOT_RECENT, secondFactorsOf } from '../accounts/recent-login.ts';
import { factorsSection } from './account-factors.ts';
import type { AppContext } from '../context.ts';
import { OAuthError } from '../protocol/errors.ts';
import { requireFormBody } from './helpers.ts';
import { field, formatTime, navigation, page, toLogin } from './pages.ts';
import {
  cookieOptions,
  currentLogin,
  formToken,
  renewCsrfSecret,
  securityNoticeCookieName,
  sessionToken,
  setSessionCookie,
  webauthnCookieName,
} from './session.ts';

const PATH = '/account/security';
/** How long the notice of a change waits for the page it is shown on. */
const NOTICE_TTL = 60;
/** The notices the page may show, by the cookie's value: fixed texts, nothing from the request. */
const NOTICES: Record<string, string> = {
  'passkey-added': 'Passkey added. You can now log in with it, without your password.',
  'passkey-renamed': 'Passkey renamed.',
  'passkey-removed': 'Passkey removed. Your other sessions have been logged out.',
  'app-added': 'Authenticator app set up. From now on you log in with your password and a code from it. Your other sessions have been logged out.',
  'app-removed': 'Authenticator app removed. Your other sessions have been logged out.',
};

/** Where "log in again" leads: the login page, for the same person, back here afterwards. */
export const REAUTH_URL = `/login?${new URLSearchParams({ switch: '1', reauth: '1', next: PATH })}`;

/** The signed-in person, whose login is recent enough to change their factors; refused otherwise. */
export async function recentLoginOrRefuse(request: FastifyRequest, ctx: AppContext): Promise<SignedIn> {
  const signedIn = await currentLogin(request, ctx);
  if (!signedIn) throw new OAuthError('access_denied', 'You are not logged in. Log in and try again.', 'no session', 401);
  if (!isRecentLogin(ctx, signedIn, await secondFactorsOf(ctx, signedIn.user.id))) {
    throw new OAuthError('access_denied', NOT_RECENT, 'login not recent', 403);
  }
  return signedIn;
}

/** The browser's WebAuthn binding cookie, set when new (SameSite=Strict: no other site's page sends it). */
export function webauthnBinding(request: FastifyRequest, reply: FastifyReply, ctx: AppContext): string {
  const binding = bindingFor(request.cookies[webauthnCookieName(ctx)]);
  if (binding.fresh) reply.setCookie(webauthnCookieName(ctx), binding.token, { ...cookieOptions(ctx), sameSite: 'strict', maxAge: 3600 });
  return binding.token;
}

export function notify(reply: FastifyReply, ctx: AppContext, userId: string, notice: keyof typeof NOTICES): void {
  reply.setCookie(securityNoticeCookieName(ctx), `${userId} ${notice}`, { ...cookieOptions(ctx), maxAge: NOTICE_TTL });
}

export default async function accountSecurityRoutes(app: FastifyInstance, { ctx }: { ctx: AppContext }) {
  app.get(PATH, page, async (request, reply) => {
    reply.header('Cache-Control', 'no-store');
    const signedIn = await currentLogin(request, ctx);
    if (!signedIn) return toLogin(request, reply, PATH);
    const { user } = signedIn;
    navigation(request, reply, user);
    const factors = await secondFactorsOf(ctx, user.id);
    const passkeys = (await passkeysOf(ctx, user.id)).map((passkey) => ({
      id: passkey.id,
      name: passkey.name,
      added: formatTime(passkey.createdAt),
      lastUsed: passkey.lastUsedAt === null ? 'never' : formatTime(passkey.lastUsedAt),
    }));
    // The notice comes from this person's own change in this browser, never from the URL.
    const cookie = request.cookies[securityNoticeCookieName(ctx)];
    if (cookie !== undefined) reply.clearCookie(securityNoticeCookieName(ctx), cookieOptions(ctx));
    const notice = cookie?.startsWith(`${user.id} `) ? (NOTICES[cookie.slice(user.id.length + 1)] ?? null) : null;
    return reply.view('account-security.eta', {
      title: 'Security',
      wide: true,
      passkeysOn: ctx.config.webauthn !== null,
      passkeys,
      recent: isRecentLogin(ctx, signedIn, factors),
      factors: await factorsSection(ctx, user.id),
      reauthUrl: REAUTH_URL,
      notice,
      csrfToken: formToken(reply),
    });
  });

  // JSON for /static/passkeys.js: errors are JSON too (not page routes).
  app.post(`${PATH}/passkeys/options`, { preHandler: app.csrfProtection }, async (request, reply) => {
    const { user } = await recentLoginOrRefuse(request, ctx);
    const options = await registrationOptions(ctx, user, webauthnBinding(request, reply, ctx));
    return reply.header('Cache-Control', 'no-store').send(options);
  });

  app.post(`${PATH}/passkeys`, { preHandler: app.csrfProtection }, async (request, reply) => {
    const signedIn = await recentLoginOrRefuse(request, ctx);
    const { user } = signedIn;
    const body = requireFormBody(request);
    const { added, session } = await addPasskey(ctx, {
      signedIn,
      session: sessionToken(request, ctx),
      binding: request.cookies[webauthnCookieName(ctx)],
      response: field(body, 'response'),
      name: field(body, 'name'),
      address: request.ip,
    });
    request.log.info({ event: 'passkey_added', user: user.id }, 'passkey added');
    // The session now counts as a login with the passkey, under a new token (accounts/recent-login.ts).
    if (session !== null) {
      setSessionCookie(reply, ctx, session);
      renewCsrfSecret(reply, ctx);
    }
    notify(reply, ctx, user.id, 'passkey-added');
    return reply.header('Cache-Control', 'no-store').send({ added: { name: added.name }, redirect: PATH });
  });

  app.post(`${PATH}/passkeys/rename`, { ...page, preHandler: app.csrfProtection }, async (request, reply) => {
    const { user } = await recentLoginOrRefuse(request, ctx);
    const body = requireFormBody(request);
    if (await renameUserPasskey(ctx, { user, id: field(body, 'id'), name: field(body, 'name'), address: request.ip }))
      notify(reply, ctx, user.id, 'passkey-renamed');
    return reply.redirect(PATH, 303);
  });

  app.post(`${PATH}/passkeys/remove`, { ...page, preHandler: app.csrfProtection }, async (request, reply) => {
    const { user } = await recentLoginOrRefuse(request, ctx);
    const body = requireFormBody(request);
    // Nothing to remove (say, already removed in another tab): the page shows how things are.
    if (await removeUserPasskey(ctx, { user, id: field(body, 'id'), session: sessionToken(request, ctx), address: request.ip })) {
      request.log.info({ event: 'passkey_removed', user: user.id }, 'passkey removed');
      notify(reply, ctx, user.id, 'passkey-removed');
    }
    return reply.redirect(PATH, 303);
  });
}
