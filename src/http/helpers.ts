import type { FastifyInstance, FastifyRequest, HTTPMethods } from 'fastify';
import type { User } from '../accounts/users.ts';
import type { Actor } from '../audit.ts';
import type { AppContext } from '../context.ts';
import { presentedToken, type PresentedToken } from '../oauth/bearer.ts';
import { proofUrl } from '../oauth/dpop.ts';
import { OAuthError, invalidRequest } from '../protocol/errors.ts';
import type { RawParams } from '../protocol/params.ts';

/** The form body; `invalid_request` when the request did not send one. */
export function requireFormBody(request: FastifyRequest): RawParams {
  const type = request.headers['content-type'] ?? '';
  if (!/^application\/x-www-form-urlencoded\s*(;|$)/i.test(type) || typeof request.body !== 'object' || request.body === null) {
    throw invalidRequest('send the parameters as an application/x-www-form-urlencoded body');
  }
  return request.body as RawParams;
}

const METHODS: HTTPMethods[] = ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH'];

/** Answers other methods on these URLs with 405 and an `Allow` header, instead of 404. `GET` brings `HEAD` with it. */
export function rejectOtherMethods(app: FastifyInstance, urls: readonly string[], ...allowed: ('GET' | 'POST')[]): void {
  const methods: HTTPMethods[] = allowed.includes('GET') ? [...allowed, 'HEAD'] : allowed;
  const others = METHODS.filter((m) => !methods.includes(m));
  for (const url of urls) {
    app.route({
      method: others,
      url,
      handler: async (_request, reply) => {
        reply.header('Allow', methods.join(', '));
        throw new OAuthError('invalid_request', `use ${allowed.join(' or ')}`, undefined, 405);
      },
    });
  }
}

/** What each room of the admin console (admin.ts) is given by its guard. */
export interface AdminRoomOptions {
  ctx: AppContext;
  /** The administrator making the request. */
  admin: (request: FastifyRequest) => User;
  /** Who the changes of a request are recorded as made by. */
  actor: (request: FastifyRequest) => Actor;
}

/**
 * A login attempt refused before it was checked (a password, a code or a passkey): its status
 * and the words the person reads — the same on every login page.
 */
export function uncheckedLogin(reason: 'throttled' | 'busy', retryAfter: number): { status: 429 | 503; text: string } {
  return reason === 'throttled'
    ? { status: 429, text: `Too many failed attempts. Try again in ${Math.ceil(retryAfter / 60)} minute(s).` }
    : { status: 503, text: 'The server is busy. Try again in a moment.' };
}

/**
 * The access token of the request's `Authorization` header (`Bearer` or `DPoP`), with what a
 * DPoP proof must be for: this request's `DPoP` headers and method, and `urls` — the absolute
 * URLs it may name in `htu` (oauth/dpop.ts `proofUrl`).
 */
export function presentedTokenOf(request: FastifyRequest, urls: readonly string[]): PresentedToken | undefined {
  return presentedToken(request.headers.authorization, {
    proofs: request.headers.dpop,
    method: request.method,
    urls: urls.map(proofUrl),
  });
}
