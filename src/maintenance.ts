/**
 * Housekeeping that the server runs on a schedule and the CLI on demand: the purge of
 * expired rows (SPEC §3), the health check behind `/_status`, and SQLite's WAL checkpoints —
 * and, for the error handler, whether a request failed because the database is unavailable.
 */
import type { AppContext } from './context.ts';
import { startCheckpointer, type Checkpointer } from './store/checkpointer.ts';
import { isHealthy } from './store/database.ts';
import { purgeOnce, type PurgeCounts } from './store/purge.ts';

export { databaseUnavailable } from './store/database.ts';

/** One purge run: what it deleted per table, or null when another instance is purging right now (PostgreSQL). */
export function purge(ctx: AppContext): Promise<PurgeCounts | null> {
  return purgeOnce(ctx.store, ctx.now(), ctx.config.refreshGraceSeconds * 1000);
}

/** Whether the database answers. */
export function databaseAnswers(ctx: AppContext): Promise<boolean> {
  return isHealthy(ctx.store);
}

/** How often the purging process checkpoints SQLite's WAL (store/checkpointer.ts; the bound: WAL_AUTOCHECKPOINT_PAGES in store/database.ts). */
const CHECKPOINT_INTERVAL_MS = 1000;

export type Checkpoints = Checkpointer;

/** Checkpoints the SQLite database at `path` every CHECKPOINT_INTERVAL_MS on a thread of its own; `onFailure` hears of a failed one. */
export function startCheckpoints(path: string, onFailure: (message: string) => void): Checkpoints {
  return startCheckpointer({ path, intervalMs: CHECKPOINT_INTERVAL_MS }, onFailure);
}
