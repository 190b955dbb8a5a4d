/**
 * `npm run bench:scale`: does the cost of a token operation grow with the number of stored
 * tokens? Fills the store directly (batched inserts through Kysely, from this process) to
 * 10 k and then 1 M grants — each with an access and a refresh token — and after each level
 * measures refresh and bearer-check latency against a `gatehouse serve` process. Then adds
 * 1 M expired rows and runs `gatehouse purge` while both loads keep going, and reports the
 * request latency before, during and after the purge.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import { sql, type Insertable, type Kysely } from 'kysely';
import { parseDatabaseUrl } from '../src/config.ts';
import { openStore } from '../src/store/database.ts';
import type { AccessTokensTable, Database, GrantsTable, RefreshTokensTable, UsersTable } from '../src/store/schema.ts';
import { mintToken } from '../src/tokens.ts';
import { purgeAfterFor } from '../src/store/grants.ts';
import {
  commandLine,
  DEFAULT_POSTGRES_URL,
  count,
  createDatabase,
  exit,
  failureReport,
  fixed,
  gatehouse,
  machine,
  markdownTable,
  onCleanup,
  percentile,
  postgresProblem,
  revision,
  runLoad,
  saveResults,
  shout,
  startCeiling,
  startGatehouse,
  startLoad,
  timestamp,
  type BackendName,
  type LoadResult,
  type ServerProcess,
} from './harness.ts';

const HELP = `Usage: npm run bench:scale -- [options]

Fills a throw-away database directly (batched inserts) with grants, each with an access
and a refresh token, level by level, and after each level measures refresh and bearer
GET /api/profile against a gatehouse serve process, with a bare-Node ceiling sampled just
before (the ratio is steadier than req/s on a shared machine): they should stay flat.
Then adds expired rows and times \`gatehouse purge\` while refresh and bearer load keep
running, reporting the request latency before, during and after the purge.

Options:
  --levels <list>       grant counts to fill up to, in order (default 10k,1M)
  --ten-million         add a 10M level (off by default: about 30 M rows, tens of minutes,
                        and several GB of disk per backend)
  --purge-rows <n>      expired rows to purge under load (default 1M; 0 skips the purge)
  --backends <list>     comma-separated: sqlite,postgres (default both; PostgreSQL is skipped,
                        loudly, when it cannot be reached)
  --postgres-url <url>  administrator connection used to create and drop a throw-away database
                        (default $BENCH_POSTGRES_URL or postgres://postgres@127.0.0.1:5432/postgres)
  --connections <n>     concurrent connections per measurement (default 50)
  --requests <n>        refreshes per level (default 2000); bearer checks get 3 times as many
  -h, --help            show this text

Counts accept k and M suffixes (10k, 1M). Writes bench/results/scale-<timestamp>.json and
prints Markdown tables at the end.`;

const USERNAME = 'bench';
const FILLER_USERS = 1000;
/** Grants per INSERT statement: 8 columns × 1000 stays far below both databases' parameter limits. */
const BATCH = 1000;
const BATCHES_PER_TRANSACTION = 5;
/** The baseline before the purge and the look after it, ms. */
const WINDOW_MS = 5000;
const HOUR = 3600_000;
const DAY = 24 * HOUR;

interface Options {
  levels: number[];
  purgeRows: number;
  backends: BackendName[];
  postgresUrl: string;
  connections: number;
  requests: number;
}

