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
import { sharedCalls } from './protocol/shared-calls.ts';
import type { Database } from './store/schema.ts';
import { findLiveBearerToken, findLiveBearerTokenWithEpoch, readShardEpochs, type BearerTokenInfo } from './store/tokens.ts';

/** Answers kept: the tokens in use; beyond them, only more reads. Unknown tokens are never kept, so a flood of made-up ones fills nothing. */
const ENTRIES = 10_000;
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
  // A read of the counters that began after the request arrived, shared (protocol/shared-calls.ts); with
  // READS_AT_ONCE under way the database is slow: no counter, and the token is read, as without kept answers.
  const epochNow = sharedCalls(async (shards: readonly string[]) => {
    const rows = await readShardEpochs(db, shards);
    return new Map(rows.map(({ shard, epoch }) => [shard, epoch]));
  }, READS_AT_ONCE);
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
