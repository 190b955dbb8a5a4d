/**
 * One PostgreSQL statement for many concurrent requests' reads by key. On this backend a
 * round trip costs both processes more than the lookup it carries (docs/performance.md, "What
 * one round trip per write would give PostgreSQL"): under load, the requests that arrive while
 * a read is under way share the next one, `key = any($1)`, and each takes its own row.
 *
 * Every request's read begins after the request arrived — the first starts at once, the
 * others wait for the read under way to end, never join it — so a request sees everything
 * committed before it came, as with a read of its own: a revocation answered anywhere, a code
 * consumed, a token rotated. One request alone costs what it did: one statement.
 */
import { sql, type Kysely, type SelectQueryBuilder } from 'kysely';
import { onPostgres } from './chained-writes.ts';
import { readWithinWait } from './database.ts';
import { prepare } from './prepared.ts';
import type { Database } from './schema.ts';

/**
 * How long callers wait for a read under way to end before starting their own: a read that
 * hangs (its connection lost without a word) holds only the requests that joined it.
 */
const OVERLAP_AFTER_MS = 50;

/** Callers waiting for one read, and their keys. */
interface Batch<K, V> {
  keys: Set<K>;
  values: Promise<ReadonlyMap<K, V>>;
}

/**
 * `readAll`'s value for one key, from a read that began after the call: the first caller's
 * read starts at once; callers that come while a read is under way share the next, which
 * starts when that one ends or OVERLAP_AFTER_MS after they came — unless `readsAtOnce` are
 * under way by then: the database is slow, and they get undefined without a read (for a caller
 * that has another way to its answer).
 */
export function sharedReads<K, V>(
  readAll: (keys: readonly K[]) => Promise<ReadonlyMap<K, V>>,
  readsAtOnce = Number.POSITIVE_INFINITY,
): (key: K) => Promise<V | undefined> {
  let reading: Promise<void> | null = null;
  let waiting: Batch<K, V> | null = null;
  let underWay = 0;
  const begin = (batch: Batch<K, V>): Promise<ReadonlyMap<K, V>> => {
    if (waiting === batch) waiting = null; // callers from now on need a later read
    // A readAll that throws at once fails its callers, as one that rejects does.
    const values = new Promise<ReadonlyMap<K, V>>((resolve) => resolve(readAll([...batch.keys])));
    const settled = values.then(
      () => {},
      () => {},
    );
    reading = settled;
    underWay++;
    void settled.then(() => {
      underWay--;
      if (reading === settled) reading = null;
    });
    return values;
  };
  return (key) => {
    const joined = waiting;
    if (joined !== null) {
      joined.keys.add(key);
      return joined.values.then((values) => values.get(key));
    }
    const batch = { keys: new Set([key]) } as Batch<K, V>;
    if (reading === null) batch.values = begin(batch);
    else {
      waiting = batch;
      batch.values = afterRead(
        reading,
        () => begin(batch),
        () => {
          if (underWay < readsAtOnce) return begin(batch);
          if (waiting === batch) waiting = null;
          return Promise.resolve(new Map());
        },
      );
    }
    return batch.values.then((values) => values.get(key));
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

/**
 * The row of `rows` whose `column` holds the given key, whatever its state: on SQLite a read
 * in process, as cheap as it gets; on PostgreSQL a shared read (`sharedReads`), one per
 * database — by the one-key statement when a request reads alone (its plan PostgreSQL keeps,
 * as before), failed with a 503 for every request that joined it when the database has not
 * answered it within CONNECTION_WAIT_MS. `rows` is the query without its condition on the key,
 * and selects the key as `field`, by which each caller is handed its row.
 */
export function rowByKey<DB, TB extends keyof DB, F extends string, O extends Record<F, string>>(
  column: string,
  field: F,
  rows: (db: Kysely<Database>) => SelectQueryBuilder<DB, TB, O>,
): (db: Kysely<Database>, key: string) => Promise<O | undefined> {
  const one = prepare((db, p: { key: string }) => rows(db).where(sql<boolean>`${sql.ref(column)} = ${p.key}`));
  const many = prepare((db, p: { keys: readonly string[] }) => rows(db).where(sql<boolean>`${sql.ref(column)} = any(${p.keys}::text[])`));
  const shared = new WeakMap<Kysely<Database>, (key: string) => Promise<O | undefined>>();
  return (db, key) => {
    if (!onPostgres(db)) return one.first(db, { key });
    let read = shared.get(db);
    if (read === undefined) {
      read = sharedReads(async (keys) => {
        const { rows } = await readWithinWait(keys.length === 1 ? one.execute(db, { key: keys[0]! }) : many.execute(db, { keys }));
        return new Map(rows.map((row) => [row[field], row]));
      });
      shared.set(db, read);
    }
    // Each caller its own copy: two requests with one token (racing tabs) share a read, not a row.
    return read(key).then((row) => row && { ...row });
  };
}
