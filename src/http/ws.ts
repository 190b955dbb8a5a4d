/**
 * The real-time API: a WebSocket at /ws (SPEC §4.4). The access token is checked before
 * the upgrade, so an invalid one gets a plain 401. A socket lives no longer than its token:
 * it is closed with code 4001 when the token expires, or as soon as its grant is revoked on
 * any instance (the revocation bus delivers that here).
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import websocket from '@fastify/websocket';
import type { WebSocket } from 'ws';
import { userId } from '../accounts/users.ts';
import { authenticateAccessToken, bearerToken, type AccessTokenInfo } from '../oauth/bearer.ts';
import type { AppContext } from '../context.ts';
import { OAuthError, invalidRequest } from '../oauth/errors.ts';
import { single, type RawParams } from '../oauth/params.ts';
import { PARAMETERS_CHECKED_BY_PROTOCOL, TAGS, oauthError } from './schemas.ts';

/** Close code for "your token is no longer valid": the client should refresh and reconnect. */
export const TOKEN_INVALID_CLOSE_CODE = 4001;
const HEARTBEAT_MS = 30_000;

const websocketSchema = {
  tags: [TAGS.resource],
  summary: 'The real-time API (WebSocket)',
  description:
    'Upgrade with the access token in `Authorization: Bearer` or, from browsers, `access_token`. JSON messages: `{"type":"whoami","id":1}` ' +
    'answers `{"type":"whoyouare","reply_to":1,"ok":true,"userid":…}`. Closed with code 4001 when the token expires or is revoked.',
  security: [{ bearer: [] }, {}],
  querystring: { type: 'object', properties: { access_token: { type: 'string', description: 'the access token, for clients that cannot send headers' } } },
  response: {
    101: { description: 'Switching Protocols: the WebSocket is open', type: 'null' },
    400: oauthError('`invalid_request`: the token was sent twice', ['invalid_request']),
    401: oauthError('`invalid_token`: missing, unknown, expired or revoked; refused before the upgrade', ['invalid_token']),
    426: oauthError('`invalid_request`: a plain GET, not a WebSocket upgrade', ['invalid_request']),
  },
} as const;

export default async function wsRoutes(app: FastifyInstance, { ctx }: { ctx: AppContext }) {
  await app.register(websocket, { options: { maxPayload: 64 * 1024 } });
  const socketsByGrant = new Map<string, Set<WebSocket>>();
  const tokens = new WeakMap<FastifyRequest, AccessTokenInfo>();

  ctx.services.bus.subscribe((grantIds) => {
    for (const grantId of grantIds) {
      for (const socket of socketsByGrant.get(grantId) ?? []) socket.close(TOKEN_INVALID_CLOSE_CODE, 'token revoked');
    }
  });

  // Protocol-level pings find dead peers, so their sockets do not pile up.
  const alive = new WeakSet<WebSocket>();
  const heartbeat = setInterval(() => {
    for (const sockets of socketsByGrant.values()) {
      for (const socket of sockets) {
        if (!alive.has(socket)) socket.terminate();
        else {
          alive.delete(socket);
          socket.ping();
        }
      }
    }
  }, HEARTBEAT_MS).unref();
  app.addHook('onClose', async () => clearInterval(heartbeat));

  app.route({
    method: 'GET',
    url: '/ws',
    schema: websocketSchema,
    ...PARAMETERS_CHECKED_BY_PROTOCOL,
    preValidation: async (request) => {
      const query = request.query as RawParams;
      const fromQuery = single(query, 'access_token');
      const fromHeader = bearerToken(request.headers.authorization);
      if (fromQuery !== undefined && fromHeader !== undefined) throw invalidRequest('send the access token once: in the Authorization header or the access_token parameter');
      tokens.set(request, await authenticateAccessToken(ctx, fromHeader ?? fromQuery));
    },
    // Only an upgrade opens a socket: a plain GET is told so (426), not sent a 404.
    handler: async () => {
      throw new OAuthError('invalid_request', 'connect with a WebSocket upgrade', undefined, 426);
    },
    wsHandler: (socket, request) => {
      const token = tokens.get(request)!;
      let sockets = socketsByGrant.get(token.grant_id);
      if (!sockets) socketsByGrant.set(token.grant_id, (sockets = new Set()));
      sockets.add(socket);
      alive.add(socket);

      const expiry = setTimeout(() => socket.close(TOKEN_INVALID_CLOSE_CODE, 'token expired'), Math.max(0, token.expires_at - ctx.now()));
      socket.on('pong', () => alive.add(socket));
      socket.on('close', () => {
        clearTimeout(expiry);
        sockets.delete(socket);
        if (sockets.size === 0) socketsByGrant.delete(token.grant_id);
      });
      socket.on('message', (data, isBinary) => {
        const message = isBinary ? null : parseMessage(String(data));
        if (message?.type === 'whoami') {
          const userid = token.username === null ? null : userId(token.username, ctx.config);
          socket.send(JSON.stringify({ type: 'whoyouare', reply_to: message.id, ok: true, userid }));
        } else if (message?.type === 'ping') {
          socket.send(JSON.stringify({ type: 'pong', reply_to: message.id, ok: true }));
        } else {
          socket.send(JSON.stringify({ type: 'error', reply_to: message?.id, ok: false, error: { message: 'unsupported message: send {"type":"whoami","id":1}' } }));
        }
      });
    },
  });
}

function parseMessage(text: string): { type: unknown; id: unknown } | null {
  try {
    const value: unknown = JSON.parse(text);
    if (typeof value !== 'object' || value === null || Array.isArray(value)) return null;
    const { type, id } = value as Record<string, unknown>;
    return { type, id: typeof id === 'number' || typeof id === 'string' ? id : undefined };
  } catch {
    return null;
  }
}
