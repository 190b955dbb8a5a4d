/**
 * What `npm run bench` and `npm run bench:scale` share: throw-away databases, Gatehouse and
 * the bare-Node ceiling as separate processes, the `gatehouse` CLI, and a load generator
 * (autocannon, in this process) that hands every request fresh input and counts every
 * response that is not the expected one.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, release, tmpdir, totalmem, type } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import { freePort } from '../test/support/ports.ts';
import pg from 'pg';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));
export const DEFAULT_POSTGRES_URL = process.env.BENCH_POSTGRES_URL || 'postgres://postgres@127.0.0.1:5432/postgres';

// ---------------------------------------------------------------------------------------
// Clean-up that also runs on Ctrl-C, so an interrupted run leaves no database or process.

const cleanups = new Set<() => Promise<void>>();

/**
 * Runs `fn` when the caller calls the returned function, or on SIGINT/SIGTERM, whichever
 * comes first (once).
 */
export function onCleanup(fn: () => Promise<void>): () => Promise<void> {
  let done: Promise<void> | null = null;
  const once = () => {
    cleanups.delete(once);
    done ??= fn().catch((error: unknown) => console.error(`clean-up failed: ${(error as Error).message}`));
    return done;
  };
  cleanups.add(once);
  return once;
}

let interrupted: Promise<void> | null = null;

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    console.error(`\n${signal}: cleaning up`);
    interrupted = (async () => {
      // Last registered first (a server before its database), one at a time; whatever the run
      // was still starting registers its clean-up too, so keep going until none is left.
      while (cleanups.size > 0) await [...cleanups].at(-1)!();
      process.exit(130);
    })();
  });
}

/** Exits with `code`; after an interrupt, only once everything is cleaned up (then with 130). */
export async function exit(code: number): Promise<never> {
  await interrupted;
  process.exit(code);
}

function refuseAfterInterrupt(): void {
  if (interrupted) throw new Error('interrupted');
}

// ---------------------------------------------------------------------------------------
// Databases

export type BackendName = 'sqlite' | 'postgres';

export interface BenchDatabase {
  kind: BackendName;
  url: string;
  drop(): Promise<void>;
}

/** Why PostgreSQL cannot be used at `adminUrl`, or null when it answers. */
export async function postgresProblem(adminUrl: string): Promise<string | null> {
  const client = new pg.Client({ connectionString: adminUrl, connectionTimeoutMillis: 3000 });
  try {
    await client.connect();
    await client.query('select 1');
    return null;
  } catch (error) {
    return `cannot connect to ${new URL(adminUrl).host} (${(error as Error).message || (error as { code?: string }).code})`;
  } finally {
    await client.end().catch(() => {});
  }
}

/** Prints a banner nobody can miss. */
export function shout(lines: string[]): void {
  const banner = '!'.repeat(78);
  console.error(`\n${banner}\n${lines.map((line) => `!! ${line}`).join('\n')}\n${banner}\n`);
}

/** A fresh, empty database of `kind`, dropped by `drop()` or when the run is interrupted. */
export async function createDatabase(kind: BackendName, postgresAdminUrl: string): Promise<BenchDatabase> {
  refuseAfterInterrupt();
  if (kind === 'sqlite') {
    const dir = scratchDirectory();
    return { kind, url: `sqlite:${join(dir.path, 'gatehouse.db')}`, drop: dir.remove };
  }
  const name = `gatehouse_bench_${randomBytes(6).toString('hex')}`;
  const admin = async (statement: string) => {
    const client = new pg.Client({ connectionString: postgresAdminUrl });
    await client.connect();
    try {
      await client.query(statement);
    } finally {
      await client.end();
    }
  };
  const created = admin(`create database ${name}`);
  // Registered before the creation finishes, so that an interrupt meanwhile still drops it.
  const drop = onCleanup(async () => {
    await created.catch(() => {});
    await admin(`drop database if exists ${name} with (force)`);
  });
  await created;
  const url = new URL(postgresAdminUrl);
  url.pathname = `/${name}`;
  return { kind, url: url.href, drop };
}

