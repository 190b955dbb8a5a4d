/** Operations endpoints. */
import type { FastifyInstance } from 'fastify';
import type { Store } from '../store/database.ts';
import { isHealthy } from '../store/database.ts';

export default async function opsRoutes(app: FastifyInstance, { store }: { store: Store }) {
  app.get('/_status', async (_request, reply) => {
    reply.header('Cache-Control', 'no-store');
    if (await isHealthy(store)) return { status: 'okay' };
    return reply.code(503).send({ status: 'failure', reason: 'the database does not answer' });
  });
}
