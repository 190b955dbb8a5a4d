/**
 * Queries compiled once and run many times. Building a query through Kysely's builder and
 * compiling it costs more CPU than a hot lookup spends in the database, so the token paths
 * compile each fixed query shape once per database (the SQL differs between dialects: `?`
 * or `$1` placeholders, quoting) and run the compiled text with each request's parameters.
 * The builder stays the only source of the SQL: a prepared query is written with Kysely as
 * usual, with its inputs taken from a placeholder object instead of real values.
 */
import { createHash } from 'node:crypto';
import { CompiledQuery, PostgresAdapter, SelectQueryNode, type Compilable, type Kysely, type QueryResult, type SelectQueryBuilder } from 'kysely';
import type { Database } from './schema.ts';

/** What a `ReadNow` answers when the read must take its turn on the connection instead. */
export const LATER = Symbol('later');

/**
 * Runs a reading statement on SQLite's connection at once, without Kysely's connection
 * queue, and returns its first row (undefined for none) — or LATER, when it must not run
 * now. For reads only: a write would skip the wait for another process's write lock.
 * database.ts makes one per SQLite database and registers it here.
 */
export type ReadNow = (sql: string, parameters: readonly unknown[]) => unknown;

const immediateReads = new WeakMap<Kysely<Database>, ReadNow>();

/** Gives `db` (SQLite only; not a transaction) its immediate read path. */
export function registerReadNow(db: Kysely<Database>, readNow: ReadNow): void {
  immediateReads.set(db, readNow);
}

/** Stands in for an argument while the query is compiled; replaced by its value on each run. */
class Placeholder {
  readonly name: string;
  constructor(name: string) {
    this.name = name;
  }
}

interface Compiled {
  sql: string;
  parameters: readonly unknown[];
  /** SQLite's immediate read path, for a SELECT on a database that has one (database.ts). */
  readNow: ReadNow | undefined;
}

export interface PreparedQuery<A, O> {
  /**
   * Runs the query with `args`. `db` is the database the query is compiled for (once); pass
   * the transaction as `trx` to run it on the transaction's connection.
   */
  execute(db: Kysely<Database>, args: A, trx?: Kysely<Database>): Promise<QueryResult<O>>;
  /** The first row, if any. */
  first(db: Kysely<Database>, args: A, trx?: Kysely<Database>): Promise<O | undefined>;
  /** How many rows an INSERT, UPDATE or DELETE changed. */
  affected(db: Kysely<Database>, args: A, trx?: Kysely<Database>): Promise<bigint>;
}

/**
 * A query whose inputs are the properties of `args`, e.g.
 * `prepare((db, p: { id: string }) => db.selectFrom('clients').selectAll().where('id', '=', p.id))`.
 * Only values may depend on the arguments; a change of shape (another table, an optional
 * condition) is another prepared query.
 */
export function prepare<A extends object, O>(build: (db: Kysely<Database>, args: A) => Compilable<O>): PreparedQuery<A, O> {
  const placeholders = new Proxy({}, { get: (_, name) => new Placeholder(String(name)) }) as A;
  const byDatabase = new WeakMap<Kysely<Database>, Compiled>();
  const compiled = (db: Kysely<Database>): Compiled => {
    let entry = byDatabase.get(db);
    if (!entry) {
      const { sql, parameters, query } = build(db, placeholders).compile();
      entry = { sql, parameters, readNow: SelectQueryNode.is(query) ? immediateReads.get(db) : undefined };
      byDatabase.set(db, entry);
      nameStatement(sql);
    }
    return entry;
  };
  const valuesOf = (parameters: readonly unknown[], args: A) =>
    parameters.map((value) => (value instanceof Placeholder ? (args as Record<string, unknown>)[value.name] : value));
  const execute = (db: Kysely<Database>, args: A, trx: Kysely<Database> = db): Promise<QueryResult<O>> => {
    const { sql, parameters } = compiled(db);
    return trx.executeQuery(CompiledQuery.raw(sql, valuesOf(parameters, args)) as CompiledQuery<O>);
  };
  return {
    execute,
    async first(db, args, trx) {
      // On SQLite, a read outside any transaction skips Kysely's executor and connection
      // queue: on the bearer path they cost more than the statement (docs/performance.md).
      const { sql, parameters, readNow } = compiled(db);
      if (readNow !== undefined && (trx === undefined || trx === db)) {
        const row = readNow(sql, valuesOf(parameters, args));
        if (row !== LATER) return row as O | undefined;
      }
      return (await execute(db, args, trx)).rows[0];
    },
    affected: async (db, args, trx) => (await execute(db, args, trx)).numAffectedRows ?? 0n,
  };
}

/**
 * The names prepared texts run under on PostgreSQL (store/database.ts hands them to
 * node-postgres), so that each connection parses and plans a text once rather than on every
 * run. node-postgres requires one text per name: the name is derived from the text.
 */
const statementNames = new Map<string, string>();

/**
 * Columns chosen with `*` (`selectAll`, `returningAll`): a migration that adds a column
 * changes such a statement's result, which PostgreSQL refuses for a named one ("cached plan
 * must not change result type"), so an instance still running the previous release during a
 * rolling upgrade (docs/operations.md) would fail them. They stay unnamed; list the columns
 * (schema.ts `allColumnsOf`) to have one named. Not a `*` of columns: `count(*)`, a multiplication.
 */
const STAR = /(?:\bselect\s+(?:distinct\s+(?:on\s*\([^)]*\)\s*)?)?|\breturning\s+|,\s*)(?:"[^"]*"\.)*\*(?=[\s,)]|$)/i;

/** Whether `sql` may run as a named statement: not when it chooses columns with `*` (test/unit/prepared.test.ts). */
export function mayBeNamed(sql: string): boolean {
  return !STAR.test(sql);
}

function nameStatement(sql: string): void {
  if (!statementNames.has(sql) && mayBeNamed(sql)) statementNames.set(sql, `gh_${createHash('sha256').update(sql).digest('base64url').slice(0, 24)}`);
}

/** The statement name of a prepared query's SQL text; undefined for any other text. */
export function statementName(sql: string): string | undefined {
  return statementNames.get(sql);
}

/**
 * The query, locking the rows it reads `FOR SHARE` on PostgreSQL until the transaction ends:
 * a concurrent delete or update of them waits for the transaction, and one already under way
 * makes the query find nothing once it commits (READ COMMITTED re-reads a row it waited for).
 * SQLite has no row locks and needs none: a write transaction holds the whole database.
 */
export function lockedForShare<DB, TB extends keyof DB, O>(db: Kysely<Database>, query: SelectQueryBuilder<DB, TB, O>): SelectQueryBuilder<DB, TB, O> {
  return db.getExecutor().adapter instanceof PostgresAdapter ? query.forShare() : query;
}
