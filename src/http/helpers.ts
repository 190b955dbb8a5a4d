import type { FastifyInstance, FastifyRequest, HTTPMethods } from 'fastify';
import { OAuthError, invalidRequest } from '../oauth/errors.ts';
import type { RawParams } from '../oauth/params.ts';

/** The form body; `invalid_request` when the request did not send one. */
export function requireFormBody(request: FastifyRequest): RawParams {
  const type = request.headers['content-type'] ?? '';
  if (!/^application\/x-www-form-urlencoded\s*(;|$)/i.test(type) || typeof request.body !== 'object' || request.body === null) {
    throw invalidRequest('send the parameters as an application/x-www-form-urlencoded body');
  }
  return request.body as RawParams;
}

const METHODS: HTTPMethods[] = ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH'];

/** Answers other methods on these URLs with 405 and an `Allow` header, instead of 404. */
export function rejectOtherMethods(app: FastifyInstance, urls: readonly string[], allowed: 'GET' | 'POST'): void {
  const others = METHODS.filter((m) => m !== allowed && !(allowed === 'GET' && m === 'HEAD'));
  for (const url of urls) {
    app.route({
      method: others,
      url,
      handler: async (_request, reply) => {
        reply.header('Allow', allowed === 'GET' ? 'GET, HEAD' : allowed);
        throw new OAuthError('invalid_request', `use ${allowed}`, undefined, 405);
      },
    });
  }
}
