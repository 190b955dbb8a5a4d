/**
 * The real-time API: a WebSocket at /ws (SPEC §4.4). The access token is checked before
 * the upgrade, so an invalid one gets a plain 401. A socket lives no longer than its token:
 * it is closed with code 4001 as soon as its grant is revoked on any instance (the
 * fan-out delivers that here) and, within two seconds, when the token expires or is
 * revoked in a way the bus never carried — by the command line on SQLite, or while Redis or
 * the PostgreSQL listener reconnects — by re-checking every open socket's token each second.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import websocket from '@fastify/websocket';
import type { WebSocket } from 'ws';
import { accountUri } from '../config.ts';
import { jobLog } from '../events/job-log.ts';
import { authenticateAccessToken, liveAccessTokens } from '../oauth/bearer.ts';
import type { AppContext } from '../context.ts';
import { OAuthError, invalidRequest } from '../protocol/errors.ts';
import { single, type RawParams } from '../protocol/params.ts';
import { hashIfWellFormed } from '../tokens.ts';
import { PARAMETERS_CHECKED_BY_PROTOCOL, TAGS, oauthError } from './schemas.ts';
import { presentedTokenOf } from './helpers.ts';
import { websocketUrl } from './api.ts';
/** Close code for "your token is no longer valid": the client should refresh and reconnect. */
export const TOKEN_INVALID_CLOSE_CODE = 4001;
/** RFC 6455's close code for a policy breach: here, the message rate. */
const POLICY_VIOLATION_CLOSE_CODE = 1008;
/** The limits of SPEC §4.4. Sockets are counted per instance. */
const SOCKETS_PER_GRANT = 20;
const MAX_MESSAGE_BYTES = 16 * 1024;
const MESSAGES_PER_WINDOW = 100;
const MESSAGE_WINDOW_MS = 10_000;
/** Tokens of open sockets are re-checked this often: a socket outlives its token by two seconds at most. */
const LIVENESS_CHECK_MS = 1000;
const HEARTBEAT_MS = 30_000;

const websocketSchema = {
  tags: [TAGS.resource],
  summary: 'The real-time API (WebSocket)',
  description:
    'Upgrade with the access token in `Authorization: Bearer` or, from browsers, `access_token`. JSON messages: `{"type":"whoami","id":1}` ' +
    'answers `{"type":"whoyouare","reply_to":1,"ok":true,"userid":…}`. Closed with code 4001 when the token expires or is revoked. ' +
    `At most ${SOCKETS_PER_GRANT} sockets per grant; a message over ${MAX_MESSAGE_BYTES / 1024} KiB closes the socket with 1009, ` +
    `more than ${MESSAGES_PER_WINDOW} messages in ${MESSAGE_WINDOW_MS / 1000} seconds with 1008.`,
  security: [{ bearer: [] }, {}],
  querystring: { type: 'object', properties: { access_token: { type: 'string', description: 'the access token, for clients that cannot send headers' } } },
  response: {
    101: { description: 'Switching Protocols: the WebSocket is open', type: 'null' },
    400: oauthError('`invalid_request`: the token was sent twice', ['invalid_request']),
    401: oauthError('`invalid_token`: missing, unknown, expired or revoked; refused before the upgrade', ['invalid_token']),
    426: oauthError('`invalid_request`: a plain GET, not a WebSocket upgrade', ['invalid_request']),
    429: oauthError(`\`temporarily_unavailable\`: the grant already holds ${SOCKETS_PER_GRANT} open sockets; refused before the upgrade`, [
      'temporarily_unavailable',
    ]),
  },
} as const;

/** What an open socket stands on. */
interface OpenSocket {
  grantId: string;
  tokenHash: string;
  expiresAt: number;
}

interface Admitted extends OpenSocket {
  username: string | null;
}

