/**
 * Opens the configured database as one `Kysely<Database>` for both backends and applies
 * migrations. SQLite comes from `node:sqlite` (no native add-on), PostgreSQL from `pg`.
 */
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { DatabaseSync, type StatementSync } from 'node:sqlite';
import { Kysely, Migrator, PostgresDialect, SqliteDialect, sql, type Migration, type SqliteDatabase, type SqliteStatement } from 'kysely';
import pg from 'pg';
import type { DatabaseLocation } from '../config.ts';
import type { Database } from './schema.ts';
import * as initial from './migrations/20261122_001_initial.ts';
import * as setupTokens from './migrations/20261122_002_setup_tokens.ts';
import * as audit from './migrations/20261122_003_audit.ts';
import * as successorBoxIndex from './migrations/20261122_004_successor_box_index.ts';
import * as clientKinds from './migrations/20261123_002_client_kinds.ts';

export interface Store {
  readonly db: Kysely<Database>;
  readonly kind: DatabaseLocation['kind'];
  close(): Promise<void>;
}

const migrations: Record<string, Migration> = {
  '20261122_001_initial': initial,
  '20261122_002_setup_tokens': setupTokens,
  '20261122_003_audit': audit,
  '20261122_004_successor_box_index': successorBoxIndex,
  '20261123_002_client_kinds': clientKinds,
};

/**
 * Kysely's SQLite dialect speaks the better-sqlite3 interface; `node:sqlite` differs only in
 * spreading parameters and in telling readers apart by their columns. Prepared statements
 * are cached by SQL text: Kysely emits the same text for the same query shape, so the cache
 * stays as small as the number of distinct queries.
 */
function nodeSqlite(path: string): SqliteDatabase {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
  const database = new DatabaseSync(path);
  // WAL lets readers proceed during a write; synchronous=NORMAL in WAL mode keeps every
  // committed transaction across a process crash (SIGKILL), and loses at most the last
  // few on power failure, in exchange for no fsync per commit.
  database.exec('PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 5000;');
  const cache = new Map<string, { statement: StatementSync; reader: boolean }>();
  const prepared = (text: string) => {
    let entry = cache.get(text);
    if (!entry) {
      const statement = database.prepare(text);
      entry = { statement, reader: statement.columns().length > 0 };
      if (cache.size >= 500) cache.clear();
      cache.set(text, entry);
    }
    return entry;
  };
  type Bindings = Parameters<StatementSync['all']>;
  return {
    close: () => database.close(),
    prepare(text: string): SqliteStatement {
      const { statement, reader } = prepared(text);
      return {
        reader,
        all: (parameters) => statement.all(...(parameters as Bindings)),
        run: (parameters) => statement.run(...(parameters as Bindings)),
        iterate: (parameters) => statement.iterate(...(parameters as Bindings)),
      };
    },
  };
}

/** BIGINT (epoch milliseconds) and COUNT(*) come back as numbers, as they do from SQLite. */
const pgTypes = {
  getTypeParser(oid: number, format?: 'text' | 'binary') {
    if (oid === pg.types.builtins.INT8) return (value: string) => Number(value);
    return pg.types.getTypeParser(oid, format);
  },
};

function postgresPool(url: string): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max: 10, types: pgTypes });
  // An idle connection that dies (a database restart, an administrator's kill) is reported
  // here; without a listener it would crash the process. The pool has already dropped it and
  // opens a fresh one on demand, and the next query that fails says so where it matters.
  pool.on('error', () => {});
  return pool;
}

export function openStore(location: DatabaseLocation): Store {
  const db =
    location.kind === 'sqlite'
      ? new Kysely<Database>({ dialect: new SqliteDialect({ database: nodeSqlite(location.path) }) })
      : new Kysely<Database>({ dialect: new PostgresDialect({ pool: postgresPool(location.url) }) });
  return { db, kind: location.kind, close: () => db.destroy() };
}

/** Applies pending migrations; returns the names applied. Safe to run from several instances at once. */
export async function migrate(store: Store): Promise<string[]> {
  const migrator = new Migrator({ db: store.db, provider: { getMigrations: async () => migrations } });
  const { error, results } = await migrator.migrateToLatest();
  if (error) throw error;
  return (results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);
}

/** True when the database answers a trivial query. */
export async function isHealthy(store: Store): Promise<boolean> {
  try {
    await sql`select 1`.execute(store.db);
    return true;
  } catch {
    return false;
  }
}
