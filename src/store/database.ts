/**
 * Opens the configured database as one `Kysely<Database>` for both backends and applies
 * migrations. SQLite comes from `node:sqlite` (no native add-on), PostgreSQL from `pg`.
 */
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { DatabaseSync, type StatementSync } from 'node:sqlite';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  CompiledQuery,
  Kysely,
  Migrator,
  PostgresDialect,
  SqliteDialect,
  SqliteDriver,
  sql,
  type DatabaseConnection,
  type Driver,
  type Migration,
  type PostgresPool,
  type PostgresPoolClient,
  type SqliteDatabase,
  type SqliteStatement,
} from 'kysely';
import type pg from 'pg';
import type { DatabaseLocation } from '../config.ts';
import { writeAlone } from './group-commit.ts';
import { LATER, registerReadNow, statementName, type ReadNow } from './prepared.ts';
import type { Database } from './schema.ts';

export interface Store {
  readonly db: Kysely<Database>;
  readonly kind: DatabaseLocation['kind'];
  /** How many statements have been sent to the database so far (BEGIN and COMMIT included): on PostgreSQL, each is a round trip. */
  statements(): number;
  close(): Promise<void>;
}

/** Counts the statements a store sends, where they leave for the database. */
interface StatementCounter {
  sent: number;
}

/** Every migration's name (its file in ./migrations/), in the order they apply. */
const MIGRATIONS = [
  '20261122_001_initial',
  '20261122_002_setup_tokens',
  '20261122_003_audit',
  '20261122_004_successor_box_index',
  '20261122_005_device_codes',
  '20261123_001_resources',
  '20261123_002_client_kinds',
  '20261123_003_fewer_pages_per_write',
  '20261126_001_consent_redirect_origin',
  '20261126_002_canonical_client_blocks',
  '20261126_003_signing_keys',
  '20261126_004_resource_token_settings',
  '20261126_005_auth_time',
  '20261126_006_openid',
  '20261126_007_backchannel_logout',
  '20261126_008_private_key_jwt',
  '20261126_010_passkeys',
  '20261126_011_second_factors',
  '20261126_009_jwt_grants',
  '20261127_001_fan_out_messages',
  '20261128_001_connections',
  '20261128_002_switches',
  '20261129_001_backchannel_logout_address',
  '20261130_001_account_life_cycle',
  '20261201_001_replay_box',
  '20261202_001_dpop',
  '20261202_002_pushed_requests',
  '20261203_001_token_exchange',
  '20261203_002_kept_provider_tokens',
] as const;

/**
 * Every migration by name, in order; exported for the migration tests, which stop part-way.
 * Each file is loaded when its migration runs: a command on an up-to-date database (most of
 * them) does not load them at all.
 */
export const migrations: Record<string, Migration> = Object.fromEntries(
  MIGRATIONS.map((name) => {
    const load = (): Promise<Migration> => import(`./migrations/${name}.ts`);
    return [name, { up: async (db) => (await load()).up(db), down: async (db) => (await load()).down!(db) }];
  }),
);

/**
 * The most pages the WAL holds before the commit that crosses it copies them back into the
 * database file (SQLite's default is 1,000; 10,000 pages of 4 KiB is 40 MiB). Copying a page
 * modified by many commits costs once per checkpoint, so fewer, larger checkpoints copy less
 * per request: measured (bench/wal-pages.ts), a refresh's share fell from 5.1 pages at 1,000
 * to 1.4 at 10,000. The serving process checkpoints on a timer, on a thread of its own
 * (checkpointer.ts), so that this bound is reached only under heavy write load or if that thread is late.
 */
const WAL_AUTOCHECKPOINT_PAGES = 10_000;

/**
 * Kysely's SQLite dialect speaks the better-sqlite3 interface; `node:sqlite` differs only in
 * spreading parameters and in telling readers apart by their columns. Prepared statements
 * are cached by SQL text: Kysely emits the same text for the same query shape, so the cache
 * stays as small as the number of distinct queries. Besides the interface Kysely speaks, it
 * gives the reads that may run at once without Kysely's connection queue (`readNow`).
 */