export default async function wsRoutes(app: FastifyInstance, { ctx }: { ctx: AppContext }) {
  // ws itself closes a socket with 1009 (message too big) when a message exceeds maxPayload.
  await app.register(websocket, { options: { maxPayload: MAX_MESSAGE_BYTES } });
  const open = new Map<WebSocket, OpenSocket>();
  /** Sockets per grant, counted from the admission of the upgrade until its connection closes. */
  const socketsPerGrant = new Map<string, number>();
  const admitted = new WeakMap<FastifyRequest, Admitted>();

  const closeSocketsOf = (isGone: (held: OpenSocket) => boolean, reason: string) => {
    for (const [socket, held] of open) if (isGone(held)) socket.close(TOKEN_INVALID_CLOSE_CODE, reason);
  };

  ctx.services.bus.subscribe((grantIds) => {
    const revoked = new Set(grantIds);
    closeSocketsOf((held) => revoked.has(held.grantId), 'token revoked');
  });

  // The database decides what the bus may have missed: one query a second while sockets are open, none otherwise.
  let nextCheck: NodeJS.Timeout | undefined;
  let checking: Promise<void> | undefined;
  let stopped = false;
  const scheduleLivenessCheck = () => {
    if (nextCheck || checking || stopped || open.size === 0) return;
    nextCheck = setTimeout(() => {
      nextCheck = undefined;
      checking = closeDeadSockets().finally(() => {
        checking = undefined;
        scheduleLivenessCheck();
      });
    }, LIVENESS_CHECK_MS).unref();
  };
  const recheck = jobLog(app.log, "re-checking the open sockets' tokens");
  const closeDeadSockets = async () => {
    const now = ctx.now();
    // Expiry needs no query, so it holds even while the database is unreachable.
    closeSocketsOf((held) => held.expiresAt <= now, 'token expired');
    const checked = new Set(Array.from(open.values(), (held) => held.tokenHash));
    try {
      const live = await liveAccessTokens(ctx, [...checked]);
      closeSocketsOf((held) => checked.has(held.tokenHash) && !live.has(held.tokenHash), 'token revoked');
      recheck.succeeded();
    } catch (error) {
      recheck.failed(error as Error);
    }
  };

  // Protocol-level pings find dead peers, so their sockets do not pile up.
  const alive = new WeakSet<WebSocket>();
  const heartbeat = setInterval(() => {
    for (const socket of open.keys()) {
      if (!alive.has(socket)) socket.terminate();
      else {
        alive.delete(socket);
        socket.ping();
      }
    }
  }, HEARTBEAT_MS).unref();
  app.addHook('onClose', async () => {
    stopped = true;
    clearInterval(heartbeat);
    clearTimeout(nextCheck);
    await checking;
  });

  app.route({
    method: 'GET',
    url: '/ws',
    schema: websocketSchema,
    ...PARAMETERS_CHECKED_BY_PROTOCOL,
    preValidation: async (request) => {
      const query = request.query as RawParams;
      const fromQuery = single(query, 'access_token');
      // A proof names the socket's URL under either scheme: the handshake's (http) or the one connected to (ws).
      const fromHeader = presentedTokenOf(request, [`${ctx.config.publicUrl}/ws`, websocketUrl(ctx.config)]);
      if (fromQuery !== undefined && fromHeader !== undefined)
        throw invalidRequest('send the access token once: in the Authorization header or the access_token parameter');
      const presented = fromHeader ?? (fromQuery === undefined ? undefined : { token: fromQuery });
      const info = await authenticateAccessToken(ctx, presented);
      if (!request.ws) return; // answered 426 by the handler; holds no place
      // Counted from here, with no await between the check and the count, so that
      // simultaneous upgrades cannot all pass; given back when the connection closes,
      // whether or not the upgrade went through.
      const grantId = info.grant_id;
      const count = socketsPerGrant.get(grantId) ?? 0;
      if (count >= SOCKETS_PER_GRANT)
        throw new OAuthError('temporarily_unavailable', `this grant already holds ${SOCKETS_PER_GRANT} open sockets: close one first`, undefined, 429);
      socketsPerGrant.set(grantId, count + 1);
      request.raw.socket.once('close', () => {
        const left = socketsPerGrant.get(grantId)! - 1;
        if (left === 0) socketsPerGrant.delete(grantId);
        else socketsPerGrant.set(grantId, left);
      });
      admitted.set(request, { grantId, tokenHash: hashIfWellFormed('access', presented!.token)!, expiresAt: info.expires_at, username: info.username });
    },
    // Only an upgrade opens a socket: a plain GET is told so (426), not sent a 404.
    handler: async () => {
      throw new OAuthError('invalid_request', 'connect with a WebSocket upgrade', undefined, 426);
    },
    wsHandler: (socket, request) => {
      const { username, ...held } = admitted.get(request)!;
      open.set(socket, held);
      alive.add(socket);
      scheduleLivenessCheck();
      const tooFast = messageRateLimit();

      socket.on('pong', () => alive.add(socket));
      socket.on('close', () => open.delete(socket));
      socket.on('message', (data, isBinary) => {
        if (socket.readyState !== socket.OPEN) return; // closing: what is still in flight goes unanswered
        if (tooFast()) {
          socket.close(POLICY_VIOLATION_CLOSE_CODE, `more than ${MESSAGES_PER_WINDOW} messages in ${MESSAGE_WINDOW_MS / 1000} seconds`);
          return;
        }
        const message = isBinary ? null : parseMessage(String(data));
        if (message?.type === 'whoami') {
          const userid = username === null ? null : accountUri(username, ctx.config);
          socket.send(JSON.stringify({ type: 'whoyouare', reply_to: message.id, ok: true, userid }));
        } else if (message?.type === 'ping') {
          socket.send(JSON.stringify({ type: 'pong', reply_to: message.id, ok: true }));
        } else {
          socket.send(
            JSON.stringify({ type: 'error', reply_to: message?.id, ok: false, error: { message: 'unsupported message: send {"type":"whoami","id":1}' } }),
          );
        }
      });
    },
  });
}

/** A sliding window over a socket's last messages: true when one more would exceed the rate. */
function messageRateLimit(): () => boolean {
  const times: number[] = [];
  return () => {
    const now = performance.now();
    if (times.length === MESSAGES_PER_WINDOW) {
      if (now - times[0]! < MESSAGE_WINDOW_MS) return true;
      times.shift();
    }
    times.push(now);
    return false;
  };
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
