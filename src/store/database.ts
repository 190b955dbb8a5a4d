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
  PostgresDriver,
  SqliteDialect,
  SqliteDriver,
  sql,
  type DatabaseConnection,
  type Driver,
  type PostgresDialectConfig,
  type Migration,
  type PostgresPool,
  type PostgresPoolClient,
  type SqliteDatabase,
  type SqliteStatement,
} from 'kysely';
import type pg from 'pg';
import type { DatabaseLocation } from '../config.ts';
import { abortable } from '../protocol/abortable.ts';
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
  '20261204_001_token_epochs',
  '20261205_001_grant_purge_day',
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
  const pool = new pg.Pool({
    connectionString: url,
    max: 10,
    types,
    // A connection that cannot be had in this long — the database down or unreachable, or every
    // connection busy that long — fails the request (503, databaseUnavailable) instead of holding it.
    connectionTimeoutMillis: CONNECTION_WAIT_MS,
    // The operating system probes an idle connection, so that one whose peer is gone without a word
    // (a partition, a failover) is found and dropped rather than handed to a request.
    keepAlive: true,
    keepAliveInitialDelayMillis: KEEPALIVE_DELAY_MS,
  });
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
  const wrap = (client: pg.PoolClient): PostgresPoolClient => {
    // A connection lost while a request holds it (a database restart, a partition) fails that
    // request's query, and node-postgres emits 'error' too: the pool listens only while the
    // connection is idle, and an event nobody listens to would end the process. The pool drops
    // the connection when it is released (it is no longer queryable).
    client.on('error', () => {});
    return {
      // Only the (text, values) form: the other takes a cursor, and the dialect has none configured.
      query: ((text: string, values: unknown[]) => {
        counter.sent++;
        const name = statementName(text);
        return name === undefined ? client.query(text, values) : client.query({ name, text, values });
      }) as unknown as PostgresPoolClient['query'],
      release: () => client.release(),
    };
  };
  return {
    async connect() {
      let client: pg.PoolClient;
      try {
        client = await pool.connect();
      } catch (error) {
        // A wrong password, a database that does not exist, a certificate refused: not a moment's outage, and not answered as one.
        const reason = error instanceof Error ? transientFailure(error) : null;
        throw reason === null ? error : new NoConnection(`cannot reach the database (${reason})`, { cause: error });
      }
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
  const db = new Kysely<Database>({ dialect: new ErrorKeepingPostgresDialect({ pool: () => postgresPool(location.url, counter) }) });
  return { db, kind: location.kind, statements, close: () => db.destroy() };
}

/**
 * Kysely's PostgreSQL driver, but a transaction's ROLLBACK that fails because its connection
 * broke (node-postgres: "…is not queryable") does not replace the error that ended the
 * transaction — Kysely throws whatever the rollback throws — which is the one to answer and
 * log. PostgreSQL rolls back a transaction whose connection ends; the pool drops the
 * connection on release.
 */
class ErrorKeepingPostgresDriver extends PostgresDriver {
  override async rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    await super.rollbackTransaction(connection).catch((error: Error) => {
      if (!/is not queryable$/.test(error.message) && transientFailure(error) === null) throw error;
    });
  }
}

