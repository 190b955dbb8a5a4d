/**
 * The OAuth endpoints: authorization (with the consent page), token, revocation, and the
 * server metadata. Parsing and response shaping only; decisions live in src/oauth/.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { SCOPES } from '../config.ts';
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
import { GRANTS } from '../oauth/grants/index.ts';
import { single, type RawParams } from '../oauth/params.ts';
import { originOf } from '../oauth/redirect-uri.ts';
import { introspect } from '../oauth/introspection.ts';
import { revokeToken } from '../oauth/revocation.ts';
import { SCOPE_DESCRIPTIONS } from '../oauth/scopes.ts';
import type { User } from '../store/schema.ts';
import { requireFormBody, rejectOtherMethods } from './helpers.ts';
import { CLIENT_AUTH_ERRORS, CLIENT_SECURITY, PARAMETERS_CHECKED_BY_PROTOCOL, TAGS, formBody, oauthError } from './openapi.ts';
import { popupCancel } from './popup.ts';
import { currentUser } from './session.ts';

const tokenResponseSchema = {
  200: {
    description: 'The tokens (RFC 6749 §5.1), with `Cache-Control: no-store`; no refresh token for client_credentials',
    type: 'object',
    required: ['token_type', 'access_token', 'expires_in', 'scope'],
    properties: {
      token_type: { type: 'string' },
      access_token: { type: 'string' },
      expires_in: { type: 'integer' },
      refresh_token: { type: 'string' },
      scope: { type: 'string' },
    },
  },
} as const;

/** Only these fields can leave the introspection endpoint (RFC 7662 §2.2). */
const introspectionResponseSchema = {
  200: {
    description: 'The token\'s state (RFC 7662 §2.2): `{"active":false}` alone for anything not live',
    type: 'object',
    required: ['active'],
    properties: {
      active: { type: 'boolean' },
      scope: { type: 'string' },
      client_id: { type: 'string' },
      username: { type: 'string' },
      sub: { type: 'string' },
      token_type: { type: 'string' },
      exp: { type: 'integer' },
      iat: { type: 'integer' },
      iss: { type: 'string' },
    },
  },
} as const;

const metadataSchema = {
  tags: [TAGS.discovery],
  summary: 'Authorization server metadata (RFC 8414)',
  response: {
    200: {
      description: 'The endpoints and what they support; `issuer` is PUBLIC_URL',
      type: 'object',
      additionalProperties: true,
      properties: { issuer: { type: 'string' }, authorization_endpoint: { type: 'string' }, token_endpoint: { type: 'string' }, revocation_endpoint: { type: 'string' } },
    },
  },
} as const;

const authorizeSchema = {
  tags: [TAGS.oauth],
  summary: 'Authorization request (RFC 6749 §4.1.1, PKCE RFC 7636)',
  description:
    'Opened in the person\'s browser (or popup), never fetched. Errors about the client or the redirect URL render a page; ' +
    'every other answer goes to the redirect URL with `state` and `iss` (RFC 9207), or with `response_mode=web_message` is posted to `window.opener`.',
  querystring: {
    type: 'object',
    required: ['client_id', 'response_type'],
    properties: {
      client_id: { type: 'string', description: 'the client ID (a UUID)' },
      redirect_uri: { type: 'string', description: 'exactly the registered redirect URL; the registered one when left out' },
      response_type: { type: 'string', enum: ['code'] },
      state: { type: 'string', description: 'returned unchanged; ties the answer to your request' },
      scope: { type: 'string', description: 'space-separated scopes; default: all the client may have' },
      code_challenge: { type: 'string', description: 'BASE64URL(SHA-256(code_verifier)), 43 characters' },
      code_challenge_method: { type: 'string', enum: ['S256'] },
      response_mode: { type: 'string', enum: ['query', 'web_message'], description: '`web_message`: the popup flow' },
      prompt: { type: 'string', description: 'space-separated: `none`, `login`, `consent`' },
    },
  },
  response: {
    200: { description: 'A page: login, consent, or (popup flow) the page posting the answer to `window.opener`', content: { 'text/html': { schema: { type: 'string' } } } },
    302: { description: 'To the login page, or to the redirect URL with `code`, `state`, `iss` (or `error`, `error_description`, `state`, `iss`)', type: 'null' },
    400: { description: 'An error page: unknown client, or a redirect URL that is not the registered one (never redirected)', content: { 'text/html': { schema: { type: 'string' } } } },
  },
} as const;

