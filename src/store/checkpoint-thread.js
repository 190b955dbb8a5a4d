// @ts-check
/**
 * The body of the checkpointer's worker thread (checkpointer.ts): a connection of its own to
 * the SQLite file that copies the WAL back into the database on a timer, so that the copy and
 * the fsync that ends it run beside the event loop instead of on it.
 *
 * JavaScript (type-checked through JSDoc) rather than TypeScript: a thread that loads a .ts
 * file loads Node's type stripper too, which doubled the thread's memory (26 MiB against 14).
 */
import { DatabaseSync } from 'node:sqlite';
import { parentPort, workerData } from 'node:worker_threads';

/** @typedef {import('./checkpointer.ts').CheckpointReport} CheckpointReport */

const port = /** @type {import('node:worker_threads').MessagePort} */ (parentPort);
const { path, intervalMs } = /** @type {import('./checkpointer.ts').CheckpointThreadOptions} */ (workerData);
const database = new DatabaseSync(path);
// This thread serves no request, so it may wait for the checkpoint lock a while (another
// process's checkpoint). synchronous is per connection: the same as the serving one's.
database.exec('PRAGMA busy_timeout = 1000; PRAGMA synchronous = NORMAL;');
// PASSIVE: copies what no reader still needs and never makes a reader or writer wait.
const checkpoint = database.prepare('pragma wal_checkpoint(passive)');

const timer = setInterval(() => {
  const started = performance.now();
  /** @type {CheckpointReport} */
  let report;
  try {
    const row = /** @type {{ busy: number, log: number, checkpointed: number }} */ (checkpoint.get());
    report = { ms: performance.now() - started, walPages: row.log, copied: row.checkpointed };
  } catch (error) {
    report = { error: /** @type {Error} */ (error).message };
  }
  port.postMessage(report);
}, intervalMs);

port.once('message', () => {
  clearInterval(timer);
  database.close();
  port.close();
});