class ErrorKeepingPostgresDialect extends PostgresDialect {
  readonly #config: PostgresDialectConfig;
  constructor(config: PostgresDialectConfig) {
    super(config);
    this.#config = config;
  }
  override createDriver(): Driver {
    return new ErrorKeepingPostgresDriver(this.#config);
  }
}

/** Applies pending migrations; returns the names applied. Safe to run from several instances at once. */
export async function migrate(store: Store): Promise<string[]> {
  const migrator = new Migrator({ db: store.db, provider: { getMigrations: async () => migrations } });
  const { error, results } = await migrator.migrateToLatest();
  if (error) throw error;
  return (results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);
}

/** True when the database answers a trivial query within CONNECTION_WAIT_MS. */
export async function isHealthy(store: Store): Promise<boolean> {
  const deadline = AbortSignal.timeout(CONNECTION_WAIT_MS);
  try {
    // A connection already open whose peer has gone silent would never answer: the check gives up.
    await abortable(sql`select 1`.execute(store.db), deadline);
    return true;
  } catch {
    return false;
  }
}

/** How long a request waits for a PostgreSQL connection, and the health check for an answer. */
export const CONNECTION_WAIT_MS = 5000;

/** After this long idle, the operating system begins probing a PostgreSQL connection (TCP keep-alive). */
export const KEEPALIVE_DELAY_MS = 10_000;

/** A PostgreSQL connection that could not be had for a moment (transientFailure), or not within CONNECTION_WAIT_MS: nothing was sent. */
class NoConnection extends Error {
  override name = 'NoConnection';
}

/** A read that PostgreSQL did not answer within CONNECTION_WAIT_MS (its connection gone silent): a 503, as when none could be had. */
class NoAnswer extends Error {
  override name = 'NoAnswer';
}

/**
 * `read`, or a failure answered 503 (`databaseUnavailable`) once CONNECTION_WAIT_MS has passed
 * without its answer: for a read that many requests wait for (shared-reads.ts), so that a
 * connection gone silent under it holds them for seconds, not until the operating system's
 * keep-alive gives up on it. For reads only: a write's outcome would be left unknown.
 */
export function readWithinWait<T>(read: Promise<T>): Promise<T> {
  const deadline = AbortSignal.timeout(CONNECTION_WAIT_MS);
  return abortable(read, deadline).catch((error: unknown) => {
    throw deadline.aborted ? new NoAnswer(`the database did not answer a read within ${CONNECTION_WAIT_MS / 1000} s`) : error;
  });
}

/** The operating system's errors of a connection refused, reset or timed out. */
const CONNECTION_ERRNOS = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'ENETUNREACH']);

/**
 * SQLSTATEs with which PostgreSQL (or a pooler before it) says it cannot serve now: class 08
 * (connection exception; PgBouncer says 08P01 when its server connection broke); 57P01–57P03,
 * the server shutting down or starting; 53300, too many connections; 25006, a read-only
 * transaction (a standby, after a failover).
 */
const UNAVAILABLE_SQLSTATE = /^(08...|57P0[1-3]|53300|25006)$/;
/** Of those, the ones that leave the statement's outcome unknown: 08007, transaction resolution unknown; 08P01, a connection broken (PgBouncer). */
const OUTCOME_UNKNOWN_SQLSTATE = new Set(['08007', '08P01']);

/** Why `error` is a failure of the connection, or the server saying it cannot serve now — not of the statement — or null. */
function transientFailure(error: Error): string | null {
  const { code } = error as { code?: unknown };
  if (typeof code === 'string' && (CONNECTION_ERRNOS.has(code) || UNAVAILABLE_SQLSTATE.test(code))) return code;
  // node-postgres's own: the connection ended (under a query, or while opening), or none came in time (pg-pool).
  if (/^(Connection terminated|timeout exceeded when trying to connect)/.test(error.message)) return error.message;
  return null;
}

export interface Unavailability {
  /** For the log: a code or node-postgres's own words, never a statement or its values. */
  readonly reason: string;
  /** The connection broke while a statement ran: it may have taken effect (a commit whose answer was lost). */
  readonly outcomeUnknown: boolean;
}

/**
 * Whether `error` means the database cannot be used for a moment — PostgreSQL down,
 * restarting, unreachable, out of connections or failed over, or SQLite locked by another
 * process past LOCK_WAIT_MS — and whether the failing statement may have taken effect; null
 * when it is anything else. Such a request is answered 503: nothing about it was wrong.
 */
export function databaseUnavailable(error: unknown): Unavailability | null {
  if (!(error instanceof Error)) return null;
  if (error instanceof NoConnection || error instanceof NoAnswer) return { reason: error.message, outcomeUnknown: false };
  if (isBusy(error)) return { reason: 'another process holds the SQLite write lock', outcomeUnknown: false };
  const reason = transientFailure(error);
  if (reason === null) return null;
  const { code } = error as { code?: unknown };
  // PostgreSQL answered with a SQLSTATE: the statement failed, and did nothing. Without one, the connection broke under it.
  const answered = typeof code === 'string' && UNAVAILABLE_SQLSTATE.test(code) && !OUTCOME_UNKNOWN_SQLSTATE.has(code);
  return { reason, outcomeUnknown: !answered };
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
