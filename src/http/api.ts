/** The resource side: the bearer-authenticated profile, OpenID Connect userinfo, and endpoint discovery. */
import type { FastifyInstance } from 'fastify';
import { accountUri, type Config } from '../config.ts';
import { authenticateAccessToken, requireScope } from '../oauth/bearer.ts';
import { USERINFO_PATH } from '../oauth/metadata.ts';
import { userinfo } from '../oauth/userinfo.ts';
import type { RawParams } from '../protocol/params.ts';
import type { AppContext } from '../context.ts';
import { splitScopes } from '../oauth/scopes.ts';
import { presentedTokenOf, rejectOtherMethods } from './helpers.ts';

const PROFILE_PATH = '/api/profile';
import { formBody, TAGS, oauthError } from './schemas.ts';

const profileSchema = {
  200: {
    description: "The token's user (`null` for a client-credentials token), client and scopes",
    type: 'object',
    properties: {
      userid: { type: ['string', 'null'] },
      username: { type: ['string', 'null'] },
      display_name: { type: 'string' },
      client_id: { type: 'string' },
      scopes: { type: 'array', items: { type: 'string' } },
    },
  },
} as const;

const bearerErrors = {
  401: oauthError('`invalid_token`: missing, unknown, expired or revoked (with `WWW-Authenticate: Bearer`, RFC 6750 §3.1)', ['invalid_token']),
  403: oauthError('`insufficient_scope`: the token lacks `annotation:read`', ['insufficient_scope']),
} as const;

const profileRouteSchema = {
  tags: [TAGS.resource],
  summary: "The profile of the access token's user",
  security: [{ bearer: [] }],
  response: { ...profileSchema, ...bearerErrors },
};

const userinfoSchema = {
  tags: [TAGS.resource],
  summary: "OpenID Connect userinfo (OIDC Core §5.3): the identity claims the token's scopes release",
  security: [{ bearer: [] }],
  response: {
    200: {
      description: '`sub` (the userid) and the claims of the granted identity scopes, as in the ID token; `Cache-Control: no-store`',
      type: 'object',
      required: ['sub'],
      properties: {
        sub: { type: 'string' },
        preferred_username: { type: 'string', description: 'with `profile`' },
        name: { type: 'string', description: 'with `profile`, when a display name is set' },
        email: { type: 'string', description: 'with `email`' },
        email_verified: { type: 'boolean', description: 'with `email`' },
        groups: { type: 'array', items: { type: 'string' }, description: 'with `groups`' },
      },
    },
    401: oauthError('No token (a `Bearer` challenge without an error code), or `invalid_token`: unknown, expired, revoked or for another resource server', [
      'invalid_token',
    ]),
    403: oauthError('`insufficient_scope`: the token lacks `openid`', ['insufficient_scope']),
  },
} as const;

const linksSchema = {
  200: {
    description: 'Absolute URLs of the authorization, revocation and WebSocket endpoints',
    type: 'object',
    required: ['oauth.authorize', 'oauth.revoke', 'websocket'],
    properties: { 'oauth.authorize': { type: 'string' }, 'oauth.revoke': { type: 'string' }, websocket: { type: 'string' } },
  },
} as const;

export function websocketUrl(config: Config): string {
  return `${config.publicUrl.replace(/^http/, 'ws')}/ws`;
}

export default async function apiRoutes(app: FastifyInstance, { ctx }: { ctx: AppContext }) {
  app.get(PROFILE_PATH, { schema: profileRouteSchema }, async (request, reply) => {
    reply.header('Cache-Control', 'no-store');
    const token = await authenticateAccessToken(ctx, presentedTokenOf(request, [`${ctx.config.publicUrl}${PROFILE_PATH}`]));
    const scopes = splitScopes(token.scopes);
    requireScope(token, scopes, 'annotation:read');
    return {
      userid: token.username === null ? null : accountUri(token.username, ctx.config),
      username: token.username,
      display_name: token.display_name || undefined, // left out of the answer when empty
      client_id: token.client_id,
      scopes,
    };
  });

  app.get(USERINFO_PATH, { schema: userinfoSchema }, async (request, reply) => {
    reply.header('Cache-Control', 'no-store');
    return userinfo(ctx, presentedTokenOf(request, [`${ctx.config.publicUrl}${USERINFO_PATH}`]), null);
  });

  app.post(
    USERINFO_PATH,
    { schema: { ...userinfoSchema, body: formBody({ access_token: { type: 'string', description: 'instead of the header' } }) } },
    async (request, reply) => {
      reply.header('Cache-Control', 'no-store');
      const form = typeof request.body === 'object' && request.body !== null ? (request.body as RawParams) : null;
      return userinfo(ctx, presentedTokenOf(request, [`${ctx.config.publicUrl}${USERINFO_PATH}`]), form);
    },
  );

  app.get('/api/links', { schema: { tags: [TAGS.discovery], summary: 'Endpoint discovery for clients that read links', response: linksSchema } }, async () => ({
    'oauth.authorize': `${ctx.config.publicUrl}/oauth/authorize`,
    'oauth.revoke': `${ctx.config.publicUrl}/oauth/revoke`,
    websocket: websocketUrl(ctx.config),
  }));

  rejectOtherMethods(app, [PROFILE_PATH, '/api/links'], 'GET');
  rejectOtherMethods(app, [USERINFO_PATH], 'GET', 'POST');
}
