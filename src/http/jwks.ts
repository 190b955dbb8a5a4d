/**
 * `GET /oauth/jwks` (SPEC §4.9): the public halves of the signing keys, for anyone that
 * verifies Gatehouse's JWTs. Answered from this process's key ring (identity/keys.ts), never
 * from the database on the request path. Cacheable for JWKS_MAX_AGE: a new key is published
 * six times that long before it signs.
 */
import type { FastifyInstance } from 'fastify';
import type { AppContext } from '../context.ts';
import { JWKS_MAX_AGE } from '../identity/key-schedule.ts';
import { rejectOtherMethods } from './helpers.ts';
import { TAGS } from './schemas.ts';

export const JWKS_PATH = '/oauth/jwks';

const jwksSchema = {
  tags: [TAGS.discovery],
  summary: 'The signing keys (RFC 7517 JWK Set)',
  response: {
    200: {
      description: 'The public JWK of every next, active and retiring signing key: `kty`, `kid`, `alg`, `use` and the public parameters',
      type: 'object',
      properties: { keys: { type: 'array', items: { type: 'object', additionalProperties: true } } },
    },
  },
} as const;

export default async function jwksRoutes(app: FastifyInstance, { ctx }: { ctx: AppContext }) {
  app.get(JWKS_PATH, { schema: jwksSchema }, async (_request, reply) => {
    reply.header('Cache-Control', `public, max-age=${JWKS_MAX_AGE}`);
    return ctx.keys.jwks();
  });
  rejectOtherMethods(app, [JWKS_PATH], 'GET');
}