// ---------------------------------------------------------------------------------------
// Processes

/**
 * Runs `gatehouse <args>` against `databaseUrl`; resolves with its standard output. `checkout`
 * is the repository whose src/main.ts runs (another worktree, to compare commits).
 */
export function gatehouse(databaseUrl: string, args: string[], input = '', checkout = ROOT): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['src/main.ts', ...args], { cwd: checkout, env: { ...process.env, DATABASE_URL: databaseUrl } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => (stdout += chunk));
    child.stderr.on('data', (chunk) => (stderr += chunk));
    child.once('error', reject);
    child.once('exit', (code) =>
      code === 0 ? resolve(stdout) : reject(new Error(`gatehouse ${args.slice(0, 2).join(' ')} exited with ${code}: ${stderr.trim()}`)),
    );
    child.stdin.end(input);
  });
}

export interface Memory {
  /** Resident set size now, MiB. */
  rssMiB: number;
  /** The highest resident set size so far, MiB. */
  peakMiB: number;
}

export interface ServerProcess {
  url: string;
  pid: number;
  /** The V8 inspector's WebSocket URL, when started with `inspect`. */
  inspectorUrl: string | null;
  memory(): Memory;
  /** CPU time the process has used so far (user + system, all threads), ms. */
  cpuMs(): number;
  /** SIGTERM, then SIGKILL if it has not exited within 10 s. */
  stop(): Promise<void>;
  /** The process and, with WORKERS > 1, its workers. */
  processes?: () => number[];
}

/** The process's memory from /proc (Linux); NaN once it has exited. */
export function processMemory(pid: number): Memory {
  let status = '';
  try {
    status = readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    // gone
  }
  const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN);
  return { rssMiB: kib('VmRSS') / 1024, peakMiB: kib('VmHWM') / 1024 };
}

const CLOCK_TICKS_PER_SECOND = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout?.trim()) || 100;

/** The fields of /proc/<pid>/stat after the command name (the first is the state, the second the parent's id); undefined once it has exited. */
function statFields(pid: number): string[] | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  // The command name (field 2) may hold spaces; the fields after its closing parenthesis do not.
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
}

/**
 * The process's CPU time (utime + stime, all threads) from /proc (Linux), ms; with `reaped`,
 * also that of the children it has waited for (cutime + cstime); NaN once it has exited.
 */
export function processCpuMs(pid: number, options: { reaped?: boolean } = {}): number {
  const fields = statFields(pid);
  if (fields === undefined) return NaN;
  const ticks = [11, 12, ...(options.reaped ? [13, 14] : [])].reduce((sum, i) => sum + Number(fields[i]), 0);
  return (ticks * 1000) / CLOCK_TICKS_PER_SECOND;
}

/**
 * The CPU time (ms) the PostgreSQL server behind `url` has used so far — its main process, its
 * backends, WAL writer and checkpointer, and the backends that have exited (the main process
 * reaps them, and their time becomes its children's) — when that server runs on this machine;
 * null when it does not (its work is then on another machine's cores), when its processes are
 * not visible from here, or when this is not Linux.
 */
