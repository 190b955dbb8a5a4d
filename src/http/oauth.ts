/**
 * The OAuth endpoints: authorization (with the consent page), token, revocation,
 * introspection and the server metadata. Parsing and response shaping only; decisions live
 * in src/oauth/.
 *
 * Every schema here is documentation for OpenAPI (http/schemas.ts), not validation: with
 * `...PARAMETERS_CHECKED_BY_PROTOCOL` the protocol code checks the parameters itself and
 * answers with OAuth's own errors.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import {
  AUTHORIZATION_PARAMETERS,
  approve,
  checkRequest,
  decide,
  issueCode,
  redirectUrl,
  resolveTarget,
  responseParams,
  type AuthorizationRequest,
  type AuthorizationTarget,
} from '../oauth/authorize.ts';
import { authenticateClient, claimedClientId } from '../oauth/client-auth.ts';
import type { AppContext } from '../context.ts';
import { OAuthError, invalidRequest } from '../oauth/errors.ts';
import { GRANTS, GRANT_TYPES } from '../oauth/grants/index.ts';
import { serverMetadata } from '../oauth/metadata.ts';
import { single, type RawParams } from '../oauth/params.ts';
import { originOf } from '../oauth/redirect-uri.ts';
import { introspect } from '../oauth/introspection.ts';
import { revokeToken } from '../oauth/revocation.ts';
import { SCOPE_DESCRIPTIONS } from '../oauth/scopes.ts';
import type { User } from '../store/schema.ts';
import { requireFormBody, rejectOtherMethods } from './helpers.ts';
import { PARAMETERS_CHECKED_BY_PROTOCOL, authorizeSchema, introspectSchema, metadataSchema, revokeSchema, tokenSchema } from './schemas.ts';
import { popupCancel } from './popup.ts';
import { currentUser } from './session.ts';

export default async function oauthRoutes(app: FastifyInstance, { ctx }: { ctx: AppContext }) {
  app.get('/.well-known/oauth-authorization-server', { schema: metadataSchema }, async () => serverMetadata(ctx.config));

  app.get('/oauth/authorize', { config: { page: true }, schema: authorizeSchema, ...PARAMETERS_CHECKED_BY_PROTOCOL }, async (request, reply) => {
    return authorize(request, reply, request.query as RawParams, null);
  });

  // The consent form posts back the request's parameters plus the user's decision.
  app.post('/oauth/authorize', { config: { page: true }, preHandler: app.csrfProtection }, async (request, reply) => {
    const body = requireFormBody(request);
    const decision = single(body, 'decision');
    if (decision !== 'approve' && decision !== 'deny') throw invalidRequest('the form did not say whether to authorize');
    return authorize(request, reply, body, decision);
  });

  async function authorize(request: FastifyRequest, reply: FastifyReply, raw: RawParams, decision: 'approve' | 'deny' | null) {
    reply.header('Cache-Control', 'no-store');
    const target = await resolveTarget(raw, ctx); // errors render a page
    let authorization: AuthorizationRequest;
    try {
      authorization = checkRequest(raw, target, ctx.config);
      const user = await currentUser(request, ctx);
      const next = await decide(authorization, user, ctx);
      if (next.kind === 'login') return reply.redirect(loginUrl(request, authorization));
      if (decision === 'deny') return respond(reply, target, { error: 'access_denied', error_description: 'the user denied the request' });
      if (next.kind === 'consent' && decision === null) return consentPage(request, reply, authorization, user!, raw);
      const code = decision === 'approve' ? await approve(authorization, user!, ctx, request.ip) : await issueCode(authorization, user!, ctx, request.ip);
      return respond(reply, target, { code });
    } catch (error) {
      if (!(error instanceof OAuthError) || error.status >= 500) throw error;
      if (error.detail) request.log.info({ error: error.error, detail: error.detail }, 'authorization refused');
      return respond(reply, target, { error: error.error, error_description: error.description });
    }
  }

  /** After login, come back to the same request (without `prompt=login`, or it would loop). */
  function loginUrl(request: FastifyRequest, authorization: AuthorizationRequest): string {
    const again = new URL(request.url, ctx.config.publicUrl);
    if (request.method === 'POST') {
      for (const name of AUTHORIZATION_PARAMETERS) again.searchParams.delete(name);
      const body = request.body as RawParams;
      for (const name of AUTHORIZATION_PARAMETERS) {
        const value = body[name];
        if (typeof value === 'string') again.searchParams.set(name, value);
      }
    }
    const prompt = [...authorization.prompt].filter((p) => p !== 'login');
    if (prompt.length > 0) again.searchParams.set('prompt', prompt.join(' '));
    else again.searchParams.delete('prompt');
    const next = again.pathname + again.search;
    return `/login?${new URLSearchParams({ next, ...(authorization.prompt.has('login') ? { switch: '1' } : {}) })}`;
  }

  function consentPage(request: FastifyRequest, reply: FastifyReply, authorization: AuthorizationRequest, user: User, raw: RawParams) {
    const hidden = AUTHORIZATION_PARAMETERS.flatMap((name) => (typeof raw[name] === 'string' ? [{ name, value: raw[name] }] : []));
    const here = new URL(request.url, ctx.config.publicUrl);
    return reply.view('consent.eta', {
      title: `Authorize ${authorization.client.name}`,
      client: authorization.client,
      user,
      scopes: authorization.scopes.map((scope) => ({ scope, description: SCOPE_DESCRIPTIONS[scope] })),
      hidden,
      csrfToken: reply.generateCsrf(),
      popup: authorization.responseMode === 'web_message' ? popupCancel(authorization) : null,
      switchNext: here.pathname + here.search,
      redirectHost: new URL(authorization.redirectUri).host,
    });
  }

  /** Sends the authorization response: a redirect, or for popups a page posting it to the opener. */
  function respond(reply: FastifyReply, target: AuthorizationTarget, result: Record<string, string>) {
    const params = responseParams(target, ctx.config, result);
    // The code must not leak to third parties through the Referer header (RFC 9700 §4.2.4).
    reply.header('Referrer-Policy', 'no-referrer');
    if (target.responseMode === 'web_message') {
      return reply.view('web-message.eta', { title: 'Returning to the application', popup: popupData(target, params) });
    }
    return reply.redirect(redirectUrl(target, params), 302);
  }

  /**
   * What the popup page posts to `window.opener`, and to which origin: always the registered
   * redirect URL's origin, never one taken from the request.
   */
  function popupData(target: AuthorizationTarget, params: Record<string, string>) {
    const { error, error_description, code } = params;
    const message =
      error === 'access_denied'
        ? { type: 'authorization_canceled', state: target.state }
        : { type: 'authorization_response', ...(code ? { code } : { error, error_description }), state: target.state };
    return { origin: originOf(target.redirectUri), message: JSON.stringify(message) };
  }

  app.post('/api/token', { schema: tokenSchema, ...PARAMETERS_CHECKED_BY_PROTOCOL }, async (request, reply) => {
    reply.header('Cache-Control', 'no-store').header('Pragma', 'no-cache');
    const params = requireFormBody(request);
    const grantType = single(params, 'grant_type');
    if (grantType === undefined) throw invalidRequest('the "grant_type" parameter is missing');
    const grant = GRANTS.get(grantType);
    if (!grant) throw new OAuthError('unsupported_grant_type', `supported grant types are ${GRANT_TYPES.join(', ')}`);
    await ctx.services.throttle.tokenRequest(claimedClientId(request.headers.authorization, params), request.ip);
    const client = await authenticateClient(ctx.db, request.headers.authorization, params);
    return grant.handle(params, client, ctx, request.ip);
  });

  app.post('/oauth/revoke', { schema: revokeSchema, ...PARAMETERS_CHECKED_BY_PROTOCOL }, async (request, reply) => {
    reply.header('Cache-Control', 'no-store');
    const params = requireFormBody(request);
    const client = await authenticateClient(ctx.db, request.headers.authorization, params);
    await revokeToken(params, client, ctx, request.ip);
    return {};
  });

  app.post('/oauth/introspect', { schema: introspectSchema, ...PARAMETERS_CHECKED_BY_PROTOCOL }, async (request, reply) => {
    reply.header('Cache-Control', 'no-store');
    const params = requireFormBody(request);
    const client = await authenticateClient(ctx.db, request.headers.authorization, params);
    return introspect(params, client, ctx);
  });

  rejectOtherMethods(app, ['/api/token', '/oauth/revoke', '/oauth/introspect'], 'POST');
  rejectOtherMethods(app, ['/.well-known/oauth-authorization-server'], 'GET');
}
