/**
 * `WORKERS=n` (n > 1): `gatehouse serve` as a primary process that forks n workers sharing
 * one port (node:cluster; the primary accepts connections and hands them round-robin to the
 * workers, which each run the same app). The primary serves nothing and holds no database
 * connection; it keeps the workers running, holds the throttling counters when there is no
 * Redis (src/throttle.ts), and stops them on SIGTERM.
 *
 * What differs from n separate instances, and why it still holds, is in README.md ("Running
 * several instances").
 */
import cluster, { type Worker } from 'node:cluster';

/**
 * A worker's place among the n, 0 to n-1, kept by its replacement: the one place that runs
 * the purge (slot 0). Set by the primary in the environment of the worker it forks — a channel
 * between the two processes, not a setting.
 */
const SLOT_VARIABLE = 'GATEHOUSE_WORKER_SLOT';

/** More unexpected exits than this within RESTART_WINDOW_MS, and the primary gives up (exit 1) instead of crash-looping. */
const MAX_RESTARTS = 5;
const RESTART_WINDOW_MS = 60_000;

export const isWorker = cluster.isWorker;

/** Whether this process runs the background purge: a single process does, and of the workers the one in slot 0. */
export function runsPurge(): boolean {
  return !cluster.isWorker || process.env[SLOT_VARIABLE] === '0';
}

export interface PrimaryLogger {
  info(object: object, message: string): void;
  error(object: object, message: string): void;
}

/**
 * Forks `count` workers running this same command and keeps them running: a worker that
 * dies unexpectedly is replaced, at most MAX_RESTARTS times per RESTART_WINDOW_MS. SIGTERM
 * or SIGINT is passed on to every worker, which finishes its in-flight requests and exits;
 * resolves with 0 once all have exited cleanly (1 if one did not, or after giving up).
 */
export async function runPrimary(count: number, log: PrimaryLogger): Promise<number> {
  const { RateLimiterClusterMaster } = await import('rate-limiter-flexible');
  new RateLimiterClusterMaster(); // answers the workers' throttling counters (src/throttle.ts)
  const slots = new Map<Worker, number>();
  const restarts: number[] = [];
  let stopping = false;
  let exitCode = 0;

  const fork = (slot: number) => slots.set(cluster.fork({ [SLOT_VARIABLE]: String(slot) }), slot);
  const stop = (signal: NodeJS.Signals) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal, workers: slots.size }, `${signal}: stopping the workers`);
    for (const worker of slots.keys()) worker.process.kill(signal);
  };

  return new Promise((resolve) => {
    cluster.on('exit', (worker, code, signal) => {
      const slot = slots.get(worker)!;
      slots.delete(worker);
      if (stopping) {
        if (code !== 0) exitCode = 1;
        if (slots.size === 0) resolve(exitCode);
        return;
      }
      const now = Date.now();
      restarts.push(now);
      while (restarts[0]! <= now - RESTART_WINDOW_MS) restarts.shift();
      // Exit code 2 is a bad setting (src/main.ts), a busy port: another worker would fail the same way.
      if (code === 2 || restarts.length > MAX_RESTARTS) {
        const why =
          code === 2
            ? 'a setting is wrong or the port busy (its message is above)'
            : `workers have exited ${restarts.length} times within ${RESTART_WINDOW_MS / 1000} s`;
        log.error({ worker_pid: worker.process.pid, code, signal }, `a worker exited (code ${code}, signal ${signal}), ${why}: giving up`);
        exitCode = 1;
        stop('SIGTERM');
        if (slots.size === 0) resolve(exitCode);
        return;
      }
      log.error({ worker_pid: worker.process.pid, code, signal }, `a worker exited (code ${code}, signal ${signal}); starting another`);
      fork(slot);
    });
    process.on('SIGTERM', () => stop('SIGTERM'));
    // Ctrl-C reaches the workers too (one process group); they ignore a second signal.
    process.on('SIGINT', () => stop('SIGINT'));
    for (let slot = 0; slot < count; slot++) fork(slot);
  });
}
