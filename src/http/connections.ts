/**
 * Logging in through a connection (SPEC §4.13): the button's link starts a login at the
 * provider, the callback completes it, and every way it can end — a session, the second step,
 * an identity linked, an account that must be logged in to first, a refusal, a failure at or
 * of the provider — ends on a page at Gatehouse. Also **Connect** and **Disconnect** on
 * /account/security, and confirming the link of an identity whose email an account has.
 *
 * The browser that starts a login gets a random binding cookie (SameSite=Lax: the callback is
 * a top-level navigation from the provider's site, which Lax cookies go with); the login under
 * way is bound to it, so a callback is answered once, and only in that browser.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { connectionNamed, type Connection } from '../accounts/connections/connections.ts';
import { confirmPendingIdentity, federatedLogin, pendingIdentity, unlinkIdentity, type FederatedOutcome } from '../accounts/connections/federated-login.ts';
import { beginUpstreamLogin, finishUpstreamLogin, UpstreamFailure, UPSTREAM_LOGIN_TTL_MS } from '../accounts/connections/upstream.ts';
import { PENDING_IDENTITY_TTL_MS } from '../accounts/connections/federated-login.ts';
import type { AppContext } from '../context.ts';
import { InputError } from '../input-error.ts';
import { single, type RawParams } from '../protocol/params.ts';
import { notify, recentLoginOrRefuse, SECURITY_PATH } from './account-changes.ts';
import { PageRefusal } from './errors.ts';
import { requireFormBody } from './helpers.ts';
import { safeNext } from './next.ts';
import { navigation, page, toLogin } from './pages.ts';
import { secondStepUrl, setPendingCookie } from './second-factor.ts';
import {
  cookieOptions,
  currentLogin,
  formToken,
  pendingCookieName,
  pendingIdentityCookieName,
  renewCsrfSecret,
  sessionToken,
  setSessionCookie,
  upstreamCookieName,
} from './session.ts';

export const LINK_PATH = '/login/connections/link';

/** What the person reads when a login through `name` is refused or fails: plain words, never the provider's text. */
const FAILURES: Record<UpstreamFailure['kind'] | Extract<FederatedOutcome, { kind: 'refused' }>['reason'], (name: string) => string> = {
  denied: (name) => `${name} did not let you log in (the request was denied or cancelled).`,
  state: (name) => `This answer from ${name} cannot be used: it was used already, it is too old, or it was started in another browser. Start the login again.`,
  invalid: (name) => `${name} answered in a way Gatehouse cannot trust, so you were not logged in.`,
  unreachable: (name) => `${name} could not be reached, or answered too slowly or too much. Try again in a moment.`,
  account_disabled: () => 'This account is disabled. Ask an administrator.',
  no_account: (name) => `There is no account for your ${name} identity here, and this connection does not create accounts. Ask an administrator.`,
  linked_elsewhere: (name) => `That ${name} identity is already connected to another account.`,
  has_other_identity: (name) => `Your account is already connected to another ${name} identity. Disconnect it first.`,
  connection_disabled: (name) => `Logging in with ${name} is not available right now.`,
  connect_ended: (name) =>
    `Connecting ${name} was not finished: you are no longer logged in as the person who started it, or not recently enough. ` +
    'Start again from your security page.',
};