const tokenSchema = {
  tags: [TAGS.oauth],
  summary: 'Token request: code exchange, refresh, client credentials (RFC 6749 §4.1.3, §6, §4.4)',
  security: CLIENT_SECURITY,
  body: formBody(
    {
      grant_type: { type: 'string', enum: ['authorization_code', 'refresh_token', 'client_credentials'] },
      code: { type: 'string', description: 'authorization_code: the code from the authorization response' },
      redirect_uri: { type: 'string', description: 'authorization_code: must be the authorization request\'s when sent' },
      code_verifier: { type: 'string', description: 'authorization_code: the PKCE verifier; required when the request had a code_challenge' },
      refresh_token: { type: 'string', description: 'refresh_token: the newest refresh token' },
      scope: { type: 'string', description: 'refresh_token, client_credentials: a subset of what was granted' },
      client_id: { type: 'string', description: 'the client, unless it authenticates with HTTP Basic' },
      client_secret: { type: 'string', description: 'a confidential client\'s secret (client_secret_post), unless it uses HTTP Basic' },
    },
    ['grant_type'],
  ),
  response: {
    ...tokenResponseSchema,
    400: oauthError('A refused request (RFC 6749 §5.2)', ['invalid_request', 'invalid_grant', 'invalid_scope', 'unauthorized_client', 'unsupported_grant_type']),
    ...CLIENT_AUTH_ERRORS,
  },
} as const;

const revokeSchema = {
  tags: [TAGS.oauth],
  summary: 'Revocation (RFC 7009): revokes the token\'s whole grant, both tokens',
  security: CLIENT_SECURITY,
  body: formBody(
    {
      token: { type: 'string', description: 'an access or refresh token' },
      token_type_hint: { type: 'string', description: '`access_token` or `refresh_token`; only decides which is looked up first' },
      client_id: { type: 'string' },
      client_secret: { type: 'string' },
    },
    ['token'],
  ),
  response: {
    200: { description: 'Revoked, or nothing to revoke (unknown tokens succeed too)', type: 'object', properties: {} },
    400: oauthError('A refused request; `unauthorized_client` for another client\'s token', ['invalid_request', 'unauthorized_client']),
    ...CLIENT_AUTH_ERRORS,
  },
} as const;

const introspectSchema = {
  tags: [TAGS.oauth],
  summary: 'Introspection (RFC 7662), for confidential clients',
  security: CLIENT_SECURITY,
  body: formBody(
    {
      token: { type: 'string' },
      token_type_hint: { type: 'string' },
      client_id: { type: 'string', description: 'with client_secret, when not using HTTP Basic' },
      client_secret: { type: 'string' },
    },
    ['token'],
  ),
  response: { ...introspectionResponseSchema, 400: oauthError('A refused request', ['invalid_request']), ...CLIENT_AUTH_ERRORS },
} as const;

export function serverMetadata(ctx: AppContext) {
  const base = ctx.config.publicUrl;
  return {
    issuer: base,
    authorization_endpoint: `${base}/oauth/authorize`,
    token_endpoint: `${base}/api/token`,
    revocation_endpoint: `${base}/oauth/revoke`,
    response_types_supported: ['code'],
    response_modes_supported: ['query', 'web_message'],
    grant_types_supported: ['authorization_code', 'refresh_token', 'client_credentials'],
    token_endpoint_auth_methods_supported: ['none', 'client_secret_basic', 'client_secret_post'],
    revocation_endpoint_auth_methods_supported: ['none', 'client_secret_basic', 'client_secret_post'],
    introspection_endpoint: `${base}/oauth/introspect`,
    introspection_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post'],
    code_challenge_methods_supported: ['S256'],
    scopes_supported: [...SCOPES],
    prompt_values_supported: ['none', 'login', 'consent'],
    authorization_response_iss_parameter_supported: true,
  };
}

export default async function oauthRoutes(app: FastifyInstance, { ctx }: { ctx: AppContext }) {
  app.get('/.well-known/oauth-authorization-server', { schema: metadataSchema }, async () => serverMetadata(ctx));

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
    if (!grant) throw new OAuthError('unsupported_grant_type', `supported grant types are ${[...GRANTS.keys()].join(', ')}`);
    await ctx.services.throttle.tokenRequest(claimedClientId(request.headers.authorization, params), request.ip);
    const client = await authenticateClient(ctx.db, request.headers.authorization, params);
    return grant(params, client, ctx, request.ip);
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