export async function localPostgresCpu(url: string): Promise<(() => number) | null> {
  const { hostname, searchParams } = new URL(url);
  const local = ['127.0.0.1', 'localhost', '[::1]'].includes(hostname) || (searchParams.get('host') ?? '').startsWith('/');
  if (!local || !existsSync('/proc/self/stat')) return null;
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  let main: string | undefined;
  try {
    const backend = (await client.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
    main = statFields(backend)?.[1]; // the parent of the backend serving this connection, read while it lives
  } finally {
    await client.end();
  }
  if (main === undefined) return null;
  const mainPid = Number(main);
  const children = () => readdirSync('/proc').filter((pid) => /^\d+$/.test(pid) && statFields(Number(pid))?.[1] === main);
  return () => processCpuMs(mainPid, { reaped: true }) + children().reduce((sum, pid) => sum + (processCpuMs(Number(pid)) || 0), 0);
}

/**
 * Starts `node <args>` and waits until `GET <url><readyPath>` answers 200. The last few
 * kilobytes of its stderr are kept, to explain a failed start.
 */
async function startProcess(
  args: string[],
  env: NodeJS.ProcessEnv,
  url: string,
  readyPath: string,
  options: { inspect: boolean; quiet: boolean; cwd?: string },
): Promise<ServerProcess> {
  refuseAfterInterrupt();
  const { inspect, quiet } = options;
  const child: ChildProcess = spawn(process.execPath, [...(inspect ? ['--inspect=127.0.0.1:0'] : []), ...args], {
    cwd: options.cwd ?? ROOT,
    env,
    stdio: ['ignore', quiet ? 'ignore' : 'inherit', 'pipe'],
  });
  let stderr = '';
  let exited: string | null = null;
  child.stderr!.on('data', (chunk) => {
    const text = String(chunk);
    stderr = (stderr + text).slice(-4096);
    // The inspector's own chatter is expected; anything else the server says goes through.
    const rest = text.split('\n').filter((line) => line !== '' && !/^(Debugger (listening|attached|ending)|For help, see|Waiting for the debugger)/.test(line));
    if (rest.length > 0) process.stderr.write(`[server] ${rest.join('\n[server] ')}\n`);
  });
  const exit = new Promise<void>((resolve) => child.once('exit', (code, signal) => ((exited = `exited with ${signal ?? code}`), resolve())));
  const stop = onCleanup(async () => {
    if (exited !== null) return;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await exit;
    clearTimeout(timer);
  });

  // 90 s: two workers loading the app on a busy 2-core machine have taken 15-30 s.
  const deadline = Date.now() + 90_000;
  for (;;) {
    if (exited !== null) throw new Error(`${args[0]} ${exited} before it was ready:\n${stderr}`);
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`${args[0]} did not answer on ${url}${readyPath} within 90 s:\n${stderr}`);
    }
    const ready = await fetch(url + readyPath).then(
      (response) => response.status === 200,
      () => false,
    );
    if (ready && (!inspect || /ws:\/\/\S+/.test(stderr))) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return {
    url,
    pid: child.pid!,
    inspectorUrl: inspect ? /ws:\/\/\S+/.exec(stderr)![0] : null,
    memory: () => processMemory(child.pid!),
    cpuMs: () => processCpuMs(child.pid!),
    stop,
  };
}

/**
 * `gatehouse serve` on a free loopback port, without its purge schedule. At the default
 * LOG_LEVEL=warn its log (stdout) comes through; below that — one line per request — it is
 * thrown away, so that measuring the cost of logging does not also measure this terminal.
 * `checkout` is the repository whose src/main.ts serves (default this one).
 */
