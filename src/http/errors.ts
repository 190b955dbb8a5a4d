/**
 * Turns every error into a response. OAuth errors become RFC 6749 §5.2 JSON (with the
 * RFC 6750 or Basic challenge where one is due) or, on pages, an error page. Fastify's own
 * 4xx errors become `invalid_request` with a bland description; a database that cannot be
 * used right now is `temporarily_unavailable` (503, Retry-After); anything unexpected is
 * logged and answered as `server_error` without internals.
 */
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { InsufficientScope, NoBearerToken } from '../oauth/bearer.ts';
import { InvalidClient } from '../oauth/client-auth.ts';
import { DpopRefusal, dpopChallenge } from '../oauth/dpop.ts';
import type { AppContext } from '../context.ts';
import { OAuthError } from '../protocol/errors.ts';
import { databaseUnavailable } from '../maintenance.ts';
import { ThrottleUnavailable, Throttled } from '../throttle.ts';

/** What a request that found the database unavailable is told to wait before trying again. */
const DATABASE_RETRY_AFTER_SECONDS = 5;

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Errors on this route render an HTML page instead of JSON. */
    page?: boolean;
  }
}

/**
 * A page's refusal: what the person reads, and its status — not a protocol error, though it
 * travels as one (its code follows from the status) so that logs and metrics count it alike.
 */
export class PageRefusal extends OAuthError {
  override name = 'PageRefusal';
  constructor(status: 400 | 401 | 403 | 404, message: string, detail?: string) {
    super(status === 401 || status === 403 ? 'access_denied' : 'invalid_request', message, detail, status);
  }
}

const CLIENT_ERRORS: Record<number, string> = {
  400: 'the request is malformed',
  403: 'the form has expired or was not sent from this site: go back, reload the page and try again',
  404: 'not found',
  405: 'method not allowed',
  406: 'not acceptable',
  413: 'the request body is too large',
  414: 'the request URL is too long',
  415: 'unsupported content type: send application/x-www-form-urlencoded',
  429: 'too many requests: try again later',
};

function sendError(ctx: AppContext, request: FastifyRequest, reply: FastifyReply, error: OAuthError): FastifyReply {
  ctx.metrics.failure(error.error, error.status);
  if (error.detail) request.log.info({ error: error.error, detail: error.detail }, 'request refused');
  if (error instanceof InvalidClient && error.usedBasic) reply.header('WWW-Authenticate', 'Basic realm="gatehouse", charset="UTF-8"');
  if (error instanceof NoBearerToken) reply.header('WWW-Authenticate', 'Bearer realm="gatehouse"');
  else if (error instanceof DpopRefusal) {
    if (error.side === 'resource') reply.header('WWW-Authenticate', dpopChallenge(error));
    if (error.nonce !== undefined) reply.header('DPoP-Nonce', error.nonce);
  } else if (error.error === 'invalid_token' || error.error === 'insufficient_scope') {
    const scope = error instanceof InsufficientScope ? `, scope="${error.scope}"` : '';
    const dpop = error instanceof InsufficientScope && error.scheme === 'DPoP';
    const challenge = dpop ? dpopChallenge(error) : `Bearer realm="gatehouse", error="${error.error}", error_description="${error.errorDescription}"`;
    reply.header('WWW-Authenticate', challenge + scope);
  }
  reply.header('Cache-Control', 'no-store');
  if (request.routeOptions.config.page) {
    return reply.code(error.status).view('error.eta', { title: 'Something went wrong', message: error.description });
  }
  return reply.code(error.status).send(error.toJSON());
}

export default fp(async function errorHandling(app: FastifyInstance, { ctx }: { ctx: AppContext }) {
  app.setErrorHandler(async (error: FastifyError, request, reply) => {
    if (error instanceof OAuthError) return sendError(ctx, request, reply, error);
    if (error instanceof Throttled) {
      reply.header('Retry-After', String(error.retryAfter));
      return sendError(ctx, request, reply, new OAuthError('temporarily_unavailable', error.message, undefined, error.status));
    }
    if (error instanceof ThrottleUnavailable) return sendError(ctx, request, reply, new OAuthError('temporarily_unavailable', error.message, error.detail));
    const status = error.statusCode ?? 500;
    if (status >= 400 && status < 500) {
      // A wrong content type is a malformed request in RFC 6749's terms: 400 invalid_request.
      const description = CLIENT_ERRORS[status] ?? CLIENT_ERRORS[400]!;
      return sendError(ctx, request, reply, new OAuthError('invalid_request', description, error.code, status === 415 ? 400 : status));
    }
    // After the 4xx: a client that hung up mid-body reaches here as a 400 with code ECONNRESET, not the database's.
    const unavailable = databaseUnavailable(error);
    if (unavailable !== null) {
      request.log.warn(unavailable, 'database unavailable');
      // Only where nothing can have been done: a code exchange whose commit lost its answer would be a replay if retried.
      if (!unavailable.outcomeUnknown) reply.header('Retry-After', String(DATABASE_RETRY_AFTER_SECONDS));
      const description = unavailable.outcomeUnknown
        ? 'the service lost its database while answering: the request may or may not have taken effect'
        : 'the service is unavailable for a moment; try again shortly';
      return sendError(ctx, request, reply, new OAuthError('temporarily_unavailable', description, undefined, 503)); // logged above, as a warning
    }
    request.log.error({ err: error }, 'unexpected error');
    return sendError(ctx, request, reply, new OAuthError('server_error', 'the server could not complete the request'));
  });

  app.setNotFoundHandler(async (request, reply) => sendError(ctx, request, reply, new OAuthError('invalid_request', 'not found', undefined, 404)));
});
