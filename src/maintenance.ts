/**
 * Housekeeping that the server runs on a schedule and the CLI on demand: the purge of
 * expired rows (SPEC §3) and the health check behind `/_status`.
 */
import type { AppContext } from './context.ts';
import { isHealthy } from './store/database.ts';
import { purgeOnce, type PurgeCounts } from './store/purge.ts';

/** One purge run: what it deleted per table, or null when another instance is purging right now (PostgreSQL). */
export function purge(ctx: AppContext): Promise<PurgeCounts | null> {
  return purgeOnce(ctx.store, ctx.now(), ctx.config.refreshGraceSeconds * 1000);
}

/** Whether the database answers. */
export function databaseAnswers(ctx: AppContext): Promise<boolean> {
  return isHealthy(ctx.store);
}