export async function startGatehouse(
  databaseUrl: string,
  options: {
    inspect?: boolean;
    logLevel?: string;
    checkout?: string;
    workers?: number;
    cpus?: string | null;
    nodeOptions?: string;
    /** false: no throttling counters at all (0 = off); default: counters running, far above the load. */
    throttles?: boolean;
    /** Where bench/probe.ts, loaded into the server, writes what it sees (null: not loaded). */
    probe?: Probe | null;
    /** PURGE_INTERVAL_SECONDS (default 0: none). */
    purgeSeconds?: number;
  } = {},
): Promise<ServerProcess> {
  const logLevel = options.logLevel ?? 'warn';
  const unlimited = options.throttles === false ? '0' : '1000000000';
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const env = {
    ...process.env,
    DATABASE_URL: databaseUrl,
    PORT: String(port),
    HOST: '127.0.0.1',
    PUBLIC_URL: url,
    LOG_LEVEL: logLevel,
    WORKERS: String(options.workers ?? 1),
    // The bench purges when it means to (bench:scale), not in the middle of a phase.
    PURGE_INTERVAL_SECONDS: String(options.purgeSeconds ?? 0),
    // All the load comes from one address and one client: keep the token endpoint's
    // counters running (their cost is part of every request) but far above what we send —
    // or, with `throttles: false`, none at all (0 turns a counter off).
    TOKEN_REQUESTS_PER_CLIENT: unlimited,
    TOKEN_REQUESTS_PER_ADDRESS: unlimited,
    // Likewise the /device form's guess counters: every approval reserves a guess of the one
    // user until the code proves right, and 50 approvals in flight would pass the 10 a user has.
    LOGIN_FAILURES_PER_ACCOUNT: unlimited,
    LOGIN_FAILURES_PER_ADDRESS: unlimited,
    // Node's own flags for the server alone (not the load generator), e.g. a smaller young generation;
    // and the probe, when asked for.
    ...probeEnvironment(options.probe ?? null, options.nodeOptions ?? ''),
  };
  const quiet = ['info', 'debug', 'trace'].includes(logLevel);
  const server = await startProcess(['src/main.ts', 'serve'], env, url, '/_status', { inspect: options.inspect ?? false, quiet, cwd: options.checkout });
  // With WORKERS > 1 the server is the primary and its workers: pinned together, measured together.
  const processes = () => [server.pid, ...childrenOf(server.pid)];
  if (options.cpus) for (const pid of processes()) spawnSync('taskset', ['-acp', options.cpus, String(pid)], { stdio: 'ignore' });
  return {
    ...server,
    processes,
    // The primary's CPU alone would leave out the workers' (they are its children, not its threads).
    cpuMs: () => processes().reduce((sum, pid) => sum + processCpuMs(pid), 0),
    memory: () =>
      processes()
        .map(processMemory)
        .reduce((sum, one) => ({ rssMiB: sum.rssMiB + one.rssMiB, peakMiB: sum.peakMiB + one.peakMiB })),
  };
}

function childrenOf(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/**
 * Where to run the server's `workers` processes and the load generator (this process) so
 * that they do not compete for a core: the server on cores 1…workers, the load on core 0,
 * when `taskset` (util-linux) exists and the machine has a core to spare; else nowhere
 * (null), with the reason.
 */
export function pinning(workers: number): { server: string | null; note: string } {
  const cores = cpus().length;
  if (spawnSync('taskset', ['-V'], { stdio: 'ignore' }).status !== 0) return { server: null, note: 'not pinned: no taskset' };
  if (cores < workers + 1)
    return { server: null, note: `not pinned: ${workers} worker(s) and the load generator need ${workers + 1} cores, the machine has ${cores}` };
  spawnSync('taskset', ['-acp', '0', String(process.pid)], { stdio: 'ignore' });
  return { server: `1-${workers}`, note: `pinned: load generator on core 0, server on cores 1-${workers} of ${cores}` };
}

/** The ceiling: a bare `node:http` server answering a tiny JSON body (bench/ceiling.ts). */
/** A ceiling (bench/ceiling.ts): the bare Node `http` server, or bare Fastify. */
export type CeilingKind = 'node' | 'fastify';

export async function startCeiling(kind: CeilingKind = 'node'): Promise<ServerProcess> {
  const port = await freePort();
  return startProcess(['bench/ceiling.ts', String(port), kind], process.env, `http://127.0.0.1:${port}`, '/', { inspect: false, quiet: false });
}

export type PeerAdapter = 'memory' | 'sqlite';

/**
 * The peer: oidc-provider on Gatehouse's paths (bench/peer/server.ts), with its in-memory
 * adapter or with a node:sqlite file in `directory`.
 */
export async function startPeer(adapter: PeerAdapter, directory: string, options: { inspect?: boolean; probe?: Probe | null } = {}): Promise<ServerProcess> {
  const port = await freePort();
  const spec = adapter === 'memory' ? 'memory' : `sqlite:${join(directory, 'peer.db')}`;
  const env = { ...process.env, ...probeEnvironment(options.probe ?? null, '') };
  return startProcess(['bench/peer/server.ts', String(port), spec], env, `http://127.0.0.1:${port}`, '/.well-known/openid-configuration', {
    inspect: options.inspect ?? false,
    quiet: false,
  });
}

/** Where bench/probe.ts writes, and whether it keeps a timeline. */
export interface Probe {
  directory: string;
  timeline: boolean;
}

/** The environment that loads bench/probe.ts into a server (and its workers), beside `nodeOptions`. */
function probeEnvironment(probe: Probe | null, nodeOptions: string): NodeJS.ProcessEnv {
  const flags = [nodeOptions, probe ? `--import=${join(ROOT, 'bench', 'probe.ts')}` : ''].filter(Boolean).join(' ');
  return {
    ...(flags ? { NODE_OPTIONS: flags } : {}),
    ...(probe ? { BENCH_PROBE_DIR: probe.directory, BENCH_TIMELINE: probe.timeline ? '1' : '0' } : {}),
  };
}

/** One window of bench/probe.ts in one process: CPU share of one core, event-loop delay. */
export interface ProbeWindow {
  pid: number;
  from: number;
  to: number;
  wallMs: number;
  cpuMs: number;
  cpuShare: number;
  loopDelay: { p50Ms: number; p99Ms: number; maxMs: number } | null;
}

/**
 * Closes the probe's window in each of `pids` (SIGUSR2) and returns what each wrote for it;
 * a process that has no probe or does not answer within 2 s is left out.
 */
export async function probeWindows(probe: Probe, pids: number[]): Promise<ProbeWindow[]> {
  const lines = (pid: number) => {
    try {
      return readFileSync(join(probe.directory, `${pid}.jsonl`), 'utf8')
        .trim()
        .split('\n')
        .filter(Boolean);
    } catch {
      return [];
    }
  };
  const before = new Map(pids.map((pid) => [pid, lines(pid).length]));
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGUSR2');
    } catch {
      // gone
    }
  }
  const windows: ProbeWindow[] = [];
  const deadline = Date.now() + 2000;
  for (const pid of pids) {
    for (;;) {
      const all = lines(pid);
      if (all.length > before.get(pid)!) {
        windows.push(JSON.parse(all.at(-1)!) as ProbeWindow);
        break;
      }
      if (Date.now() > deadline) break;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }
  return windows;
}