export default async function connectionRoutes(app: FastifyInstance, { ctx }: { ctx: AppContext }) {
  /** The connection of the URL, enabled; refused with a page otherwise. */
  async function enabledConnection(request: FastifyRequest): Promise<Connection> {
    const { id } = request.params as { id: string };
    let connection: Connection;
    try {
      connection = await connectionNamed(ctx, id);
    } catch (error) {
      if (error instanceof InputError) throw new PageRefusal(404, 'There is no such way to log in.', 'unknown connection');
      throw error;
    }
    if (connection.enabled !== 1) throw new PageRefusal(403, FAILURES.connection_disabled(connection.name), 'connection disabled');
    return connection;
  }

  /** Sends the browser to the provider, bound to this browser. */
  async function toProvider(request: FastifyRequest, reply: FastifyReply, connection: Connection, p: Parameters<typeof beginUpstreamLogin>[2]) {
    try {
      const start = await beginUpstreamLogin(ctx, connection, p);
      reply.setCookie(upstreamCookieName(ctx), start.binding, { ...cookieOptions(ctx), maxAge: UPSTREAM_LOGIN_TTL_MS / 1000 });
      reply.header('Cache-Control', 'no-store');
      return reply.redirect(start.url.href, 303);
    } catch (error) {
      if (!(error instanceof UpstreamFailure)) throw error;
      return failed(request, reply, connection, error, p.next);
    }
  }

  /** The page a failed login ends on: names the provider, offers to try again; audited, never with the provider's tokens. */
  async function failed(request: FastifyRequest, reply: FastifyReply, connection: Connection, failure: UpstreamFailure, next: string) {
    await ctx.audit({
      type: 'upstream_login_failed',
      userId: null,
      address: request.ip,
      detail: { connection: connection.id, kind: failure.kind, reason: failure.reason },
    });
    request.log.info(
      { event: 'upstream_login_failed', connection: connection.id, kind: failure.kind, reason: failure.reason },
      'login through a connection failed',
    );
    return refusal(reply, connection, FAILURES[failure.kind](connection.name), next, failure.kind === 'unreachable' ? 502 : 400);
  }

  function refusal(reply: FastifyReply, connection: Connection, message: string, next: string, status: number) {
    reply.header('Cache-Control', 'no-store');
    return reply.code(status).view('connection-failed.eta', {
      title: `Log in with ${connection.name}`,
      message,
      retry: `/login/connections/${encodeURIComponent(connection.id)}?${new URLSearchParams({ next })}`,
      back: `/login?${new URLSearchParams({ next })}`,
      name: connection.name,
    });
  }

  app.get('/login/connections/:id', page, async (request, reply) => {
    const connection = await enabledConnection(request);
    const query = request.query as RawParams;
    const next = safeNext(single(query, 'next'), ctx.config.publicUrl);
    const loginHint = single(query, 'login_hint')?.slice(0, 320);
    return toProvider(request, reply, connection, {
      binding: request.cookies[upstreamCookieName(ctx)],
      next,
      loginHint,
      fresh: single(query, 'reauth') !== undefined,
    });
  });

  app.get('/login/connections/:id/callback', page, async (request, reply) => {
    const connection = await enabledConnection(request);
    // Each parameter once (a repeated one is invalid_request, as everywhere).
    const raw = request.query as RawParams;
    const query = new URLSearchParams(Object.keys(raw).map((name): [string, string] => [name, single(raw, name) ?? '']));
    let result;
    try {
      result = await finishUpstreamLogin(ctx, connection, query, request.cookies[upstreamCookieName(ctx)]);
    } catch (error) {
      if (!(error instanceof UpstreamFailure)) throw error;
      return failed(request, reply, connection, error, '/');
    }
    const outcome = await federatedLogin(ctx, connection, {
      identity: result.identity,
      linkUserId: result.linkUserId,
      signedIn: await currentLogin(request, ctx),
      address: request.ip,
      previousSession: sessionToken(request, ctx),
      tokens: result.tokens,
    });
    reply.header('Cache-Control', 'no-store');
    switch (outcome.kind) {
      case 'session':
        setSessionCookie(reply, ctx, outcome.session);
        reply.clearCookie(pendingCookieName(ctx), cookieOptions(ctx));
        renewCsrfSecret(reply, ctx);
        request.log.info({ event: 'login', user: outcome.user.id, connection: connection.id }, 'logged in through a connection');
        return reply.redirect(result.next, 303);
      case 'second_step':
        setPendingCookie(reply, ctx, outcome.pending);
        request.log.info({ event: 'login_second_step', user: outcome.user.id, connection: connection.id }, 'upstream login accepted, second step next');
        return reply.redirect(secondStepUrl(outcome.next, result.next), 303);
      case 'linked':
        notify(reply, ctx, outcome.user.id, 'identity-linked');
        return reply.redirect(SECURITY_PATH, 303);
      case 'account_exists':
        reply.setCookie(pendingIdentityCookieName(ctx), outcome.pendingIdentity, { ...cookieOptions(ctx), maxAge: PENDING_IDENTITY_TTL_MS / 1000 });
        return reply.view('connection-account-exists.eta', {
          title: `Log in with ${connection.name}`,
          name: connection.name,
          login: `/login?${new URLSearchParams({ switch: '1', next: LINK_PATH })}`,
        });
      case 'refused':
        return refusal(reply, connection, FAILURES[outcome.reason](connection.name), result.next, 403);
    }
  });

  /** Confirming the link of an identity set aside because its email belongs to this account. */
  app.get(LINK_PATH, page, async (request, reply) => {
    reply.header('Cache-Control', 'no-store');
    const signedIn = await currentLogin(request, ctx);
    if (!signedIn) return toLogin(request, reply, LINK_PATH);
    const pending = await pendingIdentity(ctx, request.cookies[pendingIdentityCookieName(ctx)]);
    if (pending === null) return reply.redirect(SECURITY_PATH, 303);
    navigation(request, reply, signedIn.user);
    return reply.view('connection-link.eta', {
      title: `Connect ${pending.connection_name}`,
      name: pending.connection_name,
      email: pending.email,
      username: signedIn.user.username,
      csrfToken: formToken(reply),
    });
  });

  app.post(LINK_PATH, { ...page, preHandler: app.csrfProtection }, async (request, reply) => {
    requireFormBody(request);
    const signedIn = await currentLogin(request, ctx);
    if (!signedIn) throw new PageRefusal(401, 'You are not logged in. Log in and try again.', 'no session');
    const token = request.cookies[pendingIdentityCookieName(ctx)];
    reply.clearCookie(pendingIdentityCookieName(ctx), cookieOptions(ctx));
    if (!(await confirmPendingIdentity(ctx, token, signedIn, request.ip)))
      throw new PageRefusal(
        400,
        'That identity can no longer be connected: log in with it again to start over.',
        'pending identity gone or older than the login',
      );
    notify(reply, ctx, signedIn.user.id, 'identity-linked');
    return reply.redirect(SECURITY_PATH, 303);
  });

  app.post(`${SECURITY_PATH}/connections/:id/connect`, { ...page, preHandler: app.csrfProtection }, async (request, reply) => {
    requireFormBody(request);
    const recent = await recentLoginOrRefuse(request, ctx);
    const connection = await enabledConnection(request);
    return toProvider(request, reply, connection, { binding: request.cookies[upstreamCookieName(ctx)], next: SECURITY_PATH, linkUserId: recent.user.id });
  });

  app.post(`${SECURITY_PATH}/connections/:id/disconnect`, { ...page, preHandler: app.csrfProtection }, async (request, reply) => {
    requireFormBody(request);
    const recent = await recentLoginOrRefuse(request, ctx);
    const { id } = request.params as { id: string };
    const outcome = await unlinkIdentity(ctx, recent.user, id, {
      actor: { userId: recent.user.id, address: request.ip },
      mustKeepAWay: true,
      keepSession: sessionToken(request, ctx),
    });
    if (outcome === 'last_way') {
      const another = ctx.config.webauthn === null ? 'connect another identity' : 'add a passkey or connect another identity';
      throw new PageRefusal(400, `This is your only way to log in: ${another} before you disconnect it.`, 'last way to log in');
    }
    if (outcome === 'unlinked') notify(reply, ctx, recent.user.id, 'identity-unlinked');
    return reply.redirect(SECURITY_PATH, 303);
  });
}
