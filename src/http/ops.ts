/**
 * Operations: the health check, the Prometheus metrics (behind METRICS_TOKEN when set), and
 * the background work every instance runs: the purge of expired rows and the count of table
 * sizes for the metrics (SPEC §1, §3, §4.6).
 */
import type { FastifyInstance } from 'fastify';
import type { AppContext } from '../context.ts';
import { bearerToken } from '../oauth/bearer.ts';
import { OAuthError } from '../protocol/errors.ts';
import { databaseAnswers, purge, startCheckpoints, type Checkpoints } from '../maintenance.ts';
import { constantTimeEqual, hashToken } from '../tokens.ts';
import { rejectOtherMethods } from './helpers.ts';
import { TAGS, oauthError } from './schemas.ts';

/** Table sizes are counted at start and then at most this often (SPEC §4.6: at most once a minute). */
const TABLE_COUNT_INTERVAL_MS = 60_000;

const statusSchema = {
  tags: [TAGS.operations],
  summary: 'Health check for load balancers',
  response: {
    200: { description: 'The database answers', type: 'object', required: ['status'], properties: { status: { type: 'string', enum: ['okay'] } } },
    503: {
      description: 'The database does not answer',
      type: 'object',
      required: ['status'],
      properties: { status: { type: 'string', enum: ['failure'] }, reason: { type: 'string' } },
    },
  },
} as const;

const metricsSchema = {
  tags: [TAGS.operations],
  summary: 'Prometheus metrics (expose to your monitoring only; with METRICS_TOKEN set, send it as a Bearer token)',
  response: {
    200: { description: 'Prometheus text exposition format', content: { 'text/plain': { schema: { type: 'string' } } } },
    401: oauthError('`invalid_token`: METRICS_TOKEN is set and the request does not carry it (with `WWW-Authenticate: Bearer`)', ['invalid_token']),
  },
} as const;

export default async function opsRoutes(app: FastifyInstance, { ctx, purges }: { ctx: AppContext; purges: boolean }) {
  app.get('/_status', { schema: statusSchema }, async (_request, reply) => {
    reply.header('Cache-Control', 'no-store');
    if (await databaseAnswers(ctx)) return { status: 'okay' };
    return reply.code(503).send({ status: 'failure', reason: 'the database does not answer' });
  });

  const checkMetricsAccess = metricsAccess(ctx.config.metricsToken);
  app.get('/metrics', { schema: metricsSchema }, async (request, reply) => {
    checkMetricsAccess(request.headers.authorization);
    reply.header('Cache-Control', 'no-store').type(ctx.metrics.contentType);
    return ctx.metrics.scrape();
  });

  rejectOtherMethods(app, ['/_status', '/metrics'], 'GET');

  if (purges) schedulePurge(app, ctx);
  const { database } = ctx.config;
  if (purges && database.kind === 'sqlite' && database.path !== ':memory:') scheduleCheckpoints(app, database.path);
  inBackground(app, TABLE_COUNT_INTERVAL_MS, true, async () => {
    try {
      await ctx.metrics.countTables();
    } catch (error) {
      app.log.warn({ err: error }, 'counting table rows failed; the metrics keep the last count');
    }
  });
}

/**
 * Who may read `/metrics`: anyone when no METRICS_TOKEN is set, else only a request with
 * `Authorization: Bearer <METRICS_TOKEN>`. The token is compared as SHA-256 digests in
 * constant time, so timing tells neither its characters nor its length.
 */
export function metricsAccess(token: string | null): (authorization: string | undefined) => void {
  if (token === null) return () => {};
  const expected = hashToken(token);
  return (authorization) => {
    const presented = bearerToken(authorization);
    if (presented === undefined || !constantTimeEqual(hashToken(presented), expected)) {
      throw new OAuthError('invalid_token', 'the metrics need the metrics token (Authorization: Bearer)');
    }
  };
}

/**
 * Every instance purges on its own timer; on PostgreSQL, `purge` lets only one of them
 * work at a time. Of the workers of one instance (WORKERS=n) only one purges: on SQLite
 * nothing would keep them from racing one another over the same rows and the one write lock.
 */
function schedulePurge(app: FastifyInstance, ctx: AppContext): void {
  const interval = ctx.config.purgeIntervalSeconds * 1000;
  if (interval === 0) return;
  inBackground(app, interval, false, async () => {
    try {
      const counts = await purge(ctx);
      ctx.metrics.purge(counts);
      if (counts === null) app.log.debug({ event: 'purge_skipped' }, 'another instance is purging');
      else app.log.info({ event: 'purge', counts }, 'purged expired rows');
    } catch (error) {
      ctx.metrics.purge(null, true);
      app.log.error({ err: error }, 'purge failed');
    }
  });
}

/**
 * SQLite: the WAL is copied back into the database file on this timer, by a thread of its own
 * (src/store/checkpointer.ts), rather than by whichever request's commit fills it. A
 * checkpoint covers the whole file, so one process does it: the one that purges (of
 * WORKERS=n, one worker). An in-memory database has no WAL.
 */
function scheduleCheckpoints(app: FastifyInstance, path: string): void {
  let checkpointer: Checkpoints | undefined;
  app.addHook('onReady', async () => {
    checkpointer = startCheckpoints(path, (message) => app.log.warn({ error: message }, 'checkpoint failed; the next commit past the WAL limit will do it'));
  });
  app.addHook('onClose', async () => checkpointer?.stop());
}

/**
 * Runs `task` (which handles its own errors) every `intervalMs` once the app is ready, and
 * at once too when `atStart`. A run still going when the next is due is not doubled; the
 * timer does not keep the process alive, and shutdown stops it and waits for a run in progress.
 */
function inBackground(app: FastifyInstance, intervalMs: number, atStart: boolean, task: () => Promise<void>): void {
  let running: Promise<void> | null = null;
  const run = () => void (running ??= task().finally(() => (running = null)));
  let timer: NodeJS.Timeout | undefined;
  app.addHook('onReady', async () => {
    timer = setInterval(run, intervalMs).unref();
    if (atStart) run();
  });
  app.addHook('onClose', async () => {
    clearInterval(timer);
    await running;
  });
}