/** The timeline events bench/probe.ts has written for `pid` since `offset` lines; and the new offset. */
export function probeEvents(probe: Probe, pid: number, offset: number): { events: Array<Record<string, unknown>>; offset: number } {
  let all: string[] = [];
  try {
    all = readFileSync(join(probe.directory, `${pid}.timeline.jsonl`), 'utf8')
      .trim()
      .split('\n')
      .filter(Boolean);
  } catch {
    // none yet
  }
  return { events: all.slice(offset).map((line) => JSON.parse(line) as Record<string, unknown>), offset: all.length };
}

/** A throw-away directory, removed by the returned function or when the run is interrupted. */
export function scratchDirectory(): { path: string; remove(): Promise<void> } {
  const path = mkdtempSync(join(tmpdir(), 'gatehouse-bench-'));
  return { path, remove: onCleanup(async () => rmSync(path, { recursive: true, force: true })) };
}

// ---------------------------------------------------------------------------------------
// Load

export interface RequestSpec {
  method?: 'GET' | 'POST';
  path: string;
  headers?: Record<string, string>;
  /** Sent as application/x-www-form-urlencoded. */
  form?: Record<string, string>;
}

export interface LoadOptions {
  url: string;
  connections: number;
  /** Exactly this many requests; without it the load runs until `stop()`. */
  amount?: number;
  /** Called once per request, just before it is sent: fresh input every time. */
  next: () => RequestSpec;
  /** The status every response must have. */
  expect: number;
  /** Further checks of a response with the expected status (and a place to collect what it returns). */
  check?: (body: string, headers: Record<string, string | string[] | undefined>) => boolean;
}