function readOptions(argv: string[]): Options | null {
  const { values } = parseArgs({
    args: argv,
    options: {
      levels: { type: 'string' },
      'ten-million': { type: 'boolean' },
      'purge-rows': { type: 'string' },
      backends: { type: 'string' },
      'postgres-url': { type: 'string' },
      connections: { type: 'string' },
      requests: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help) return null;
  const levels = (values.levels ?? '10k,1M').split(',').map((raw) => count('levels', raw));
  if (values['ten-million']) levels.push(10_000_000);
  for (let i = 0; i < levels.length; i++) {
    if (levels[i]! < 1 || (i > 0 && levels[i]! <= levels[i - 1]!)) throw new Error('--levels must be positive and increasing');
  }
  const backends = (values.backends ?? 'sqlite,postgres').split(',').map((name) => name.trim());
  for (const name of backends) if (name !== 'sqlite' && name !== 'postgres') throw new Error(`--backends: unknown backend "${name}" (sqlite, postgres)`);
  const options: Options = {
    levels,
    purgeRows: count('purge-rows', values['purge-rows'] ?? '1M'),
    backends: [...new Set(backends)] as BackendName[],
    postgresUrl: values['postgres-url'] ?? DEFAULT_POSTGRES_URL,
    connections: count('connections', values.connections ?? '50'),
    requests: count('requests', values.requests ?? '2000'),
  };
  if (options.connections < 1 || options.requests < options.connections * 4) throw new Error('--requests must be at least 4 × --connections');
  return options;
}

// ---------------------------------------------------------------------------------------
// Filling the store

interface Owners {
  userIds: string[];
  clientId: string;
}

/** Live grants: refresh tokens with up to 30 days left, access tokens with up to an hour. */
function liveRows(now: number) {
  const refreshExpiresAt = now + HOUR + Math.floor(Math.random() * 29 * DAY);
  return { createdAt: refreshExpiresAt - 30 * DAY, accessExpiresAt: now + Math.floor(Math.random() * HOUR) + 60_000, refreshExpiresAt };
}

/** The grants the measurements use: their access tokens outlive any run. */
function probeRows(now: number) {
  return { createdAt: now, accessExpiresAt: now + 6 * HOUR, refreshExpiresAt: now + 30 * DAY };
}

/** Expired grants, as purge finds them: everything past its expiry. */
function expiredRows(now: number) {
  const refreshExpiresAt = now - 60_000 - Math.floor(Math.random() * DAY);
  return { createdAt: refreshExpiresAt - 30 * DAY, accessExpiresAt: refreshExpiresAt - 29 * DAY, refreshExpiresAt };
}

const SCOPES = 'annotation:read annotation:write';

function progress(label: string, done: number, total: number, started: number, last: { shown: number }): void {
  const rate = done / ((performance.now() - started) / 1000);
  const line = `  ${label}: ${done.toLocaleString('en')} / ${total.toLocaleString('en')} grants (${Math.round(rate).toLocaleString('en')} grants/s)`;
  if (process.stderr.isTTY) process.stderr.write(`\r${line}${done === total ? '\n' : ''}`);
  else if (done === total || done - last.shown >= total / 10) {
    console.error(line);
    last.shown = done;
  }
}

/**
 * Inserts `total` grants with one access and one refresh token each, in batches. Returns the
 * tokens themselves when `keep` is set (the probes the measurements use), else nothing: the
 * filler rows hold hashes of tokens nobody knows.
 */
async function insertGrants(
  db: Kysely<Database>,
  owners: Owners,
  total: number,
  shape: (now: number) => { createdAt: number; accessExpiresAt: number; refreshExpiresAt: number },
  label: string,
  keep = false,
): Promise<Array<{ access: string; refresh: string }>> {
  const kept: Array<{ access: string; refresh: string }> = [];
  const started = performance.now();
  const last = { shown: 0 };
  for (let done = 0; done < total;) {
    await db.transaction().execute(async (trx) => {
      for (let b = 0; b < BATCHES_PER_TRANSACTION && done < total; b++) {
        const n = Math.min(BATCH, total - done);
        const now = Date.now();
        const grants: Insertable<GrantsTable>[] = [];
        const access: Insertable<AccessTokensTable>[] = [];
        const refresh: Insertable<RefreshTokensTable>[] = [];
        for (let i = 0; i < n; i++) {
          const id = randomUUID();
          const times = shape(now);
          const accessToken = mintToken('access');
          const refreshToken = mintToken('refresh');
          if (keep) kept.push({ access: accessToken.token, refresh: refreshToken.token });
          const userId = owners.userIds[(done + i) % owners.userIds.length]!;
          grants.push({
            id,
            client_id: owners.clientId,
            user_id: userId,
            resource_id: 'builtin',
            scopes: SCOPES,
            created_at: times.createdAt,
            last_used_at: times.createdAt,
            revoked_at: null,
            expires_at: times.refreshExpiresAt,
            purge_after: purgeAfterFor(times.refreshExpiresAt),
          });
          access.push({ hash: accessToken.hash, grant_id: id, scopes: SCOPES, created_at: times.createdAt, expires_at: times.accessExpiresAt });
          refresh.push({ hash: refreshToken.hash, grant_id: id, created_at: times.createdAt, expires_at: times.refreshExpiresAt });
        }
        await trx.insertInto('grants').values(grants).execute();
        await trx.insertInto('access_tokens').values(access).execute();
        await trx.insertInto('refresh_tokens').values(refresh).execute();
        done += n;
      }
    });
    if (!keep) progress(label, done, total, started, last);
  }
  return kept;
}

/** The CLI-created user and client, and filler users the grants are spread over. */
async function prepareOwners(db: Kysely<Database>, databaseUrl: string): Promise<Owners> {
  const password = randomBytes(18).toString('base64url');
  await gatehouse(databaseUrl, ['user', 'create', USERNAME, '--email', `${USERNAME}@example.com`, '--admin', '--password-stdin'], password);
  const { client_id: clientId } = JSON.parse(
    await gatehouse(databaseUrl, ['client', 'create', '--name', 'Bench client', '--redirect-uri', 'http://127.0.0.1:9/callback', '--json']),
  ) as {
    client_id: string;
  };
  const { id: benchUserId } = await db.selectFrom('users').select('id').where('username_key', '=', USERNAME).executeTakeFirstOrThrow();
  const now = Date.now();
  const fillers: Insertable<UsersTable>[] = Array.from({ length: FILLER_USERS - 1 }, (_, i) => ({
    id: randomUUID(),
    username: `filler${i}`,
    username_key: `filler${i}`,
    email: `filler${i}@example.com`,
    email_key: `filler${i}@example.com`,
    display_name: null,
    password_hash: '!', // no password verifies against this
    is_admin: 0,
    disabled: 0,
    created_at: now,
  }));
  await db.insertInto('users').values(fillers).execute();
  return { userIds: [benchUserId, ...fillers.map((u) => u.id)], clientId };
}

async function countRows(db: Kysely<Database>, table: 'grants' | 'access_tokens' | 'refresh_tokens'): Promise<number> {
  const row = await db
    .selectFrom(table)
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

// ---------------------------------------------------------------------------------------
// Measuring

interface LevelRecord {
  grants: number;
  operation: 'refresh' | 'bearer GET /api/profile';
  requests: number;
  rps: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  rssMiB: number;
  /** rps as a share of the bare-Node ceiling sampled just before: steadier than rps on a busy machine. */
  ofCeiling: number;
}

interface WindowRecord {
  load: string;
  window: 'before purge' | 'during purge' | 'after purge';
  requests: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}

interface PurgeRecord {
  expiredRowsInserted: number;
  seconds: number;
  deleted: Record<string, number>;
  windows: WindowRecord[];
  failures: string[];
}

function refreshRequest(clientId: string, token: string) {
  return { method: 'POST' as const, path: '/api/token', form: { grant_type: 'refresh_token', refresh_token: token, client_id: clientId } };
}

function check(what: string, result: LoadResult): LoadResult {
  const problem = failureReport(result);
  if (problem) throw new Error(`${what}: ${problem}`);
  return result;
}

/** Requests per second of the bare-Node ceiling right now. */
async function ceilingRps(options: Options): Promise<number> {
  const ceiling = await startCeiling();
  try {
    const load = (amount: number) => runLoad({ url: ceiling.url, connections: options.connections, amount, expect: 200, next: () => ({ path: '/' }) });
    await load(options.requests);
    return check('ceiling', await load(options.requests * 4)).rps;
  } finally {
    await ceiling.stop();
  }
}

/** Refresh and bearer latency with `probes` fresh grants; the first quarter warms up. */
async function measureLevel(
  server: ServerProcess,
  owners: Owners,
  probes: Array<{ access: string; refresh: string }>,
  grants: number,
  options: Options,
): Promise<LevelRecord[]> {
  const { connections, requests } = options;
  const ceiling = await ceilingRps(options);
  const warm = probes.splice(0, Math.floor(requests / 4));
  let turn = 0;
  const bearer = (amount: number, tokens: typeof probes) =>
    runLoad({
      url: server.url,
      connections,
      amount,
      expect: 200,
      next: () => ({ path: '/api/profile', headers: { authorization: `Bearer ${tokens[turn++ % tokens.length]!.access}` } }),
    });
  const refresh = (tokens: typeof probes) =>
    runLoad({
      url: server.url,
      connections,
      amount: tokens.length,
      expect: 200,
      next: () => refreshRequest(owners.clientId, tokens.shift()?.refresh ?? 'exhausted'),
    });

  check('warm-up bearer', await bearer(requests, warm));
  check('warm-up refresh', await refresh(warm));
  const records: LevelRecord[] = [];
  for (const [operation, run] of [
    ['bearer GET /api/profile', () => bearer(requests * 3, probes)],
    ['refresh', () => refresh(probes)],
  ] as const) {
    const result = check(`${grants} grants, ${operation}`, await run());
    const record: LevelRecord = {
      grants,
      operation,
      requests: result.requests,
      rps: result.rps,
      p50Ms: result.p50,
      p99Ms: result.p99,
      maxMs: result.max,
      rssMiB: server.memory().rssMiB,
      ofCeiling: result.rps / ceiling,
    };
    records.push(record);
    console.log(
      `  ${grants.toLocaleString('en').padStart(12)} grants  ${operation.padEnd(24)} ${fixed(record.rps, 0).padStart(6)} req/s (${fixed(record.ofCeiling * 100, 1)} % of ceiling)  p50 ${fixed(record.p50Ms, 2).padStart(7)} ms  p99 ${fixed(record.p99Ms, 2).padStart(7)} ms  RSS ${fixed(record.rssMiB, 0)} MiB`,
    );
  }
  return records;
}

/**
 * Runs `gatehouse purge` (another process, as an operator or cron would) while refresh and
 * bearer load run against the server; splits the latencies by when each response finished.
 */
async function purgeUnderLoad(
  server: ServerProcess,
  databaseUrl: string,
  owners: Owners,
  probes: Array<{ access: string; refresh: string }>,
  expiredRows: number,
  options: Options,
): Promise<PurgeRecord> {
  const half = Math.max(1, Math.floor(options.connections / 2));
  const accessTokens = probes.map((p) => p.access);
  // Each refresh hands back the successor, which goes to the back of the queue: the pool never runs dry.
  const refreshTokens = probes.map((p) => p.refresh);
  let turn = 0;
  const bearer = startLoad({
    url: server.url,
    connections: half,
    expect: 200,
    next: () => ({ path: '/api/profile', headers: { authorization: `Bearer ${accessTokens[turn++ % accessTokens.length]}` } }),
  });
  const refresh = startLoad({
    url: server.url,
    connections: half,
    expect: 200,
    next: () => refreshRequest(owners.clientId, refreshTokens.shift() ?? 'exhausted'),
    check: (body) => {
      const successor = (JSON.parse(body) as { refresh_token?: string }).refresh_token;
      if (successor) refreshTokens.push(successor);
      return successor !== undefined;
    },
  });

  const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
  await pause(2 * WINDOW_MS); // the first half warms the server up; the second is the baseline
  console.log('  purging (gatehouse purge) under load…');
  const purgeStart = performance.now();
  const deleted = JSON.parse(await gatehouse(databaseUrl, ['purge', '--json'])) as Record<string, number>;
  const purgeEnd = performance.now();
  await pause(WINDOW_MS);
  bearer.stop();
  refresh.stop();
  const results = { 'bearer GET /api/profile': await bearer.result, refresh: await refresh.result };

  const windows: WindowRecord[] = [];
  const failures: string[] = [];
  for (const [load, result] of Object.entries(results)) {
    const problem = failureReport(result);
    if (problem) failures.push(`${load}: ${problem}`);
    const spans = [
      ['before purge', purgeStart - WINDOW_MS, purgeStart],
      ['during purge', purgeStart, purgeEnd],
      ['after purge', purgeEnd, purgeEnd + WINDOW_MS],
    ] as const;
    for (const [window, from, to] of spans) {
      const latencies = result.latencies.filter((_, i) => result.finishedAt[i]! >= from && result.finishedAt[i]! < to);
      windows.push({
        load,
        window,
        requests: latencies.length,
        p50Ms: percentile(latencies, 50),
        p99Ms: percentile(latencies, 99),
        maxMs: latencies.reduce((a, b) => Math.max(a, b), 0),
      });
    }
  }
  return { expiredRowsInserted: expiredRows, seconds: (purgeEnd - purgeStart) / 1000, deleted, windows, failures };
}

/** What `gatehouse purge --json` reported, in words (rows deleted through cascades are not counted by it). */
function describeDeleted(counts: Record<string, number>): string {
  const { successor_boxes: wiped = 0, ...tables } = counts;
  const deleted = Object.entries(tables).filter(([, n]) => n > 0);
  return `${deleted.map(([table, n]) => `${n.toLocaleString('en')} ${table}`).join(', ') || 'nothing'} deleted, ${wiped.toLocaleString('en')} sealed successor pairs wiped`;
}

interface BackendReport {
  backend: BackendName;
  status: 'measured' | 'failed' | 'skipped';
  reason?: string;
  fill: Array<{ grants: number; seconds: number }>;
  levels: LevelRecord[];
  purge?: PurgeRecord;
}

async function scaleBackend(backend: BackendName, options: Options): Promise<BackendReport> {
  console.log(`\n${backend}:`);
  const report: BackendReport = { backend, status: 'measured', fill: [], levels: [] };
  const database = await createDatabase(backend, options.postgresUrl);
  const store = openStore(parseDatabaseUrl(database.url));
  const closeStore = onCleanup(() => store.close());
  // The filler's own connection only: a page cache that holds the indexes keeps millions of
  // random-key inserts from re-reading pages. The server keeps its own settings.
  if (backend === 'sqlite') await sql`pragma cache_size = -1048576`.execute(store.db);
  let server: ServerProcess | null = null;
  try {
    const owners = await prepareOwners(store.db, database.url);
    let filled = 0;
    for (const level of options.levels) {
      const started = performance.now();
      await insertGrants(store.db, owners, level - filled, liveRows, `filling to ${level.toLocaleString('en')}`);
      filled = level;
      report.fill.push({ grants: level, seconds: (performance.now() - started) / 1000 });
      const probes = await insertGrants(store.db, owners, Math.floor(options.requests * 1.25), probeRows, 'probes', true);
      const grants = await countRows(store.db, 'grants');
      server = await startGatehouse(database.url);
      report.levels.push(...(await measureLevel(server, owners, probes, grants, options)));
      await server.stop();
      server = null;
    }

    if (options.purgeRows > 0) {
      const expiredGrants = Math.ceil(options.purgeRows / 3); // a grant, its access token and its refresh token
      await insertGrants(store.db, owners, expiredGrants, expiredRows, `adding ${(expiredGrants * 3).toLocaleString('en')} expired rows`);
      const probes = await insertGrants(store.db, owners, options.connections * 4, probeRows, 'probes', true);
      server = await startGatehouse(database.url);
      report.purge = await purgeUnderLoad(server, database.url, owners, probes, expiredGrants * 3, options);
      console.log(`  purged in ${fixed(report.purge.seconds, 1)} s: ${describeDeleted(report.purge.deleted)}`);
      if (report.purge.failures.length > 0) throw new Error(`requests failed during the purge: ${report.purge.failures.join('; ')}`);
    }
    return report;
  } catch (error) {
    console.error(`  ${backend}: FAILED: ${(error as Error).message}`);
    return { ...report, status: 'failed', reason: (error as Error).message };
  } finally {
    await server?.stop();
    await closeStore();
    await database.drop();
  }
}

async function main(): Promise<number> {
  const parsed = commandLine('bench:scale', HELP, readOptions);
  if ('exit' in parsed) return parsed.exit;
  const { options } = parsed;
  const startedAt = new Date().toISOString();
  const measured = revision();
  console.log(
    `Gatehouse scale bench at ${measured}: levels ${options.levels.map((l) => l.toLocaleString('en')).join(' → ')} grants, ${options.connections} connections`,
  );
  const reports: BackendReport[] = [];
  for (const backend of options.backends) {
    if (backend === 'postgres') {
      const problem = await postgresProblem(options.postgresUrl);
      if (problem) {
        shout([`PostgreSQL NOT MEASURED: ${problem}`, 'Only SQLite was measured. Set --postgres-url or BENCH_POSTGRES_URL to point at a server.']);
        reports.push({ backend, status: 'skipped', reason: problem, fill: [], levels: [] });
        continue;
      }
    }
    reports.push(await scaleBackend(backend, options));
  }

  const file = saveResults(`scale-${timestamp()}`, { kind: 'scale', startedAt, revision: measured, machine: machine(), options, backends: reports });
  const levelRows = reports.flatMap((r) =>
    r.levels.map((l) => [
      r.backend,
      l.operation,
      l.grants.toLocaleString('en'),
      fixed(l.rps, 0),
      `${fixed(l.ofCeiling * 100, 1)} %`,
      fixed(l.p50Ms, 2),
      fixed(l.p99Ms, 2),
      fixed(l.rssMiB, 0),
    ]),
  );
  console.log(`\n${markdownTable(['backend', 'operation', 'grants stored', 'req/s', 'of ceiling', 'p50 ms', 'p99 ms', 'RSS MiB'], levelRows, 3)}`);
  const purgeRows = reports.flatMap((r) =>
    (r.purge?.windows ?? []).map((w) => [r.backend, w.load, w.window, w.requests, fixed(w.p50Ms, 2), fixed(w.p99Ms, 2), fixed(w.maxMs, 1)]),
  );
  if (purgeRows.length > 0) {
    console.log(`\n${markdownTable(['backend', 'load', 'window', 'requests', 'p50 ms', 'p99 ms', 'max ms'], purgeRows, 3)}`);
    for (const r of reports) {
      if (r.purge) console.log(`- ${r.backend}: gatehouse purge took ${fixed(r.purge.seconds, 1)} s: ${describeDeleted(r.purge.deleted)}`);
    }
  }
  for (const r of reports) if (r.status !== 'measured') console.log(`- ${r.backend} ${r.status.toUpperCase()}: ${r.reason}`);
  console.log(`\nResults: ${file}`);
  return reports.some((r) => r.status === 'failed') ? 1 : 0;
}

main().then(exit, (error: unknown) => {
  console.error(`bench:scale: ${(error as Error).stack ?? error}`);
  return exit(1);
});
