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
import { sharedCalls } from '../protocol/shared-calls.ts';
import type { Database } from './schema.ts';

/**
 * A row of a shared read as a read of one request would have found it at `now`: for rows
 * whose expiry the statement cannot ask about, since requests with their own clocks share it.
 */
export function unexpired<T extends { expires_at: number }>(row: T | undefined, now: number): T | undefined {
  return row !== undefined && row.expires_at > now ? row : undefined;
}

/**
 * The row of `rows` whose `column` holds the given key, whatever its state: on SQLite a read
 * in process, as cheap as it gets; on PostgreSQL a shared read (`sharedCalls`), one per
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
      read = sharedCalls(async (keys) => {
        const { rows } = await readWithinWait(keys.length === 1 ? one.execute(db, { key: keys[0]! }) : many.execute(db, { keys }));
        return new Map(rows.map((row) => [row[field], row]));
      });
      shared.set(db, read);
    }
    // Each caller its own copy: two requests with one token (racing tabs) share a read, not a row.
    return read(key).then((row) => row && { ...row });
  };
}