export interface LoadResult {
  requests: number;
  seconds: number;
  rps: number;
  p50: number;
  p99: number;
  max: number;
  /** Responses with another status, by status; responses that failed `check` as "rejected". */
  unexpected: Record<string, number>;
  /** Connection errors and timeouts. */
  errors: number;
  /** The start of the first unexpected response body, to explain a failure (error JSON, never a token). */
  sample: string | null;
  /** Per response: when it finished (`performance.now()`) and how long it took (ms). */
  finishedAt: number[];
  latencies: number[];
}

export interface Load {
  result: Promise<LoadResult>;
  stop(): void;
}

/** A count given on the command line, with an optional k or M suffix (5000, 10k, 1M). */
export function count(name: string, raw: string): number {
  const match = /^(\d+(?:\.\d+)?)([kKmM]?)$/.exec(raw.trim());
  if (!match) throw new Error(`--${name}: "${raw}" is not a count (e.g. 5000, 10k, 1M)`);
  const factor = { '': 1, k: 1e3, K: 1e3, m: 1e6, M: 1e6 }[match[2]!]!;
  return Math.round(Number(match[1]) * factor);
}

/**
 * Microbenchmark timings in interleaved rounds: `time` runs one variant over `items` items and
 * keeps its µs per item under `name`; `report` prints each variant's median over the rounds.
 */
export class MicroTimings {
  readonly #byName = new Map<string, number[]>();
  readonly items: number;
  constructor(items: number) {
    this.items = items;
  }

  async time(name: string, run: () => Promise<void> | void): Promise<void> {
    const started = performance.now();
    await run();
    const micros = ((performance.now() - started) * 1000) / this.items;
    this.#byName.set(name, [...(this.#byName.get(name) ?? []), micros]);
  }

