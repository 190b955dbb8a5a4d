/**
 * SQLite's checkpoints, on a thread of their own.
 *
 * Why: a checkpoint copies the pages the WAL holds back into the database file and ends in
 * an fsync; on the serving connection it held the event loop for its whole length (tens of
 * milliseconds under write load, hundreds on a busy disk) — every request in flight waited,
 * and it was the largest stall in the latency timeline (docs/performance.md). In WAL mode a
 * PASSIVE checkpoint needs no lock that readers or writers take, so a second connection on a
 * worker thread can run it while the serving connection goes on reading and committing.
 *
 * The serving connection keeps its own automatic checkpoint (database.ts,
 * WAL_AUTOCHECKPOINT_PAGES) as the bound should this thread fall behind or fail.
 */
import { channel } from 'node:diagnostics_channel';
import { Worker } from 'node:worker_threads';

export interface CheckpointThreadOptions {
  path: string;
  intervalMs: number;
}

/** One checkpoint, as the thread reports it: its duration and pages (in the WAL, copied back), or why it failed. */
export type CheckpointReport = { ms: number; walPages: number; copied: number } | { error: string };

/**
 * Each checkpoint's report for whoever subscribes: the bench's timeline (bench/probe.ts).
 * Nothing is sent while nobody listens.
 */
const checkpoints = channel('gatehouse:checkpoint');

export interface Checkpointer {
  /** Stops the timer, lets a checkpoint in progress finish, closes the thread's connection. */
  stop(): Promise<void>;
}

/** Starts checkpointing the SQLite file at `path` every `intervalMs` on a worker thread; `onError` hears each failure. */
export function startCheckpointer({ path, intervalMs }: CheckpointThreadOptions, onError: (message: string) => void): Checkpointer {
  const worker = new Worker(new URL('./checkpoint-thread.js', import.meta.url), { workerData: { path, intervalMs } satisfies CheckpointThreadOptions });
  const exited = new Promise<void>((resolve) => worker.once('exit', () => resolve()));
  worker.unref(); // the thread never keeps the process alive
  worker.on('message', (report: CheckpointReport) => {
    if ('error' in report) onError(report.error);
    else if (checkpoints.hasSubscribers) checkpoints.publish(report);
  });
  worker.on('error', (error) => onError(error.message)); // the thread could not start (the file cannot be opened): it has exited
  return {
    stop() {
      worker.postMessage('stop');
      return exited;
    },
  };
}