function nodeSqlite(path: string, counter: StatementCounter): { database: SqliteDatabase; readNow: ReadNow } {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
  const database = new DatabaseSync(path);
  // WAL lets readers proceed during a write; synchronous=NORMAL in WAL mode keeps every
  // committed transaction across a process crash (SIGKILL), and loses at most the last
  // few on power failure, in exchange for no fsync per commit. busy_timeout = 0: SQLite's
  // own wait for another process's write lock sleeps on this (the only) thread; the driver
  // below waits asynchronously instead. wal_autocheckpoint: see WAL_AUTOCHECKPOINT_PAGES.
  database.exec(
    `PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 0;
     PRAGMA wal_autocheckpoint = ${WAL_AUTOCHECKPOINT_PAGES};`,
  );
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
    database: {
      close: () => database.close(),
      prepare(text: string): SqliteStatement {
        const { statement, reader } = prepared(text);
        return {
          reader,
          all: (parameters) => (counter.sent++, statement.all(...(parameters as Bindings))),
          run: (parameters) => (counter.sent++, statement.run(...(parameters as Bindings))),
          iterate: (parameters) => (counter.sent++, statement.iterate(...(parameters as Bindings))),
        };
      },
    },
    readNow(text, parameters) {
      // The one connection is shared by every request. While a transaction is open on it
      // (between BEGIN and COMMIT or ROLLBACK, across the awaits of the request that opened
      // it), a read here would see that transaction's uncommitted writes, and then maybe
      // their rollback: such a read takes its turn behind the transaction instead, as every
      // Kysely query does. Outside one, SQLite is in autocommit mode, the statement runs to
      // its end before anything else can, and it sees only what is committed.
      if (database.isTransaction) return LATER;
      try {
        const row = prepared(text).statement.get(...(parameters as Bindings));
        counter.sent++;
        return row;
      } catch (error) {
        if (isBusy(error)) return LATER; // another process's lock: the queued path waits for it
        throw error;
      }
    },
  };
}

/** How long a statement waits for another process's write lock before it fails, as busy_timeout did. */
const LOCK_WAIT_MS = 5000;
/** The longest pause between two attempts: short, so that a lock released between a purge's batches is caught. */
const LOCK_RETRY_MAX_MS = 8;

const isBusy = (error: unknown) => ((error as { errcode?: number }).errcode ?? 0) % 256 === 5; // SQLITE_BUSY and its extended codes

/** Runs `attempt` until it does not meet SQLITE_BUSY, pausing with backoff (the event loop stays free), for up to LOCK_WAIT_MS. */
async function whenUnlocked<T>(attempt: () => Promise<T>): Promise<T> {
  const deadline = performance.now() + LOCK_WAIT_MS;
  for (let pause = 1; ; pause = Math.min(pause * 2, LOCK_RETRY_MAX_MS)) {
    try {
      return await attempt();
    } catch (error) {
      if (!isBusy(error) || performance.now() >= deadline) throw error;
    }
    await sleep(pause);
  }
}

/**
 * Kysely's SQLite driver, with the write lock waited for asynchronously: another process
 * (`gatehouse purge` from cron) may hold it. A transaction begins IMMEDIATE, taking the write
 * lock before its first statement, so it is the `begin` that waits and is retried — never a
 * statement halfway through a transaction, and holding the lock, none of its statements can
 * meet SQLITE_BUSY later (in WAL mode a commit needs no further lock). A statement outside a
 * transaction commits on its own, or does nothing when it meets SQLITE_BUSY: retrying it is safe.
 * While a write waits, this process's one connection stays its own, so other queries queue
 * behind it as behind a running transaction; the thread meanwhile serves everything else.
 */
class LockWaitingSqliteDriver extends SqliteDriver {
  #inTransaction = false;