  /** One line per variant: `prefix`, the name, the median µs per `unit`. */
  report(unit: string, prefix = ''): void {
    const width = Math.max(...[...this.#byName.keys()].map((name) => name.length));
    for (const [name, values] of this.#byName) {
      console.log(`${prefix}${name.padEnd(width)}  median ${percentile(values, 50).toFixed(2)} µs per ${unit} (${values.length} rounds of ${this.items})`);
    }
  }
}

/** Nearest-rank percentile of `values` (not sorted in place). */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

export function startLoad(options: LoadOptions): Load {
  const latencies: number[] = [];
  const finishedAt: number[] = [];
  const unexpected: Record<string, number> = {};
  let sample: string | null = null;
  const start = performance.now();

  const request: autocannon.Request = {
    setupRequest: (defaults) => {
      const spec = options.next();
      const headers: Record<string, string> = { ...spec.headers };
      let body: string | undefined;
      if (spec.form) {
        body = new URLSearchParams(spec.form).toString();
        headers['content-type'] = 'application/x-www-form-urlencoded';
      }
      return { ...defaults, method: spec.method ?? 'GET', path: spec.path, headers, body };
    },
    onResponse: (status, body, _context, headers) => {
      if (status === options.expect && (options.check?.(body, headers ?? {}) ?? true)) return;
      const key = status === options.expect ? 'rejected' : String(status);
      unexpected[key] = (unexpected[key] ?? 0) + 1;
      sample ??= `${status} ${body.slice(0, 200)}`;
    },
  };
  let instance!: autocannon.Instance;
  const finished = new Promise<autocannon.Result>((resolve, reject) => {
    instance = autocannon(
      {
        url: options.url,
        connections: options.connections,
        ...(options.amount === undefined ? { duration: 24 * 3600 } : { amount: options.amount }),
        timeout: 30,
        requests: [request],
      },
      (error, done) => (error ? reject(error as Error) : resolve(done)),
    );
  });
  instance.on('response', (_client, _status, _bytes, responseTime) => {
    latencies.push(responseTime);
    finishedAt.push(performance.now());
  });
  const result = finished.then((done): LoadResult => {
    const seconds = ((finishedAt.at(-1) ?? performance.now()) - start) / 1000;
    return {
      requests: latencies.length,
      seconds,
      rps: latencies.length / seconds,
      p50: percentile(latencies, 50),
      p99: percentile(latencies, 99),
      max: latencies.reduce((a, b) => Math.max(a, b), 0),
      unexpected,
      errors: done.errors + done.timeouts,
      sample,
      finishedAt,
      latencies,
    };
  });
  return { result, stop: () => instance.stop() };
}

/** A load of exactly `amount` requests, or of as many as `seconds` allow (the requests still in flight then are not counted). */
export function runLoad(options: LoadOptions & ({ amount: number } | { amount?: undefined; seconds: number })): Promise<LoadResult> {
  if (options.amount === 0) return Promise.resolve(emptyResult()); // autocannon would take 0 for "no limit"
  const load = startLoad(options);
  if (options.amount !== undefined) return load.result;
  const timer = setTimeout(() => load.stop(), options.seconds * 1000);
  return load.result.finally(() => clearTimeout(timer));
}

function emptyResult(): LoadResult {
  return { requests: 0, seconds: 0, rps: NaN, p50: NaN, p99: NaN, max: 0, unexpected: {}, errors: 0, sample: null, finishedAt: [], latencies: [] };
}

/** How many requests did not get what they should have (wrong status, failed check, error). */
export function failures(result: LoadResult): number {
  return Object.values(result.unexpected).reduce((a, b) => a + b, 0) + result.errors;
}

/** A one-line account of what went wrong, or null. */
export function failureReport(result: LoadResult): string | null {
  if (failures(result) === 0) return null;
  const statuses = Object.entries(result.unexpected).map(([status, n]) => `${n}× ${status}`);
  if (result.errors > 0) statuses.push(`${result.errors}× connection error or timeout`);
  return `${statuses.join(', ')}${result.sample ? ` (first: ${result.sample})` : ''}`;
}

// ---------------------------------------------------------------------------------------
// Reporting

/** The commit measured, with "+modified" when src/ differs from it (others may be editing it). */
export function revision(checkout = ROOT): string {
  const git = (...args: string[]) => spawnSync('git', args, { cwd: checkout, encoding: 'utf8' });
  const head = git('rev-parse', '--short', 'HEAD');
  if (head.status !== 0) return 'unknown (not a git checkout)';
  return `${head.stdout.trim()}${git('status', '--porcelain', '--', 'src').stdout.trim() === '' ? '' : '+modified'}`;
}

export function machine() {
  const cpu = cpus();
  return {
    cpu: cpu[0]?.model ?? 'unknown',
    cores: cpu.length,
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    os: `${type()} ${release()}`,
    node: process.version,
    loadAverageAtStart: loadavg().map((n) => Math.round(n * 100) / 100),
  };
}

/** Writes bench/results/<name>.json and returns its path relative to the repository. */
export function saveResults(name: string, data: unknown): string {
  const dir = join(ROOT, 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, `${name}.json`), `${JSON.stringify(data, null, 2)}\n`);
  return `bench/results/${name}.json`;
}

export function timestamp(): string {
  return new Date().toISOString().replace(/[:.]/g, '-');
}

/** A Markdown table; the first `textColumns` columns are left-aligned, the numbers right-aligned. */
export function markdownTable(headers: string[], rows: Array<Array<string | number>>, textColumns = 2): string {
  const line = (cells: Array<string | number>) => `| ${cells.join(' | ')} |`;
  return [line(headers), line(headers.map((_, i) => (i < textColumns ? '---' : '---:'))), ...rows.map(line)].join('\n');
}

export const fixed = (value: number, digits = 1) => (Number.isFinite(value) ? value.toFixed(digits) : '-');

/**
 * The bench's command line through `read` (which returns null for --help and throws on a
 * mistake): the options, or the exit code after printing the help (0) or the mistake (2).
 */
export function commandLine<T>(name: string, help: string, read: (argv: string[]) => T | null): { options: T } | { exit: number } {
  try {
    const options = read(process.argv.slice(2));
    if (options !== null) return { options };
    console.log(help);
    return { exit: 0 };
  } catch (error) {
    console.error(`${name}: ${(error as Error).message}\n\n${help}`);
    return { exit: 2 };
  }
}
