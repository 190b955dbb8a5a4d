/**
 * `POST /oauth/register` (RFC 7591, SPEC §4.8), when DYNAMIC_CLIENT_REGISTRATION is on;
 * otherwise the route does not exist (404). The only JSON the server reads: this plugin
 * takes the body as bounded text whatever its type, and the route parses it, so that every
 * malformed request gets RFC 7591's own error.
 */
import type { FastifyInstance } from 'fastify';
import { registerDynamicClient } from '../clients/registration.ts';
import type { AppContext } from '../context.ts';
import { OAuthError } from '../protocol/errors.ts';
import { holdsNul } from '../protocol/params.ts';
import { rejectOtherMethods } from './helpers.ts';

/** A registration is a few hundred bytes; this leaves room for long redirect URL lists. */
const MAX_BODY_BYTES = 16 * 1024;

export default async function registrationRoutes(app: FastifyInstance, { ctx }: { ctx: AppContext }) {
  if (!ctx.config.dynamicClientRegistration) return;
  // Counted before the body is read, so malformed requests spend the address's budget too.
  app.addHook('onRequest', async (request) => ctx.services.throttle.registrationFrom(request.ip));
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'string', bodyLimit: MAX_BODY_BYTES }, (_request, body, done) => done(null, body));

  app.post('/oauth/register', async (request, reply) => {
    reply.header('Cache-Control', 'no-store');
    if (!/^application\/json\s*(;|$)/i.test(request.headers['content-type'] ?? '') || typeof request.body !== 'string') {
      throw new OAuthError('invalid_client_metadata', 'send the client metadata as an application/json body');
    }
    let metadata: unknown;
    try {
      metadata = JSON.parse(request.body);
    } catch {
      throw new OAuthError('invalid_client_metadata', 'the body is not valid JSON');
    }
    // Refused whole, whichever member holds it (protocol/params.ts holdsNul): none is stored with NUL.
    if (holdsNul(metadata)) throw new OAuthError('invalid_client_metadata', 'the client metadata contains a NUL character');
    return reply.code(201).send(await registerDynamicClient(ctx, metadata, request.ip));
  });
  rejectOtherMethods(app, ['/oauth/register'], 'POST');
}
