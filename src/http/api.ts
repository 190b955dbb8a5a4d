/** The resource side: the bearer-authenticated profile and endpoint discovery. */
import type { FastifyInstance } from 'fastify';
import { accountUri, type Config } from '../config.ts';
import { authenticateAccessToken, bearerToken, requireScope } from '../oauth/bearer.ts';
import type { AppContext } from '../context.ts';
import { splitScopes } from '../oauth/scopes.ts';
import { rejectOtherMethods } from './helpers.ts';
import { TAGS, oauthError } from './schemas.ts';

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
  app.get('/api/profile', { schema: profileRouteSchema }, async (request, reply) => {
    reply.header('Cache-Control', 'no-store');
    const token = await authenticateAccessToken(ctx, bearerToken(request.headers.authorization));
    const scopes = splitScopes(token.scopes);
    requireScope(scopes, 'annotation:read');
    return {
      userid: token.username === null ? null : accountUri(token.username, ctx.config),
      username: token.username,
      display_name: token.display_name || undefined, // left out of the answer when empty
      client_id: token.client_id,
      scopes,
    };
  });

  app.get('/api/links', { schema: { tags: [TAGS.discovery], summary: 'Endpoint discovery for clients that read links', response: linksSchema } }, async () => ({
    'oauth.authorize': `${ctx.config.publicUrl}/oauth/authorize`,
    'oauth.revoke': `${ctx.config.publicUrl}/oauth/revoke`,
    websocket: websocketUrl(ctx.config),
  }));

  rejectOtherMethods(app, ['/api/profile', '/api/links'], 'GET');
}
