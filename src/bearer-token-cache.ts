/**
 * The bearer check's answers in memory, on PostgreSQL, without giving up SPEC §1's "revoked at
 * one instance is dead at all of them at once".
 *
 * An answer is kept with the counter of its grant's shard as of the same read (`token_epochs`:
 * PostgreSQL's triggers grow it, in the revoking transaction, whenever a grant of the shard is
 * revoked or deleted, or any person is disabled, enabled or renamed — whichever statement does
 * it). Using a kept answer takes a read of that counter which began after the request arrived:
 * if it has not grown, nothing the answer depends on has changed since it was read, and a
 * revocation answered anywhere before the request arrived has grown it. Those reads are shared:
 * every request that arrives while one is under way joins the next, which reads all their
 * shards at once — one short statement for many requests, where each request read the token,
 * its grant and its person. One request alone costs what it did: one statement.
 *
 * Not a fan-out's message, which a revoking instance cannot know has arrived before it answers
 * (docs/performance.md, "The bearer check and a token-state cache"): the counter is read from the
 * database that committed the revocation, so its loss or delay changes nothing.
 *
 * On SQLite the bearer check is a read in process, about as cheap as reading a counter would be:
 * it reads the database each time, as before.
 */
import type { Kysely } from 'kysely';
import { LRUCache } from 'lru-cache';
import { onPostgres } from './store/chained-writes.ts';
import type { Database } from './store/schema.ts';
import { findLiveBearerToken, findLiveBearerTokenWithEpoch, readShardEpochs, type BearerTokenInfo } from './store/tokens.ts';

/** Answers kept: the tokens in use; beyond them, only more reads. Unknown tokens are never kept, so a flood of made-up ones fills nothing. */
const ENTRIES = 10_000;
/**
 * How long callers wait for a read of the counters under way to end before starting their own:
 * a read that hangs (its connection lost without a word) holds only the requests that joined it.
 */
const OVERLAP_AFTER_MS = 50;
/** The most reads of the counters under way at once: a slow database is not sent more of them than this. */
const READS_AT_ONCE = 2;

export interface BearerTokens {
  /** The live access token with this hash, as the database holds it now; undefined when there is none. */
  find(hash: string, now: number): Promise<BearerTokenInfo | undefined>;
}

export function bearerTokens(db: Kysely<Database>): BearerTokens {
  return onPostgres(db) ? cachedBearerTokens(db) : { find: (hash, now) => findLiveBearerToken(db, hash, now) };
}

interface Kept {
  info: BearerTokenInfo;
  shard: string;
  epoch: number;
}

function cachedBearerTokens(db: Kysely<Database>): BearerTokens {
  const kept = new LRUCache<string, Kept>({ max: ENTRIES });
  const epochNow = sharedEpochReads(db);
  return {
    async find(hash, now) {
      const entry = kept.get(hash);
      if (entry !== undefined && entry.info.expires_at > now && (await epochNow(entry.shard)) === entry.epoch) return entry.info;
      const row = await findLiveBearerTokenWithEpoch(db, hash, now);
      if (row === undefined) {
        kept.delete(hash);
        return undefined;
      }
      const { shard, epoch, ...info } = row;
      kept.set(hash, { info, shard, epoch });
      return info;
    },
  };
}

/** Callers waiting for one read of the counters, and their shards. */
interface Batch {
  shards: Set<string>;
  epochs: Promise<Map<string, number>>;
}

/**
 * The counter of a shard, from a read that began after the call: the first caller's read starts
 * at once; callers that come while a read is under way share the next, which starts when that
 * one ends or OVERLAP_AFTER_MS after they came — unless READS_AT_ONCE are under way by then: the
 * database is slow, and they go without a counter (their tokens are read, as without kept answers).
 */
function sharedEpochReads(db: Kysely<Database>): (shard: string) => Promise<number | undefined> {
  let reading: Promise<void> | null = null;
  let waiting: Batch | null = null;
  let underWay = 0;
  const begin = (batch: Batch): Promise<Map<string, number>> => {
    if (waiting === batch) waiting = null; // callers from now on need a later read
    const epochs = readShardEpochs(db, [...batch.shards]).then((rows) => new Map(rows.map(({ shard, epoch }) => [shard, epoch])));
    const settled = epochs.then(
      () => {},
      () => {},
    );
    reading = settled;
    underWay++;
    void settled.then(() => {
      underWay--;
      if (reading === settled) reading = null;
    });
    return epochs;
  };
  return (shard) => {
    const joined = waiting;
    if (joined !== null) {
      joined.shards.add(shard);
      return joined.epochs.then((epochs) => epochs.get(shard));
    }
    const batch = { shards: new Set([shard]) } as Batch;
    if (reading === null) batch.epochs = begin(batch);
    else {
      waiting = batch;
      batch.epochs = afterRead(
        reading,
        () => begin(batch),
        () => {
          if (underWay < READS_AT_ONCE) return begin(batch);
          // The database is slow: no counter, so these requests read their tokens, as they would without kept answers.
          if (waiting === batch) waiting = null;
          return Promise.resolve(new Map());
        },
      );
    }
    return batch.epochs.then((epochs) => epochs.get(shard));
  };
}

/** `settled()` when `under` settles, or `late()` OVERLAP_AFTER_MS from now, whichever comes first. */
function afterRead<T>(under: Promise<void>, settled: () => Promise<T>, late: () => Promise<T>): Promise<T> {
  return new Promise<T>((resolve) => {
    let done = false;
    const once = (then: () => Promise<T>) => () => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      resolve(then());
    };
    const timer = setTimeout(once(late), OVERLAP_AFTER_MS).unref();
    void under.then(once(settled));
  });
}
