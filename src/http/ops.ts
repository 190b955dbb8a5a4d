/**
 * Operations: the health check, the Prometheus metrics, and the scheduled purge of
 * expired rows that every instance runs (SPEC §3, §4.6).
 */
import type { FastifyInstance } from 'fastify';
import type { AppContext } from '../context.ts';
import { isHealthy } from '../store/database.ts';
import { purgeOnce } from '../store/purge.ts';
import { rejectOtherMethods } from './helpers.ts';
import { TAGS } from './schemas.ts';

const statusSchema = {
  tags: [TAGS.operations],
  summary: 'Health check for load balancers',
  response: {
    200: { description: 'The database answers', type: 'object', required: ['status'], properties: { status: { type: 'string', enum: ['okay'] } } },
    503: { description: 'The database does not answer', type: 'object', required: ['status'], properties: { status: { type: 'string', enum: ['failure'] }, reason: { type: 'string' } } },
  },
} as const;

const metricsSchema = {
  tags: [TAGS.operations],
  summary: 'Prometheus metrics (expose to your monitoring only)',
  response: { 200: { description: 'Prometheus text exposition format', content: { 'text/plain': { schema: { type: 'string' } } } } },
} as const;

export default async function opsRoutes(app: FastifyInstance, { ctx }: { ctx: AppContext }) {
  app.get('/_status', { schema: statusSchema }, async (_request, reply) => {
    reply.header('Cache-Control', 'no-store');
    if (await isHealthy(ctx.store)) return { status: 'okay' };
    return reply.code(503).send({ status: 'failure', reason: 'the database does not answer' });
  });

  app.get('/metrics', { schema: metricsSchema }, async (_request, reply) => {
    reply.header('Cache-Control', 'no-store').type(ctx.metrics.registry.contentType);
    return ctx.metrics.registry.metrics();
  });

  rejectOtherMethods(app, ['/_status', '/metrics'], 'GET');

  schedulePurge(app, ctx);
}

/**
 * Every instance purges on its own timer; on PostgreSQL, `purgeOnce` lets only one of them
 * work at a time. A run still going when the next is due is not doubled, and shutdown
 * waits for it.
 */
function schedulePurge(app: FastifyInstance, ctx: AppContext): void {
  const interval = ctx.config.purgeIntervalSeconds * 1000;
  if (interval === 0) return;
  let running: Promise<void> | null = null;
  const run = async () => {
    try {
      const counts = await purgeOnce(ctx.store, ctx.now(), ctx.config.refreshGraceSeconds * 1000);
      ctx.metrics.purge(counts);
      if (counts === null) app.log.debug({ event: 'purge_skipped' }, 'another instance is purging');
      else app.log.info({ event: 'purge', counts }, 'purged expired rows');
    } catch (error) {
      ctx.metrics.purge(null, true);
      app.log.error({ err: error }, 'purge failed');
    } finally {
      running = null;
    }
  };
  let timer: NodeJS.Timeout | undefined;
  app.addHook('onReady', async () => {
    timer = setInterval(() => void (running ??= run()), interval).unref();
  });
  app.addHook('onClose', async () => {
    clearInterval(timer);
    await running;
  });
}
