/**
 * `/account/security` (SPEC §4.12, §4.13, §4.16): how the signed-in person logs in — their
 * email address (verifying it, changing it), their password and their passkeys here; the
 * authenticator app and recovery codes in src/http/account-factors.ts; their identities at
 * connections listed here, with **Connect** and **Disconnect** posting to src/http/connections.ts.
 * Every change needs a recent login with every factor the person has
 * (accounts/recent-login.ts): without one, the page offers to log in again instead of the
 * forms and buttons, and the endpoints refuse.
 *
 * Adding a passkey is a WebAuthn ceremony run by /static/passkeys.js: it asks
 * `/account/security/passkeys/options` for the options, lets the browser make the passkey,
 * and posts the result to `/account/security/passkeys`; both answer JSON.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { passwordRefusedFor } from '../accounts/connections/password-login.ts';
import { requestEmailChange, sendVerification } from '../accounts/email-verification.ts';
import { changeOwnPassword } from '../accounts/password-changes.ts';
import { NO_PASSWORD } from '../accounts/passwords.ts';
import { AccountError } from '../accounts/users.ts';
import type { SignedIn } from '../login.ts';
import { PageRefusal } from './errors.ts';
import { enabledConnections, identitiesOfPerson } from '../accounts/connections/connections.ts';
import { addPasskey, passkeysOf, registrationOptions, removeUserPasskey, renameUserPasskey } from '../accounts/passkeys.ts';
import { isRecentLogin, secondFactorsOf } from '../accounts/recent-login.ts';
import { notify, NOTICES, REAUTH_URL, recentLoginOrRefuse, SECURITY_PATH as PATH, takeNotice } from './account-changes.ts';
import { factorsSection } from './account-factors.ts';
import type { AppContext } from '../context.ts';
import { requireFormBody } from './helpers.ts';
import { field, formatTime, navigation, page, sentence, toLogin } from './pages.ts';
import { currentLogin, formToken, renewCsrfSecret, sessionToken, setSessionCookie, webauthnBinding, webauthnCookieName } from './session.ts';

export default async function accountSecurityRoutes(app: FastifyInstance, { ctx }: { ctx: AppContext }) {
  /** The page for the signed-in person; `errors`: a refused form's problem, by its field. */
  async function securityPage(request: FastifyRequest, reply: FastifyReply, signedIn: SignedIn, errors: Record<string, string> = {}) {
    reply.header('Cache-Control', 'no-store');
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
      email: { address: user.email, verified: user.email_verified === 1, mail: ctx.mail.enabled },
      password: { has: user.password_hash !== NO_PASSWORD, usable: !(await passwordRefusedFor(ctx, user)) },
      errors,
      reauthUrl: REAUTH_URL,
      notice,
      csrfToken: formToken(reply),
    });
  }

  app.get(PATH, page, async (request, reply) => {
    const signedIn = await currentLogin(request, ctx);
    if (!signedIn) return toLogin(request, reply, PATH);
    return securityPage(request, reply, signedIn);
  });

  /** Runs a change of a form on the page: back to the page with its notice, or the page again (400) with the problem at its field. */
  async function change(request: FastifyRequest, reply: FastifyReply, signedIn: SignedIn, work: () => Promise<keyof typeof NOTICES>) {
    try {
      notify(reply, ctx, signedIn.user.id, await work());
    } catch (error) {
      if (!(error instanceof AccountError)) throw error;
      return securityPage(request, reply.code(400), signedIn, { [error.field]: sentence(error.message) });
    }
    return reply.redirect(PATH, 303);
  }

  app.post(`${PATH}/password`, { ...page, preHandler: app.csrfProtection }, async (request, reply) => {
    const recent = await recentLoginOrRefuse(request, ctx);
    const body = requireFormBody(request);
    return change(request, reply, recent, async () => {
      if (field(body, 'password') !== field(body, 'password_again')) throw new AccountError('password_again', 'the two passwords differ');
      const session = sessionToken(request, ctx);
      await changeOwnPassword(ctx, recent, { current: field(body, 'current'), password: field(body, 'password'), session, address: request.ip });
      request.log.info({ event: 'password_changed', user: recent.user.id }, 'password changed by its owner');
      return 'password-changed';
    });
  });

  app.post(`${PATH}/email`, { ...page, preHandler: app.csrfProtection }, async (request, reply) => {
    const recent = await recentLoginOrRefuse(request, ctx);
    const email = field(requireFormBody(request), 'email');
    return change(request, reply, recent, async () => {
      await requestEmailChange(ctx, recent, email, request.ip);
      return 'email-change-sent';
    });
  });

  // Sending oneself a link needs no recent login: it only proves the address that is already the account's.
  app.post(`${PATH}/email/verify`, { ...page, preHandler: app.csrfProtection }, async (request, reply) => {
    const signedIn = await currentLogin(request, ctx);
    if (!signedIn) throw new PageRefusal(401, 'You are not logged in. Log in and try again.', 'no session');
    return change(request, reply, signedIn, async () => {
      await sendVerification(ctx, signedIn.user, { userId: signedIn.user.id, address: request.ip });
      return 'verification-sent';
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
