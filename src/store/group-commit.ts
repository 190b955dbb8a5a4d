/**
 * Group commit on SQLite: the writes of requests that reach their write in the same turn of
 * the event loop run as one transaction, each in a savepoint of its own.
 *
 * Why: a commit writes every page its transaction changed to the WAL, and consecutive
 * writes share many pages — the interior pages of every index, the right-most leaves of the
 * keys that grow at one end (UUIDv7 grant ids, ids, expiries). One transaction for the
 * writes of several requests writes each such page once (bench/wal-pages.ts --concurrency
 * counts it), and pays BEGIN and COMMIT once.
 *
 * How, and what each request keeps:
 * - The first write queued schedules its batch with `setImmediate`: it runs once the
 *   requests whose input arrived in the same poll of the event loop have reached their
 *   writes (their path to it is synchronous or awaits only settled promises). No timer: a
 *   lone request waits for nothing but the rest of the current turn. Writes queued while a
 *   batch runs join the next one, scheduled as that batch ends.
 * - Each write of a batch of several runs in its own SAVEPOINT: one that throws (a lost race
 *   in writeTogether, a constraint) is rolled back to its savepoint and fails alone; the
 *   others go on. Its exactly-once decision is still the conditional UPDATE of its own step,
 *   which sees the writes of the batch's earlier members (one connection, one transaction):
 *   two exchanges of one code in one batch are decided exactly as in two transactions.
 * - Every member's outcome — success or its own failure — is handed back only after the
 *   batch's COMMIT: a request answers only once what it answers about is durable. If the
 *   commit (or the transaction itself) fails, every member fails with that error and nothing
 *   of any is stored.
 * - A batch is one write transaction (BEGIN IMMEDIATE, database.ts), so everything else on
 *   the connection queues behind it as behind any transaction; MAX_BATCH bounds how long.
 * - What a savepoint needs to roll back — the pages its write changed, as they were — SQLite
 *   keeps in memory up to 64 KiB, then in a temporary file. A token write's pages pass that,
 *   and every page written to the file costs two system calls: with that file, a refresh made
 *   43 system calls, 36 of them writes; without it, 11.5 and 4.6 (docs/performance.md). So a
 *   batch of several writes that each change a bounded number of rows keeps it in memory
 *   (`PRAGMA temp_store`, for that transaction only): SQLite empties it as each savepoint is
 *   released, so it holds one write's pages at a time. A batch with a write that may change
 *   any number of rows (`unbounded`: every grant of a client) keeps the file, because such a
 *   write's savepoint would hold all its pages in memory at once; so does every transaction
 *   that is not a batch.
 */
import { channel } from 'node:diagnostics_channel';
import { CompiledQuery, type Kysely, type Transaction } from 'kysely';
import type { Database } from './schema.ts';

/** The most writes one transaction carries: at well under a millisecond each, the event loop is held for a few milliseconds at most. */
const MAX_BATCH = 32;

/**
 * How many rows a write may change: `bounded` — a handful, however large the tables (a
 * chained write, one grant's revocation); `unbounded` — as many as the data holds.
 */
export type WriteExtent = 'bounded' | 'unbounded';

interface Job {
  work: (trx: Transaction<Database>) => Promise<unknown>;
  extent: WriteExtent;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}

interface Queue {
  pending: Job[];
  /** A batch is scheduled or running: a new write joins `pending`, which the next batch takes. */
  busy: boolean;
  /** The connection still keeps journals in memory: a batch's reset failed after its commit. */
  journalLeftInMemory: boolean;
}

const queues = new WeakMap<Kysely<Database>, Queue>();

/** Databases opened with SQLITE_GROUP_COMMIT=false: each write its own transaction, as before batching (for measuring it). */
const solo = new WeakSet<Kysely<Database>>();

export function writeAlone(db: Kysely<Database>): void {
  solo.add(db);
}

/**
 * Each batch once it has settled, for whoever subscribes (the tests, a profiler): how many
 * writes it carried, how many failed alone, and whether it committed. Silent unless subscribed.
 */
export const batches = channel('gatehouse:group-commit');

export interface BatchReport {
  size: number;
  failed: number;
  committed: boolean;
  /** Its savepoints' journal was kept in memory (every write bounded, and more than one). */
  journalInMemory: boolean;
}