  override async acquireConnection(): Promise<DatabaseConnection> {
    const connection = await super.acquireConnection();
    return {
      executeQuery: (query) => (this.#inTransaction ? connection.executeQuery(query) : whenUnlocked(() => connection.executeQuery(query))),
      streamQuery: (query, chunkSize) => connection.streamQuery(query, chunkSize),
    };
  }

  override async beginTransaction(connection: DatabaseConnection): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw('begin immediate'));
    this.#inTransaction = true;
  }

  override async commitTransaction(connection: DatabaseConnection): Promise<void> {
    await super.commitTransaction(connection);
    this.#inTransaction = false;
  }

  override async rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    this.#inTransaction = false;
    await super.rollbackTransaction(connection);
  }
}

class LockWaitingSqliteDialect extends SqliteDialect {
  readonly #database: SqliteDatabase;
  constructor(database: SqliteDatabase) {
    super({ database });
    this.#database = database;
  }
  override createDriver(): Driver {
    return new LockWaitingSqliteDriver({ database: this.#database });
  }
}

/** node-postgres, loaded when a PostgreSQL database is first used: a command on SQLite never loads it. */
async function postgresPool(url: string, counter: StatementCounter): Promise<PostgresPool> {
  const { default: pg } = await import('pg');
  // BIGINT (epoch milliseconds) and COUNT(*) come back as numbers, as they do from SQLite.
  const types = {
    getTypeParser(oid: number, format?: 'text' | 'binary') {
      if (oid === pg.types.builtins.INT8) return (value: string) => Number(value);
      return pg.types.getTypeParser(oid, format);
    },
  };
  const pool = new pg.Pool({ connectionString: url, max: 10, types });
  // An idle connection that dies (a database restart, an administrator's kill) is reported
  // here; without a listener it would crash the process. The pool has already dropped it and
  // opens a fresh one on demand, and the next query that fails says so where it matters.
  pool.on('error', () => {});
  // Kysely asks the pool for the interface it declares (PostgresPool); each pooled connection
  // gets one wrapper, so that Kysely, which keys its connections by client, sees the same one.
  // The wrapper counts the statements, and runs those of prepared queries (prepared.ts) as
  // named statements: node-postgres sends every other one unnamed, and PostgreSQL parses and
  // plans an unnamed statement anew each time.
  const wrappers = new WeakMap<pg.PoolClient, PostgresPoolClient>();
  const wrap = (client: pg.PoolClient): PostgresPoolClient => ({
    // Only the (text, values) form: the other takes a cursor, and the dialect has none configured.
    query: ((text: string, values: unknown[]) => {
      counter.sent++;
      const name = statementName(text);
      return name === undefined ? client.query(text, values) : client.query({ name, text, values });
    }) as unknown as PostgresPoolClient['query'],
    release: () => client.release(),
  });
  return {
    async connect() {
      const client = await pool.connect();
      let wrapper = wrappers.get(client);
      if (!wrapper) wrappers.set(client, (wrapper = wrap(client)));
      return wrapper;
    },
    end: () => pool.end(),
  };
}

export function openStore(location: DatabaseLocation): Store {
  const counter: StatementCounter = { sent: 0 };
  const statements = () => counter.sent;
  if (location.kind === 'sqlite') {
    const { database, readNow } = nodeSqlite(location.path, counter);
    const db = new Kysely<Database>({ dialect: new LockWaitingSqliteDialect(database) });
    registerReadNow(db, readNow);
    if (!location.groupCommit) writeAlone(db);
    return { db, kind: location.kind, statements, close: () => db.destroy() };
  }
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool: () => postgresPool(location.url, counter) }) });
  return { db, kind: location.kind, statements, close: () => db.destroy() };
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

/**
 * Whether `error` is the database refusing a row that a unique key already has — on
 * PostgreSQL SQLSTATE 23505, on SQLite a UNIQUE or PRIMARY KEY constraint: a concurrent
 * writer got there first, which the caller may look again at.
 */
export function isUniqueViolation(error: unknown): boolean {
  const { code, errcode, message } = error as { code?: unknown; errcode?: unknown; message?: unknown };
  if (code === '23505') return true;
  // SQLITE_CONSTRAINT_UNIQUE (2067) and SQLITE_CONSTRAINT_PRIMARYKEY (1555).
  return errcode === 2067 || errcode === 1555 || (typeof message === 'string' && /^UNIQUE constraint failed/.test(message));
}
