/**
 * `/account/security` (SPEC §4.12, §4.13): how the signed-in person logs in — their passkeys
 * here; the authenticator app and recovery codes in src/http/account-factors.ts; their
 * identities at connections listed here, with **Connect** and **Disconnect** posting to
 * src/http/connections.ts. Every change needs a recent login with every factor the person has
 * (accounts/recent-login.ts): without one, the page offers to log in again instead of the
 * forms and buttons, and the endpoints refuse.
 *
 * Adding a passkey is a WebAuthn ceremony run by /static/passkeys.js: it asks
 * `/account/security/passkeys/options` for the options, lets the browser make the passkey,
 * and posts the result to `/account/security/passkeys`; both answer JSON.
 */
import type { FastifyInstance } from 'fastify';
import { enabledConnections, identitiesOfPerson } from '../accounts/connections/connections.ts';
import { addPasskey, passkeysOf, registrationOptions, removeUserPasskey, renameUserPasskey } from '../accounts/passkeys.ts';
import { isRecentLogin, secondFactorsOf } from '../accounts/recent-login.ts';
import { notify, REAUTH_URL, recentLoginOrRefuse, SECURITY_PATH as PATH, takeNotice } from './account-changes.ts';
import { factorsSection } from './account-factors.ts';
import type { AppContext } from '../context.ts';
import { requireFormBody } from './helpers.ts';
import { field, formatTime, navigation, page, toLogin } from './pages.ts';
import { currentLogin, formToken, renewCsrfSecret, sessionToken, setSessionCookie, webauthnBinding, webauthnCookieName } from './session.ts';

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
    const identities = await connectedIdentities(ctx, user.id);
    // The notice comes from this person's own change in this browser, never from the URL.
    const notice = takeNotice(request, reply, ctx, user.id);
    return reply.view('account-security.eta', {
      title: 'Security',
      wide: true,
      passkeysOn: ctx.config.webauthn !== null,
      passkeys,
      recent: isRecentLogin(ctx, signedIn, factors),
      factors: await factorsSection(ctx, user.id),
      identities,
      reauthUrl: REAUTH_URL,
      notice,
      csrfToken: formToken(reply),
    });
  });

  // JSON for /static/passkeys.js: errors are JSON too (not page routes).
  app.post(`${PATH}/passkeys/options`, { preHandler: app.csrfProtection }, async (request, reply) => {
    const recent = await recentLoginOrRefuse(request, ctx);
    const options = await registrationOptions(ctx, recent, webauthnBinding(request, reply, ctx));
    return reply.header('Cache-Control', 'no-store').send(options);
  });

  app.post(`${PATH}/passkeys`, { preHandler: app.csrfProtection }, async (request, reply) => {
    const recent = await recentLoginOrRefuse(request, ctx);
    const { user } = recent;
    const body = requireFormBody(request);
    const { added, session } = await addPasskey(ctx, {
      recent,
      session: sessionToken(request, ctx),
      binding: request.cookies[webauthnCookieName(ctx)],
      response: field(body, 'response'),
      name: field(body, 'name'),
      address: request.ip,
    });
    request.log.info({ event: 'second_factor_added', factor: 'passkey', user: user.id }, 'passkey added');
    // The session now counts as a login with the passkey, under a new token (accounts/recent-login.ts).
    if (session !== null) {
      setSessionCookie(reply, ctx, session);
      renewCsrfSecret(reply, ctx);
    }
    notify(reply, ctx, user.id, 'passkey-added');
    return reply.header('Cache-Control', 'no-store').send({ added: { name: added.name }, redirect: PATH });
  });

  app.post(`${PATH}/passkeys/rename`, { ...page, preHandler: app.csrfProtection }, async (request, reply) => {
    const recent = await recentLoginOrRefuse(request, ctx);
    const { user } = recent;
    const body = requireFormBody(request);
    if (await renameUserPasskey(ctx, { recent, id: field(body, 'id'), name: field(body, 'name'), address: request.ip }))
      notify(reply, ctx, user.id, 'passkey-renamed');
    return reply.redirect(PATH, 303);
  });

  app.post(`${PATH}/passkeys/remove`, { ...page, preHandler: app.csrfProtection }, async (request, reply) => {
    const recent = await recentLoginOrRefuse(request, ctx);
    const { user } = recent;
    const body = requireFormBody(request);
    // Nothing to remove (say, already removed in another tab): the page shows how things are.
    if (await removeUserPasskey(ctx, { recent, id: field(body, 'id'), session: sessionToken(request, ctx), address: request.ip })) {
      request.log.info({ event: 'second_factor_removed', factor: 'passkey', user: user.id }, 'passkey removed');
      notify(reply, ctx, user.id, 'passkey-removed');
    }
    return reply.redirect(PATH, 303);
  });
}

/**
 * The connections section: each enabled connection, with the person's identity there if they
 * have one (**Disconnect**) or not (**Connect**); then their identities at disabled connections,
 * which can only be disconnected. Null when there is nothing to show: no enabled connection
 * and no identity.
 */
async function connectedIdentities(ctx: AppContext, userId: string) {
  const [connections, identities] = await Promise.all([enabledConnections(ctx), identitiesOfPerson(ctx, userId)]);
  if (connections.length === 0 && identities.length === 0) return null;
  const byConnection = new Map(identities.map((identity) => [identity.connection_id, identity]));
  const describe = (identity: (typeof identities)[number] | undefined) =>
    identity && {
      email: identity.email,
      connected: formatTime(identity.created_at),
      lastUsed: identity.last_login_at === null ? 'never' : formatTime(identity.last_login_at),
    };
  return [
    ...connections.map((connection) => ({ id: connection.id, name: connection.name, available: true, identity: describe(byConnection.get(connection.id)) })),
    ...identities
      .filter((identity) => identity.connection_enabled !== 1)
      .map((identity) => ({ id: identity.connection_id, name: identity.connection_name, available: false, identity: describe(identity) })),
  ];
}