const SAVEPOINT = CompiledQuery.raw('savepoint gatehouse_write');
const RELEASE = CompiledQuery.raw('release gatehouse_write');
const ROLLBACK_TO = CompiledQuery.raw('rollback to gatehouse_write');
// Read by SQLite when a write transaction begins: set before BEGIN, and back to the default (a file) once it has ended.
// The setting takes effect as the pragma is prepared, and the statement then asks to be prepared
// again, so its cached copy (database.ts) takes effect each time it runs. Changing it drops the
// connection's TEMP tables, and fails while one is in a transaction: Gatehouse makes none.
const JOURNAL_IN_MEMORY = CompiledQuery.raw('pragma temp_store = memory');
const JOURNAL_DEFAULT = CompiledQuery.raw('pragma temp_store = default');

/**
 * Runs `work` in a transaction shared with the other writes queued in the same turn of the
 * event loop (in a savepoint of its own when it is not alone), and settles with its result
 * or its error once that transaction has committed. SQLite only.
 */
export function inGroupCommit<T>(db: Kysely<Database>, extent: WriteExtent, work: (trx: Transaction<Database>) => Promise<T>): Promise<T> {
  if (solo.has(db)) return db.transaction().execute(work);
  if (db.isTransaction) return work(db as Transaction<Database>); // already inside a transaction: its commit is the one
  let queue = queues.get(db);
  if (!queue) queues.set(db, (queue = { pending: [], busy: false, journalLeftInMemory: false }));
  const done = new Promise<T>((resolve, reject) => queue.pending.push({ work, extent, resolve: resolve as (value: unknown) => void, reject }));
  if (!queue.busy) schedule(db, queue);
  return done;
}

function schedule(db: Kysely<Database>, queue: Queue): void {
  queue.busy = true;
  setImmediate(() => void runBatch(db, queue));
}

type Outcome = { ok: true; value: unknown } | { ok: false; error: unknown };

/** Runs a batch's writes in its transaction: each in a savepoint of its own when there are several, so that one that fails rolls back alone. */
async function runWrites(trx: Transaction<Database>, jobs: readonly Job[]): Promise<Outcome[]> {
  // Alone: no savepoint; its failure rolls the transaction back, as a transaction of its own would.
  if (jobs.length === 1) return [{ ok: true, value: await jobs[0]!.work(trx) }];
  const outcomes: Outcome[] = [];
  for (const job of jobs) {
    await trx.executeQuery(SAVEPOINT);
    try {
      outcomes.push({ ok: true, value: await job.work(trx) });
    } catch (error) {
      // If this fails too, the transaction is unusable: the batch fails as a whole (runBatch).
      await trx.executeQuery(ROLLBACK_TO);
      outcomes.push({ ok: false, error });
    }
    await trx.executeQuery(RELEASE);
  }
  return outcomes;
}

async function runBatch(db: Kysely<Database>, queue: Queue): Promise<void> {
  const jobs = queue.pending.splice(0, MAX_BATCH);
  const journalInMemory = jobs.length > 1 && jobs.every((job) => job.extent === 'bounded');
  let outcomes: Outcome[] = [];
  try {
    await db.connection().execute(async (connection) => {
      if (journalInMemory) await connection.executeQuery(JOURNAL_IN_MEMORY);
      else if (queue.journalLeftInMemory) await connection.executeQuery(JOURNAL_DEFAULT);
      queue.journalLeftInMemory = journalInMemory;
      try {
        outcomes = await connection.transaction().execute((trx) => runWrites(trx, jobs));
      } finally {
        // Before anything else has the connection: its other transactions may be unbounded. This
        // fails only as the store closes; the members' outcomes stand (committed or not), and
        // the next batch sets the default again before it begins.
        if (journalInMemory) {
          await connection.executeQuery(JOURNAL_DEFAULT).then(
            () => (queue.journalLeftInMemory = false),
            () => {},
          );
        }
      }
    });
    const failed = outcomes.filter((o) => !o.ok).length;
    if (batches.hasSubscribers) batches.publish({ size: jobs.length, failed, committed: true, journalInMemory } satisfies BatchReport);
    jobs.forEach((job, i) => {
      const outcome = outcomes[i]!;
      if (outcome.ok) job.resolve(outcome.value);
      else job.reject(outcome.error);
    });
  } catch (error) {
    if (batches.hasSubscribers) batches.publish({ size: jobs.length, failed: jobs.length, committed: false, journalInMemory } satisfies BatchReport);
    for (const job of jobs) job.reject(error);
  } finally {
    if (queue.pending.length > 0) schedule(db, queue);
    else queue.busy = false;
  }
}
