/**
 * One call for the many callers that come together: a read by key on PostgreSQL
 * (store/shared-reads.ts), the bearer cache's counters (bearer-token-cache.ts), the fan-out's
 * messages (events/fan-out.ts). Where a round trip costs more than what it carries, the
 * callers that come while a call is under way share the next one.
 *
 * A caller never joins the call under way, which may have begun before it came: its call
 * begins after it did, so a read sees everything committed before the caller came, and a
 * message carries what the caller sends.
 */

/**
 * How long callers wait for a call under way to end before starting their own: a call that
 * hangs (its connection lost without a word) holds only the callers that joined it.
 */
const OVERLAP_AFTER_MS = 50;

/** Callers waiting for one call, and their keys. */
interface Batch<K, V> {
  keys: Set<K>;
  values: Promise<ReadonlyMap<K, V>>;
}

/**
 * `callAll`'s value for one key, from a call that began after this one: the first caller's
 * call starts at once; callers that come while a call is under way share the next, which
 * starts when that one ends or OVERLAP_AFTER_MS after they came — unless `callsAtOnce` are
 * under way by then: the other end is slow, and they get undefined without a call (for a
 * caller that has another way to its answer).
 */
export function sharedCalls<K, V>(
  callAll: (keys: readonly K[]) => Promise<ReadonlyMap<K, V>>,
  callsAtOnce = Number.POSITIVE_INFINITY,
): (key: K) => Promise<V | undefined> {
  let calling: Promise<void> | null = null;
  let waiting: Batch<K, V> | null = null;
  let underWay = 0;
  const begin = (batch: Batch<K, V>): Promise<ReadonlyMap<K, V>> => {
    if (waiting === batch) waiting = null; // callers from now on need a later call
    // A callAll that throws at once fails its callers, as one that rejects does.
    const values = new Promise<ReadonlyMap<K, V>>((resolve) => resolve(callAll([...batch.keys])));
    const settled = values.then(
      () => {},
      () => {},
    );
    calling = settled;
    underWay++;
    void settled.then(() => {
      underWay--;
      if (calling === settled) calling = null;
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
    if (calling === null) batch.values = begin(batch);
    else {
      waiting = batch;
      batch.values = afterCall(
        calling,
        () => begin(batch),
        () => {
          if (underWay < callsAtOnce) return begin(batch);
          if (waiting === batch) waiting = null;
          return Promise.resolve(new Map());
        },
      );
    }
    return batch.values.then((values) => values.get(key));
  };
}

/** `settled()` when `under` settles, or `late()` OVERLAP_AFTER_MS from now, whichever comes first. */
function afterCall<T>(under: Promise<void>, settled: () => Promise<T>, late: () => Promise<T>): Promise<T> {
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
