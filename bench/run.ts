/**
 * `npm run bench`: Gatehouse under load, phase by phase, side by side with the peer —
 * panva's oidc-provider on Gatehouse's paths (bench/peer/), once with its in-memory adapter
 * and once on node:sqlite — next to the ceiling of a bare Node `http` server on the same
 * machine.
 *
 * Every phase is measured on every server in turn, each server started fresh (a new
 * process, an empty database) for each phase; what a phase consumes is produced first,
 * unmeasured, by the phases before it (the codes an exchange redeems come from
 * authorizations, the refresh tokens a refresh rotates from exchanges), then a warm-up of
 * the phase itself runs unrecorded. Every request gets input nobody has used before, and
 * any response without the expected status and shape fails that server's phase (exit 1).
 */
import { createHash, randomBytes } from 'node:crypto';
import { generateKeyPair, generateProof } from 'dpop';
import { appendFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { formFields, UserAgent } from '../test/support/user-agent.ts';
import { PEER_CLIENTS, PEER_REDIRECT_URI } from './peer/clients.ts';
import {
  commandLine,
  DEFAULT_POSTGRES_URL,
  ROOT,
  createDatabase,
  exit,
  failureReport,
  failures,
  fixed,
  gatehouse,
  localPostgresCpu,
  machine,
  markdownTable,
  percentile,
  postgresProblem,
  revision,
  runLoad,
  saveResults,
  scratchDirectory,
  shout,
  startCeiling,
  pinning,
  probeEvents,
  probeWindows,
  startGatehouse,
  startPeer,
  timestamp,
  type BackendName,
  type LoadResult,
  type Memory,
  type PeerAdapter,
  type Probe,
  type ProbeWindow,
  type RequestSpec,
  type ServerProcess,
} from './harness.ts';
import { measureWebsockets } from './websockets.ts';
import { connectProfiler, formatSummary, summarise, type ProfileSummary, type ProfilerSession } from './profile.ts';

const PHASES = [
  'authorize',
  'exchange',
  'exchange-es256',
  'exchange-rs256',
  'exchange-oidc',
  'exchange-confidential',
  'exchange-dpop',
  'refresh',
  'refresh-es256',
  'refresh-confidential',
  'token-exchange',
  'profile',
  'introspect',
  'ws',
  'revoke',
  'revoke-confidential',
  'device',
] as const;
type Phase = (typeof PHASES)[number];

type Ceiling = 'ceiling' | 'ceiling-fastify';

const LABELS: Record<Phase | Ceiling, string> = {
  ceiling: 'ceiling: bare node:http',
  'ceiling-fastify': 'ceiling: bare Fastify',
  authorize: 'authorize (consented session → code)',
  exchange: 'code exchange (public + PKCE)',
  'exchange-es256': 'code exchange, ES256 JWT access token',
  'exchange-rs256': 'code exchange, RS256 JWT access token',
  'exchange-oidc': 'code exchange with an RS256 ID token (scope openid profile email)',
  'exchange-confidential': 'code exchange (confidential: client_secret_basic + PKCE)',
  'exchange-dpop': 'code exchange with a DPoP proof (public + PKCE, ES256 key): DPoP-bound pair',
  refresh: 'refresh with rotation',
  'refresh-es256': 'refresh, ES256 JWT access token',
  'refresh-confidential': 'refresh with rotation (confidential)',
  'token-exchange': "token exchange (confidential agent): a person's access token for a narrower one with act (RFC 8693)",
  profile: 'bearer GET /api/profile',
  introspect: 'introspection',
  ws: 'WebSocket connect',
  revoke: 'revocation',
  'revoke-confidential': 'revocation (confidential)',
  device: 'device-code exchange',
};

/** Gatehouse on a backend (one process, or `-w<n>`: WORKERS=n), or the peer on an adapter. */
type ServerName = `gatehouse-${BackendName}` | `gatehouse-${BackendName}-w${number}` | `peer-${PeerAdapter}`;

/** The server's name as the tables print it. */
function serverLabel(name: ServerName): string {
  const workers = /^(gatehouse-\w+)-w(\d+)$/.exec(name);
  if (workers) return `${SERVER_LABELS[workers[1] as ServerName]!.slice(0, -1)}, WORKERS=${workers[2]})`;
  return SERVER_LABELS[name]!;
}

const SERVER_LABELS: Partial<Record<ServerName, string>> = {
  'gatehouse-sqlite': 'Gatehouse (SQLite)',
  'gatehouse-postgres': 'Gatehouse (PostgreSQL)',
  'peer-memory': 'oidc-provider (in-memory)',
  'peer-sqlite': 'oidc-provider (node:sqlite)',
};

const HELP = `Usage: npm run bench -- [options]

Measures Gatehouse phase by phase on SQLite and on PostgreSQL, side by side with panva's
oidc-provider configured as a plain OAuth 2 server on Gatehouse's paths (bench/peer/), once
with its in-memory adapter and once with a durable node:sqlite adapter (WAL,
synchronous=NORMAL). Phases: ${PHASES.join(', ')}
(${PHASES.map((phase) => LABELS[phase]).join('; ')}). WebSocket connect and the JWT phases are Gatehouse's alone.

Each phase runs on every server in turn (the order alternates between rounds), each server
started fresh for it (its own process, an empty database), after the phases that produce its
input and an unrecorded warm-up of its own. Every response is checked (status and shape);
any other fails that server's phase and the run (exit code 1). A bare Node http server
answering a tiny JSON body, sampled before and after every round, is the ceiling; a bare
Fastify server answering the same, sampled likewise, is the framework's ceiling. All
servers run as separate processes, the load generator (autocannon) in this one. Reported
per server and phase: requests/s, p50 and p99 latency, the server's CPU time per request
(and, for PostgreSQL on this machine, its processes' CPU time per request beside it: on 2
cores the database's work competes with the server's), its RSS, the shares of both ceilings, and Gatehouse ÷ peer per phase (medians over rounds); for
Gatehouse with one worker, the database statements per request (round trips on PostgreSQL),
from gatehouse_database_statements_total scraped before and after the measured requests.

Options:
  --connections <n>     concurrent connections (default 50)
  --requests <n>        requests per measured phase (default 3000); bearer /api/profile gets
                        3 times as many; the ceiling is sampled with 4 times as many; each
                        phase's unrecorded warm-up gets a quarter. With --duration: the inputs
                        made for each phase that consumes them (codes, refresh tokens), which
                        must outlast it (a phase that runs out fails, saying so)
  --duration <s>        measure each phase for s seconds instead of a number of requests
                        (WebSocket connect and the ceilings keep --requests)
  --warmup <n>          requests of each phase's unrecorded warm-up (default a quarter of
                        --requests; 0: none, the phase is measured from a cold process)
  --throttles <on|off>  on (default): the throttling counters run, far above the load; off:
                        none at all (TOKEN_REQUESTS_PER_* and LOGIN_FAILURES_PER_* = 0)
  --timeline            write bench/results/<timestamp>.timeline.jsonl: per measured phase,
                        100 ms buckets of request latency (count, p50, max) beside the
                        server's garbage collections, checkpoints, purge runs and worst
                        event-loop delay per 100 ms (bench/probe.ts)
  --purge <s>           Gatehouse's PURGE_INTERVAL_SECONDS (default 0: no purge runs)
  --no-pin              leave every process free to run on any core (by default, where
                        taskset exists and there are cores enough, the server runs on its
                        own core(s) and the load generator on core 0)
  --rounds <n>          rounds, interleaved: every phase on every server, then again (default 1)
  --phases <list>       comma-separated subset of: ${PHASES.join(',')} (default all)
  --backends <list>     Gatehouse's backends, comma-separated: sqlite,postgres (default both;
                        PostgreSQL is skipped, loudly, when it cannot be reached)
  --peers <list>        the peer's adapters: memory,sqlite (default both)
  --no-peer             Gatehouse only (no oidc-provider)
  --postgres-url <url>  administrator connection used to create and drop throw-away databases
                        (default $BENCH_POSTGRES_URL or postgres://postgres@127.0.0.1:5432/postgres)
  --cpu-prof            record a CPU profile of the server during every measured phase (V8's
                        sampling profiler through the inspector, cut per phase) and print the
                        top self-time functions
  --cpu-prof-dir <dir>  where the .cpuprofile files go (default: a new directory in the temp dir)
  --log-level <level>   Gatehouse's LOG_LEVEL (default warn: no per-request lines); info
                        measures the cost of the one-line-per-request log (written to /dev/null)
  --no-websockets       skip the closing WebSocket load (2000 concurrent sockets over 200
                        grants, then every grant revoked at once: npm run bench:ws alone)
  --workers <list>      Gatehouse's WORKERS, comma-separated (default 1,2: every phase on one
                        process and on two, side by side); with n, where taskset exists and the machine
                        has n+1 cores, the server is pinned to cores 1..n and the load to core 0
  --node-options <flags>
                        NODE_OPTIONS for Gatehouse's server process only, e.g.
                        "--max-semi-space-size=16" (a smaller young generation: less RSS, more GC)
  -h, --help            show this text

Inside every server (and each of its workers) bench/probe.ts reports per measured phase the
event loop's delay (perf_hooks.monitorEventLoopDelay: p50, p99, max) and the share of one
core the server used (process.cpuUsage over wall time, summed over its processes; one
minus it is the time it had nothing to do). The load generator's own share of a core is
printed beside it: on a machine with fewer cores than load generator plus server, the two
compete.

Writes bench/results/<timestamp>.json and prints Markdown tables at the end.`;

const REDIRECT_URI = PEER_REDIRECT_URI; // never visited: the bench reads the code from the Location header
const USERNAME = PEER_CLIENTS.username;
const SCOPE = 'annotation:read annotation:write';
/** Resource servers whose access tokens are JWTs (Gatehouse only), by algorithm: their URI and the scope asked for. */
const JWT_RESOURCES = {
  ES256: { uri: 'https://es256.bench.example/api', scope: 'bench:es256' },
  RS256: { uri: 'https://rs256.bench.example/api', scope: 'bench:rs256' },
} as const;
type JwtAlg = keyof typeof JWT_RESOURCES;
/** The scopes of the OpenID Connect phase: the built-in ones, and an ID token with profile and e-mail claims. */
const OPENID_SCOPE = `openid profile email ${SCOPE}`;
/** What a phase's authorization requests ask for beyond the built-in scopes: a JWT resource server (by algorithm), or an ID token. */
type Asked = JwtAlg | 'openid';
/** The phases that ask for more (Gatehouse's alone), and what. */
const ASKED: Partial<Record<Phase, Asked>> = { 'exchange-es256': 'ES256', 'exchange-rs256': 'RS256', 'exchange-oidc': 'openid', 'refresh-es256': 'ES256' };
/** The phases whose client is the confidential one (HTTP Basic with its secret) rather than the public one. */
const CONFIDENTIAL: ReadonlySet<Phase> = new Set(['exchange-confidential', 'refresh-confidential', 'token-exchange', 'revoke-confidential']);
const TOKEN_EXCHANGE_GRANT = 'urn:ietf:params:oauth:grant-type:token-exchange';
const DEVICE_CODE_GRANT = 'urn:ietf:params:oauth:grant-type:device_code';
/** RFC 8628's default polling interval, which Gatehouse also applies before the first poll. */
const DEVICE_INTERVAL_MS = 5_000;

interface PhaseRecord {
  server: ServerName;
  phase: Phase | Ceiling;
  label: string;
  round: number;
  requests: number;
  seconds: number;
  rps: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  /** The server's CPU time (user + system) during the phase, per request. */
  cpuMsPerRequest: number;
  /** Its database's CPU time during the phase, per request (Target.databaseCpuMs); null where not measured. */
  databaseCpuMsPerRequest: number | null;
  /** Of the server under load, right after the phase. */
  memory: Memory;
  /** Gatehouse's database statements per request (gatehouse_database_statements_total; on PostgreSQL, round trips); null where not counted. */
  statementsPerRequest: number | null;
  /** The server's share of one core during the phase (all its processes), from bench/probe.ts; null without it. */
  serverCpuShare?: number | null;
  /** The load generator's (this process's) share of one core during the phase. */
  loadCpuShare?: number;
  /** The event loop's delay during the phase (the worst of the serving processes), from bench/probe.ts. */
  loopDelay?: ProbeWindow['loopDelay'];
  cpuProfile?: { file: string; summary: ProfileSummary };
}

interface Failure {
  server: ServerName;
  phase: Phase;
  round: number;
  reason: string;
}

interface Options {
  connections: number;
  requests: number;
  rounds: number;
  phases: Phase[];
  backends: BackendName[];
  peers: PeerAdapter[];
  postgresUrl: string;
  cpuProfileDir: string | null;
  logLevel: string;
  /** Whether to close with the WebSocket load of bench/websockets.ts. */
  websockets: boolean;
  /** Gatehouse's WORKERS, each measured; and the cores a server of n workers is pinned to (absent: not pinned). */
  workers: number[];
  serverCpus: Map<number, string | null>;
  /** NODE_OPTIONS for Gatehouse's server process ('' for none). */
  nodeOptions: string;
  /** Seconds per measured phase instead of `requests` (null: by count). */
  duration: number | null;
  /** Requests of each phase's warm-up. */
  warmup: number;
  /** Whether the throttling counters run (far above the load) or are off. */
  throttles: boolean;
  /** Where the timeline goes (null: none). */
  timeline: string | null;
  /** Gatehouse's PURGE_INTERVAL_SECONDS. */
  purgeSeconds: number;
  /** Whether to pin the server and the load generator to separate cores where it can (pinning()). */
  pin: boolean;
}

/** The run's name: its results file, and its timeline's. */
const runName = timestamp();

function readOptions(argv: string[]): Options | null {
  const { values } = parseArgs({
    args: argv,
    options: {
      connections: { type: 'string' },
      requests: { type: 'string' },
      rounds: { type: 'string' },
      phases: { type: 'string' },
      backends: { type: 'string' },
      peers: { type: 'string' },
      'no-peer': { type: 'boolean' },
      'postgres-url': { type: 'string' },
      'cpu-prof': { type: 'boolean' },
      'cpu-prof-dir': { type: 'string' },
      'log-level': { type: 'string' },
      'no-websockets': { type: 'boolean' },
      workers: { type: 'string' },
      'node-options': { type: 'string' },
      duration: { type: 'string' },
      warmup: { type: 'string' },
      throttles: { type: 'string' },
      timeline: { type: 'boolean' },
      'no-pin': { type: 'boolean' },
      purge: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help) return null;
  const count = (name: string, raw: string | undefined, fallback: number) => {
    if (raw === undefined) return fallback;
    if (!/^[1-9]\d*$/.test(raw)) throw new Error(`--${name} must be a positive whole number, got "${raw}"`);
    return Number(raw);
  };
  const list = <T extends string>(name: string, raw: string, allowed: readonly T[]): T[] => {
    const names = raw.split(',').map((item) => item.trim());
    for (const item of names) if (!allowed.includes(item as T)) throw new Error(`--${name}: unknown value "${item}" (${allowed.join(', ')})`);
    return allowed.filter((item) => names.includes(item)); // in the bench's order, once each
  };
  const options: Options = {
    connections: count('connections', values.connections, 50),
    requests: count('requests', values.requests, 3000),
    rounds: count('rounds', values.rounds, 1),
    phases: list('phases', values.phases ?? PHASES.join(','), PHASES),
    backends: list('backends', values.backends ?? 'sqlite,postgres', ['sqlite', 'postgres'] as const),
    peers: values['no-peer'] ? [] : list('peers', values.peers ?? 'memory,sqlite', ['memory', 'sqlite'] as const),
    postgresUrl: values['postgres-url'] ?? DEFAULT_POSTGRES_URL,
    cpuProfileDir: values['cpu-prof'] || values['cpu-prof-dir'] ? (values['cpu-prof-dir'] ?? join(tmpdir(), `gatehouse-profiles-${timestamp()}`)) : null,
    logLevel: values['log-level'] ?? 'warn',
    websockets: !values['no-websockets'],
    workers: [
      ...new Set((values.workers ?? (values['cpu-prof'] || values['cpu-prof-dir'] ? '1' : '1,2')).split(',').map((n) => count('workers', n.trim(), 1))),
    ],
    serverCpus: new Map(),
    nodeOptions: values['node-options'] ?? '',
    duration: values.duration === undefined ? null : count('duration', values.duration, 0),
    warmup: 0,
    throttles: (values.throttles ?? 'on') === 'on',
    timeline: values.timeline ? join(ROOT, 'bench', 'results', `${runName}.timeline.jsonl`) : null,
    pin: !values['no-pin'],
    purgeSeconds: values.purge === undefined ? 0 : count('purge', values.purge, 0),
  };
  if (!['on', 'off'].includes(values.throttles ?? 'on')) throw new Error(`--throttles: on or off, got "${values.throttles}"`);
  options.warmup = values.warmup === '0' ? 0 : count('warmup', values.warmup, Math.max(options.connections, Math.floor(options.requests / 4)));
  if (values['no-peer'] && values.peers !== undefined) throw new Error('--no-peer and --peers contradict each other');
  if (!['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].includes(options.logLevel))
    throw new Error(`--log-level: unknown level "${options.logLevel}"`);
  if (options.workers.some((n) => n > 1) && options.cpuProfileDir) throw new Error('--cpu-prof profiles one process: use it with --workers 1');
  if (options.requests < options.connections * 4)
    throw new Error(`--requests must be at least 4 × --connections (${options.connections * 4}): the warm-up gets a quarter`);
  return options;
}

// ---------------------------------------------------------------------------------------

/** A server being measured, with what the phases need to talk to it. */
interface Target {
  name: ServerName;
  server: ServerProcess;
  clientId: string;
  /** A confidential client consented once like the public one, and its Authorization header (client_secret_basic). */
  confidential: { clientId: string; authorization: string };
  /** What its authorization endpoint answers a consented session with (Gatehouse 302, oidc-provider 303). */
  authorizeStatus: number;
  /** The logged-in user's session cookie(s). */
  cookie: string;
  /** The Authorization header of a confidential client acting as resource server; null when the server has no /oauth/introspect. */
  introspector: string | null;
  hasWebSocket: boolean;
  /** Whether it binds tokens to DPoP proofs (its metadata lists `dpop_signing_alg_values_supported`). */
  hasDpop: boolean;
  /** Whether its confidential client may exchange tokens (RFC 8693, `client update --token-exchange`). */
  hasTokenExchange: boolean;
  /** Whether it has resource servers whose access tokens are JWTs (JWT_RESOURCES), consented once. */
  hasJwtResources: boolean;
  /** Whether it issues ID tokens (its metadata lists `openid`), consented once. */
  hasOpenId: boolean;
  /** A device client and the request that approves a user code as the user; null without the device flow. */
  device: { clientId: string; approval: (userCode: string) => RequestSpec } | null;
  connections: number;
  /** How many statements the server has sent to its database so far; null where they are not counted (the peer, an older Gatehouse, several workers). */
  statements: (() => Promise<number>) | null;
  /** The CPU time its database's processes have used so far, ms: PostgreSQL on this machine; null where the database is in the server's process (SQLite, the peer) or elsewhere. */
  databaseCpuMs: (() => number) | null;
  profiler: ProfilerSession | null;
  profileDir: string | null;
  /** bench/probe.ts inside the server, where it writes. */
  probe: Probe | null;
  /** Stops the server and removes its database. */
  stop(): Promise<void>;
}

interface Pair {
  access: string;
  refresh: string;
}

function pkce() {
  const verifier = randomBytes(32).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
}

/** An authorization request for the built-in resource, or for the JWT resource server of `alg`. */
function authorizePath(clientId: string, state: string, challenge: string, asked?: Asked): string {
  const jwt = asked === undefined || asked === 'openid' ? undefined : JWT_RESOURCES[asked];
  const query = new URLSearchParams({
    response_type: 'code',
    client_id: clientId,
    redirect_uri: REDIRECT_URI,
    scope: jwt?.scope ?? (asked === 'openid' ? OPENID_SCOPE : SCOPE),
    ...(jwt ? { resource: jwt.uri } : {}),
    state,
    code_challenge: challenge,
    code_challenge_method: 'S256',
  });
  return `/oauth/authorize?${query}`;
}

/** The pair in a token response, or null. */
/** The pair of a token response of `tokenType` (compared ignoring case), or null. */
function tokensOf(body: string, tokenType = 'bearer'): Pair | null {
  const parsed = JSON.parse(body) as { access_token?: unknown; refresh_token?: unknown; token_type?: unknown };
  return typeof parsed.access_token === 'string' && typeof parsed.refresh_token === 'string' && String(parsed.token_type).toLowerCase() === tokenType
    ? { access: parsed.access_token, refresh: parsed.refresh_token }
    : null;
}

function header(headers: Record<string, string | string[] | undefined>, name: string): string | undefined {
  const found = Object.entries(headers).find(([key]) => key.toLowerCase() === name)?.[1];
  return Array.isArray(found) ? found[0] : found;
}

/** Takes the next input; an exhausted pool yields a value the server must refuse, so the run fails instead of hanging. */
function take<T>(pool: T[], exhausted: T): T {
  return pool.shift() ?? exhausted;
}

/**
 * Runs one load on `target`. Unless `record` says otherwise this is preparation or warm-up:
 * checked like the rest, not recorded. A recorded load is timed in the server's CPU too,
 * and profiled when asked.
 */
async function load(target: Target, phase: Phase, record: PhaseRecord[] | null, round: number, run: () => Promise<LoadResult>): Promise<void> {
  const profiler = record ? target.profiler : null;
  const statements = record ? target.statements : null;
  const statementsBefore = await statements?.();
  const pids = target.server.processes?.() ?? [target.server.pid];
  if (record && target.probe) await probeWindows(target.probe, pids); // opens the phase's window
  await profiler?.start();
  const cpuBefore = target.server.cpuMs();
  const databaseCpuBefore = target.databaseCpuMs?.();
  const loadCpuBefore = process.cpuUsage();
  const result = await run();
  const loadCpu = process.cpuUsage(loadCpuBefore);
  const cpuMs = target.server.cpuMs() - cpuBefore;
  const databaseCpuMs = databaseCpuBefore === undefined ? null : target.databaseCpuMs!() - databaseCpuBefore;
  const windows = record && target.probe ? await probeWindows(target.probe, pids) : [];
  const profile = profiler ? await profiler.stop() : null;
  const statementsAfter = await statements?.();
  const memory = target.server.memory();
  const problem = failureReport(result);
  if (problem)
    throw new Error(
      `${LABELS[phase]}${record ? '' : ' (preparing or warming up)'}: ${failures(result)} of ${result.requests} requests failed: ${problem}${record && measuredSeconds !== null ? ' (with --duration, the inputs made for the phase may have run out: raise --requests)' : ''}`,
    );
  if (!record) return;
  // With several workers the primary only hands out connections: the loop delay is the worst worker's.
  const serving = windows.length > 1 ? windows.filter((w) => w.pid !== target.server.pid) : windows;
  const delays = serving.map((w) => w.loopDelay).filter((d) => d !== null);
  const entry: PhaseRecord = {
    server: target.name,
    phase,
    label: LABELS[phase],
    round,
    requests: result.requests,
    seconds: result.seconds,
    rps: result.rps,
    p50Ms: result.p50,
    p99Ms: result.p99,
    maxMs: result.max,
    cpuMsPerRequest: cpuMs / result.requests,
    databaseCpuMsPerRequest: databaseCpuMs === null ? null : databaseCpuMs / result.requests,
    memory,
    statementsPerRequest: statementsBefore === undefined || statementsAfter === undefined ? null : (statementsAfter - statementsBefore) / result.requests,
    serverCpuShare: windows.length === 0 ? null : windows.reduce((sum, w) => sum + w.cpuMs, 0) / Math.max(...windows.map((w) => w.wallMs)),
    loadCpuShare: (loadCpu.user + loadCpu.system) / 1000 / (result.seconds * 1000),
    loopDelay:
      delays.length === 0
        ? null
        : { p50Ms: Math.max(...delays.map((d) => d.p50Ms)), p99Ms: Math.max(...delays.map((d) => d.p99Ms)), maxMs: Math.max(...delays.map((d) => d.maxMs)) },
  };
  if (target.probe?.timeline && timelineFile) writeTimeline(timelineFile, entry, result, target, pids);
  if (profile && target.profileDir) {
    const file = join(target.profileDir, `${target.name}-${phase}-round${round}.cpuprofile`);
    writeFileSync(file, JSON.stringify(profile));
    entry.cpuProfile = { file, summary: summarise(profile) };
  }
  record.push(entry);
  printPhase(entry);
}

function printPhase(p: PhaseRecord): void {
  const delay = p.loopDelay ? `  loop delay p50/p99/max ${fixed(p.loopDelay.p50Ms, 1)}/${fixed(p.loopDelay.p99Ms, 1)}/${fixed(p.loopDelay.maxMs, 0)} ms` : '';
  const shares = `  core: server ${p.serverCpuShare == null ? '-' : fixed(p.serverCpuShare, 2)}, load ${fixed(p.loadCpuShare ?? NaN, 2)}`;
  const database = p.databaseCpuMsPerRequest === null ? '' : `  database CPU ${fixed(p.databaseCpuMsPerRequest, 3)} ms/req`;
  console.log(
    `  ${serverLabel(p.server).padEnd(28)} ${p.label.padEnd(37)} ${String(p.requests).padStart(6)} req ${fixed(p.rps, 0).padStart(6)} req/s  p50 ${fixed(p.p50Ms, 2).padStart(7)} ms  p99 ${fixed(p.p99Ms, 2).padStart(7)} ms  CPU ${fixed(p.cpuMsPerRequest, 3).padStart(6)} ms/req  RSS ${fixed(p.memory.rssMiB, 0)} MiB${database}${p.statementsPerRequest === null ? '' : `  ${fixed(p.statementsPerRequest, 2)} ${p.server === 'gatehouse-postgres' ? 'round trips' : 'statements'}/req`}${shares}${delay}  (load avg ${loadavg()[0]!.toFixed(2)})`,
  );
}

/** Where every server's bench/probe.ts writes: one directory for the run, a file per process id. */
let probeDirectory: string | null = null;

function probeOf(options: Options): Probe | null {
  return probeDirectory === null ? null : { directory: probeDirectory, timeline: options.timeline !== null };
}

/** Where --timeline writes (null: no timeline). */
let timelineFile: string | null = null;

/** Offsets into each process's timeline file: the events of a phase are those written since the one before. */
const timelineOffsets = new Map<number, number>();

/**
 * Appends a measured phase to the timeline: its requests in 100 ms buckets by the time they
 * finished (count, p50, max latency), and what the server's probe saw meanwhile (GC pauses,
 * checkpoints, purge runs, the worst event-loop delay per 100 ms), all on one clock (ms since the epoch).
 */
function writeTimeline(file: string, entry: PhaseRecord, result: LoadResult, target: Target, pids: number[]): void {
  const tag = { server: entry.server, phase: entry.phase, round: entry.round };
  const buckets = new Map<number, number[]>();
  result.finishedAt.forEach((at, i) => {
    const bucket = Math.floor((performance.timeOrigin + at) / 100) * 100;
    let list = buckets.get(bucket);
    if (!list) buckets.set(bucket, (list = []));
    list.push(result.latencies[i]!);
  });
  const lines = [...buckets].map(([t, latencies]) =>
    JSON.stringify({ ...tag, type: 'requests', t, count: latencies.length, p50Ms: percentile(latencies, 50), maxMs: Math.max(...latencies) }),
  );
  for (const pid of pids) {
    const { events, offset } = probeEvents(target.probe!, pid, timelineOffsets.get(pid) ?? 0);
    timelineOffsets.set(pid, offset);
    const [first, last] = [Math.min(...buckets.keys()), Math.max(...buckets.keys()) + 100];
    for (const event of events) if ((event.t as number) >= first && (event.t as number) <= last) lines.push(JSON.stringify({ ...tag, pid, ...event }));
  }
  appendFileSync(file, `${lines.join('\n')}\n`);
}

/** Seconds per measured load (--duration), or null: measured loads are `n` requests. */
let measuredSeconds: number | null = null;

/** A load's size: `n` requests, or, when it is measured and --duration was given, as many as the duration allows. */
function size(n: number, sink: Sink): { amount: number } | { seconds: number } {
  return sink.record && measuredSeconds !== null ? { seconds: measuredSeconds } : { amount: n };
}

/** Where a phase's load goes to be recorded, or nowhere (preparation, warm-up). */
interface Sink {
  record: PhaseRecord[] | null;
  round: number;
}
const UNRECORDED: Sink = { record: null, round: 0 };

/** `n` authorizations with the consented session: the codes, each with its PKCE verifier. */
async function authorize(
  target: Target,
  n: number,
  sink = UNRECORDED,
  asked?: Asked,
  confidential = false,
): Promise<Array<{ code: string; verifier: string }>> {
  const clientId = confidential ? target.confidential.clientId : target.clientId;
  const requests = Array.from({ length: n }, () => ({ state: randomBytes(12).toString('base64url'), ...pkce() }));
  const verifiers = new Map(requests.map((r) => [r.state, r.verifier]));
  const codes: Array<{ code: string; verifier: string }> = [];
  await load(target, 'authorize', sink.record, sink.round, () =>
    runLoad({
      url: target.server.url,
      connections: target.connections,
      ...size(n, sink),
      expect: target.authorizeStatus,
      next: () => {
        const request = take(requests, { state: 'exhausted', verifier: '', challenge: 'exhausted' });
        return { path: authorizePath(clientId, request.state, request.challenge, asked), headers: { cookie: target.cookie } };
      },
      check: (_body, headers) => {
        const location = new URL(header(headers, 'location') ?? '', 'http://invalid');
        const code = location.searchParams.get('code');
        const verifier = verifiers.get(location.searchParams.get('state') ?? '');
        if (location.origin + location.pathname !== REDIRECT_URI || code === null || verifier === undefined) return false;
        codes.push({ code, verifier });
        return true;
      },
    }),
  );
  return codes;
}

/** How a request names its client: the public one by client_id in the form, the confidential one by HTTP Basic with its secret. */
function asClient(target: Target, confidential: boolean): { form: Record<string, string>; headers: Record<string, string> } {
  return confidential ? { form: {}, headers: { authorization: target.confidential.authorization } } : { form: { client_id: target.clientId }, headers: {} };
}

/**
 * A load of token requests by the phase's client, each answered with a fresh pair; the pairs.
 * `proofs`: one DPoP proof for each request, made beforehand (the load generator's signing is
 * not the server's cost).
 */
async function tokenRequests(target: Target, phase: Phase, n: number, form: () => Record<string, string>, sink: Sink, proofs?: string[]): Promise<Pair[]> {
  const client = asClient(target, CONFIDENTIAL.has(phase));
  const headers = () => (proofs === undefined ? client.headers : { ...client.headers, dpop: take(proofs, 'exhausted') });
  const issued: Pair[] = [];
  await load(target, phase, sink.record, sink.round, () =>
    runLoad({
      url: target.server.url,
      connections: target.connections,
      ...size(n, sink),
      expect: 200,
      // The grant's own form last: the device grant names its own client.
      next: () => ({ method: 'POST', path: '/api/token', headers: headers(), form: { ...client.form, ...form() } }),
      check: (body) => {
        // A proof binds the pair: an answer still `Bearer` would mean it was ignored.
        const pair = tokensOf(body, proofs === undefined ? 'bearer' : 'dpop');
        if (pair) issued.push(pair);
        return pair !== null;
      },
    }),
  );
  return issued;
}

function exchange(
  target: Target,
  codes: Array<{ code: string; verifier: string }>,
  n: number,
  sink = UNRECORDED,
  phase: Phase = 'exchange',
  proofs?: string[],
): Promise<Pair[]> {
  return tokenRequests(
    target,
    phase,
    n,
    () => {
      const { code, verifier } = take(codes, { code: 'exhausted', verifier: 'exhausted' });
      return { grant_type: 'authorization_code', code, redirect_uri: REDIRECT_URI, code_verifier: verifier };
    },
    sink,
    proofs,
  );
}

/** `n` DPoP proofs for the token endpoint, by one ES256 key, each with its own `jti`; good for 60 s from now. */
async function tokenEndpointProofs(target: Target, n: number): Promise<string[]> {
  const keys = await generateKeyPair('ES256');
  return Promise.all(Array.from({ length: n }, () => generateProof(keys, `${target.server.url}/api/token`, 'POST')));
}

function refresh(target: Target, pairs: Pair[], n: number, sink = UNRECORDED, phase: Phase = 'refresh'): Promise<Pair[]> {
  return tokenRequests(
    target,
    phase,
    n,
    () => ({ grant_type: 'refresh_token', refresh_token: take(pairs, { access: '', refresh: 'exhausted' }).refresh }),
    sink,
  );
}

/** `n` exchanges by the confidential client of its pairs' access tokens for narrower ones: each answered with an access token and no refresh token. */
async function tokenExchange(target: Target, pairs: Pair[], n: number, sink = UNRECORDED): Promise<void> {
  const client = asClient(target, true);
  await load(target, 'token-exchange', sink.record, sink.round, () =>
    runLoad({
      url: target.server.url,
      connections: target.connections,
      ...size(n, sink),
      expect: 200,
      next: () => ({
        method: 'POST',
        path: '/api/token',
        headers: client.headers,
        form: {
          grant_type: TOKEN_EXCHANGE_GRANT,
          subject_token: take(pairs, { access: 'exhausted', refresh: '' }).access,
          subject_token_type: 'urn:ietf:params:oauth:token-type:access_token',
          scope: SCOPE,
        },
      }),
      check: (body) => {
        const parsed = JSON.parse(body) as { access_token?: unknown; refresh_token?: unknown; issued_token_type?: unknown };
        return typeof parsed.access_token === 'string' && parsed.refresh_token === undefined && typeof parsed.issued_token_type === 'string';
      },
    }),
  );
}

/** `n` fresh token pairs (for the JWT resource server of `alg`, when given), of the public client or the confidential one: authorizations, then their exchanges. */
async function freshPairs(target: Target, n: number, asked?: Asked, confidential = false): Promise<Pair[]> {
  const codes = await authorize(target, n, UNRECORDED, asked, confidential);
  return exchange(target, codes, n, UNRECORDED, confidential ? 'exchange-confidential' : 'exchange');
}

async function bearer(target: Target, pairs: Pair[], n: number, sink = UNRECORDED): Promise<void> {
  let turn = 0;
  await load(target, 'profile', sink.record, sink.round, () =>
    runLoad({
      url: target.server.url,
      connections: target.connections,
      ...size(n, sink),
      expect: 200,
      next: () => ({ path: '/api/profile', headers: { authorization: `Bearer ${pairs[turn++ % pairs.length]!.access}` } }),
      check: (body) => body.includes(`"username":"${USERNAME}"`),
    }),
  );
}

async function introspect(target: Target, pairs: Pair[], n: number, sink = UNRECORDED): Promise<void> {
  let turn = 0;
  await load(target, 'introspect', sink.record, sink.round, () =>
    runLoad({
      url: target.server.url,
      connections: target.connections,
      ...size(n, sink),
      expect: 200,
      next: () => ({
        method: 'POST',
        path: '/oauth/introspect',
        headers: { authorization: target.introspector! },
        form: { token: pairs[turn++ % pairs.length]!.access, token_type_hint: 'access_token' },
      }),
      check: (body) => body.includes('"active":true'),
    }),
  );
}

async function revoke(target: Target, pairs: Pair[], n: number, sink = UNRECORDED, phase: Phase = 'revoke'): Promise<void> {
  const client = asClient(target, CONFIDENTIAL.has(phase));
  await load(target, phase, sink.record, sink.round, () =>
    runLoad({
      url: target.server.url,
      connections: target.connections,
      ...size(n, sink),
      expect: 200,
      next: () => ({
        method: 'POST',
        path: '/oauth/revoke',
        headers: client.headers,
        form: { token: take(pairs, { access: '', refresh: 'exhausted' }).refresh, token_type_hint: 'refresh_token', ...client.form },
      }),
    }),
  );
}

/** `n` device authorizations, each then approved by the user: device codes ready to be exchanged, from the time they may be. */
async function approvedDeviceCodes(target: Target, n: number): Promise<{ codes: string[]; pollableAt: number }> {
  const device = target.device!;
  const issued: Array<{ deviceCode: string; userCode: string }> = [];
  await load(target, 'device', null, 0, () =>
    runLoad({
      url: target.server.url,
      connections: target.connections,
      amount: n,
      expect: 200,
      next: () => ({ method: 'POST', path: '/oauth/device_authorization', form: { client_id: device.clientId, scope: SCOPE } }),
      check: (body) => {
        const parsed = JSON.parse(body) as { device_code?: unknown; user_code?: unknown };
        if (typeof parsed.device_code !== 'string' || typeof parsed.user_code !== 'string') return false;
        issued.push({ deviceCode: parsed.device_code, userCode: parsed.user_code });
        return true;
      },
    }),
  );
  const pollableAt = performance.now() + DEVICE_INTERVAL_MS;
  const userCodes = issued.map((code) => code.userCode);
  await load(target, 'device', null, 0, () =>
    runLoad({ url: target.server.url, connections: target.connections, amount: n, expect: 200, next: () => device.approval(take(userCodes, 'EXHAUSTED')) }),
  );
  return { codes: issued.map((code) => code.deviceCode), pollableAt };
}

function deviceExchange(target: Target, codes: string[], n: number, sink = UNRECORDED): Promise<Pair[]> {
  const clientId = target.device!.clientId;
  return tokenRequests(target, 'device', n, () => ({ grant_type: DEVICE_CODE_GRANT, device_code: take(codes, 'exhausted'), client_id: clientId }), sink);
}

/**
 * One phase on a freshly started server: its input made by the phases before it, a warm-up
 * of `warm` requests (three times as many for the bearer phase), then `n` recorded.
 */
async function runPhase(target: Target, phase: Phase, n: number, warm: number, sink: Sink): Promise<void> {
  switch (phase) {
    case 'authorize':
      await authorize(target, warm);
      await authorize(target, n, sink);
      return;
    case 'exchange': {
      const codes = await authorize(target, warm + n);
      await exchange(target, codes, warm);
      await exchange(target, codes, n, sink);
      return;
    }
    case 'refresh': {
      const pairs = await freshPairs(target, warm + n);
      await refresh(target, pairs, warm);
      await refresh(target, pairs, n, sink);
      return;
    }
    case 'exchange-es256':
    case 'exchange-rs256':
    case 'exchange-oidc': {
      const codes = await authorize(target, warm + n, UNRECORDED, ASKED[phase]);
      await exchange(target, codes, warm, UNRECORDED, phase);
      await exchange(target, codes, n, sink, phase);
      return;
    }
    case 'exchange-confidential': {
      const codes = await authorize(target, warm + n, UNRECORDED, undefined, true);
      await exchange(target, codes, warm, UNRECORDED, phase);
      await exchange(target, codes, n, sink, phase);
      return;
    }
    case 'exchange-dpop': {
      const codes = await authorize(target, warm + n);
      const proofs = await tokenEndpointProofs(target, warm + n);
      await exchange(target, codes, warm, UNRECORDED, phase, proofs);
      await exchange(target, codes, n, sink, phase, proofs);
      return;
    }
    case 'refresh-es256':
    case 'refresh-confidential': {
      const pairs = await freshPairs(target, warm + n, ASKED[phase], CONFIDENTIAL.has(phase));
      await refresh(target, pairs, warm, UNRECORDED, phase);
      await refresh(target, pairs, n, sink, phase);
      return;
    }
    case 'token-exchange': {
      const pairs = await freshPairs(target, warm + n, undefined, true);
      await tokenExchange(target, pairs, warm);
      await tokenExchange(target, pairs, n, sink);
      return;
    }
    case 'profile': {
      const pairs = await freshPairs(target, n);
      await bearer(target, pairs, warm * 3);
      await bearer(target, pairs, n * 3, sink);
      return;
    }
    case 'introspect': {
      const pairs = await freshPairs(target, n);
      await introspect(target, pairs, warm);
      await introspect(target, pairs, n, sink);
      return;
    }
    case 'ws': {
      const tokens = (await freshPairs(target, n)).map((pair) => pair.access);
      await load(target, 'ws', null, 0, () => websocketConnects(target.server.url, tokens, warm, target.connections));
      await load(target, 'ws', sink.record, sink.round, () => websocketConnects(target.server.url, tokens, n, target.connections));
      return;
    }
    case 'revoke':
    case 'revoke-confidential': {
      const pairs = await freshPairs(target, warm + n, undefined, CONFIDENTIAL.has(phase));
      await revoke(target, pairs, warm, UNRECORDED, phase);
      await revoke(target, pairs, n, sink, phase);
      return;
    }
    case 'device': {
      const { codes, pollableAt } = await approvedDeviceCodes(target, warm + n);
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, pollableAt - performance.now())));
      await deviceExchange(target, codes, warm);
      await deviceExchange(target, codes, n, sink);
      return;
    }
  }
}

/** Whether `target` can be measured in `phase`, or why not. */
function unsupported(target: Target, phase: Phase): string | null {
  if (phase === 'introspect' && target.introspector === null) return 'no /oauth/introspect (404)';
  if (phase === 'ws' && !target.hasWebSocket) return 'no /ws';
  if (phase === 'exchange-dpop' && !target.hasDpop) return 'no DPoP';
  if (phase === 'token-exchange' && !target.hasTokenExchange) return 'no token exchange';
  if (phase === 'device' && target.device === null) return 'no /oauth/device_authorization (404)';
  if (ASKED[phase] === 'openid') {
    if (!target.hasOpenId) return 'no OpenID Connect';
  } else if (ASKED[phase] !== undefined && !target.hasJwtResources) return 'no JWT access tokens';
  return null;
}

/**
 * `amount` WebSocket handshakes to /ws with a bearer token, `connections` at a time; each
 * socket is closed once open. The latency is from `new WebSocket` to the open event.
 */
async function websocketConnects(base: string, tokens: string[], amount: number, connections: number): Promise<LoadResult> {
  const url = `${base.replace(/^http/, 'ws')}/ws`;
  const latencies: number[] = [];
  const finishedAt: number[] = [];
  const unexpected: Record<string, number> = {};
  const start = performance.now();
  let started = 0;
  const lane = async () => {
    while (started < amount) {
      const token = tokens[started++ % tokens.length]!;
      const began = performance.now();
      const outcome = await new Promise<string>((resolve) => {
        const socket = new WebSocket(url, { headers: { authorization: `Bearer ${token}` } });
        socket.onopen = () => {
          latencies.push(performance.now() - began);
          finishedAt.push(performance.now());
          socket.onclose = () => resolve('open');
          socket.close(1000);
        };
        socket.onclose = (event) => resolve(`closed before open (${event.code})`);
      });
      if (outcome !== 'open') unexpected[outcome] = (unexpected[outcome] ?? 0) + 1;
    }
  };
  await Promise.all(Array.from({ length: Math.min(connections, amount) }, lane));
  const seconds = (performance.now() - start) / 1000;
  return {
    requests: amount,
    seconds,
    rps: latencies.length / seconds,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    max: latencies.reduce((a, b) => Math.max(a, b), 0),
    unexpected,
    errors: 0,
    sample: null,
    finishedAt,
    latencies,
  };
}

/**
 * A ceiling (bare Node, or bare Fastify), sampled before and after every round and pooled, so
 * that background load that comes and goes on a shared machine weighs on both sides of the ratio.
 */
async function ceilingSampler(options: Options, phase: Ceiling) {
  const ceiling = await startCeiling(phase === 'ceiling' ? 'node' : 'fastify');
  const samples: LoadResult[] = [];
  let cpuMs = 0;
  const run = (amount: number) => runLoad({ url: ceiling.url, connections: options.connections, amount, expect: 200, next: () => ({ path: '/' }) });
  await run(options.requests); // warm-up
  return {
    async sample() {
      const before = ceiling.cpuMs();
      const result = await run(options.requests * 4);
      cpuMs += ceiling.cpuMs() - before;
      const problem = failureReport(result);
      if (problem) throw new Error(`${LABELS[phase]}: ${problem}`);
      samples.push(result);
    },
    /** The pooled samples as one record; stops the ceiling's process. */
    async finish(): Promise<PhaseRecord> {
      const memory = ceiling.memory();
      await ceiling.stop();
      const latencies = samples.flatMap((s) => s.latencies);
      const seconds = samples.reduce((sum, s) => sum + s.seconds, 0);
      return {
        server: 'gatehouse-sqlite',
        phase,
        label: LABELS[phase],
        round: 0,
        requests: latencies.length,
        seconds,
        rps: latencies.length / seconds,
        p50Ms: percentile(latencies, 50),
        p99Ms: percentile(latencies, 99),
        maxMs: latencies.reduce((a, b) => Math.max(a, b), 0),
        cpuMsPerRequest: cpuMs / latencies.length,
        databaseCpuMsPerRequest: null,
        memory,
        statementsPerRequest: null,
      };
    },
  };
}

function basic(clientId: string, secret: string): string {
  return `Basic ${Buffer.from(`${encodeURIComponent(clientId)}:${encodeURIComponent(secret)}`).toString('base64')}`;
}

function cookieHeader(agent: UserAgent): string {
  return [...agent.cookies].map(([name, value]) => `${name}=${value}`).join('; ');
}

async function attachProfiler(server: ServerProcess, options: Options): Promise<ProfilerSession | null> {
  if (options.cpuProfileDir === null) return null;
  mkdirSync(options.cpuProfileDir, { recursive: true });
  return connectProfiler(server.inspectorUrl!);
}

/** `gatehouse_database_statements_total` as the server's /metrics says now; null for a build without it. */
async function statementsSent(base: string): Promise<number | null> {
  const text = await (await fetch(`${base}/metrics`)).text();
  const line = /^gatehouse_database_statements_total (\S+)$/m.exec(text);
  return line ? Number(line[1]) : null;
}

/** A fresh Gatehouse on an empty database: a user and clients made with the CLI, logged in, consented once. */
async function startGatehouseTarget(backend: BackendName, workers: number, options: Options): Promise<Target> {
  const database = await createDatabase(backend, options.postgresUrl);
  let server: ServerProcess | null = null;
  let profiler: ProfilerSession | null = null;
  const stop = async () => {
    await profiler?.close();
    await server?.stop();
    await database.drop();
  };
  try {
    const password = randomBytes(18).toString('base64url');
    await gatehouse(database.url, ['user', 'create', USERNAME, '--email', `${USERNAME}@example.com`, '--admin', '--password-stdin'], password);
    const created = async (args: string[]) =>
      JSON.parse(await gatehouse(database.url, ['client', 'create', ...args, '--json'])) as { client_id: string; client_secret?: string };
    // Resource servers with JWT access tokens, where the build has them (an older one refuses the flag).
    let hasJwtResources = true;
    for (const [alg, { uri, scope }] of Object.entries(JWT_RESOURCES)) {
      const args = ['resource', 'create', '--uri', uri, '--name', `Bench ${alg}`, '--scope', `${scope}=Bench`, '--token-format', 'jwt', '--signing-alg', alg];
      hasJwtResources &&= await gatehouse(database.url, args).then(
        () => true,
        () => false,
      );
    }
    // OpenID Connect where the build has it: its client-create knows the identity scopes.
    const hasOpenId = await gatehouse(database.url, ['client', 'create', '--name', 'OpenID probe', '--redirect-uri', REDIRECT_URI, '--scope', 'openid']).then(
      () => true,
      () => false,
    );
    const clientScopes = [hasOpenId ? OPENID_SCOPE : SCOPE, ...Object.values(JWT_RESOURCES).map((r) => r.scope)];
    const clientScope = hasJwtResources ? ['--scope', clientScopes.join(' ')] : [];
    const { client_id: clientId } = await created(['--name', 'Bench client', '--redirect-uri', REDIRECT_URI, ...clientScope]);
    const confidentialClient = await created(['--name', 'Bench confidential client', '--redirect-uri', REDIRECT_URI, '--confidential']);
    // Allowed to exchange tokens where the build has it (an older one refuses the flag).
    const hasTokenExchange = await gatehouse(database.url, ['client', 'update', confidentialClient.client_id, '--token-exchange']).then(
      () => true,
      () => false,
    );
    server = await startGatehouse(database.url, {
      inspect: options.cpuProfileDir !== null,
      logLevel: options.logLevel,
      workers,
      cpus: options.serverCpus.get(workers) ?? null,
      nodeOptions: options.nodeOptions,
      throttles: options.throttles,
      purgeSeconds: options.purgeSeconds,
      probe: probeOf(options),
    });

    const agent = new UserAgent(server.url);
    const outcome = await agent.authorize(authorizePath(clientId, 'consent', pkce().challenge), { username: USERNAME, password, decision: 'approve' });
    if (outcome.redirect?.searchParams.get('code') == null) {
      throw new Error(`logging in and approving the client did not end in a redirect with a code (status ${outcome.response.status})`);
    }
    const confidentialConsent = await agent.authorize(authorizePath(confidentialClient.client_id, 'consent', pkce().challenge), { decision: 'approve' });
    if (confidentialConsent.redirect?.searchParams.get('code') == null)
      throw new Error(`approving the confidential client did not end in a code (status ${confidentialConsent.response.status})`);
    const moreAsked: Asked[] = [...(hasJwtResources ? (Object.keys(JWT_RESOURCES) as JwtAlg[]) : []), ...(hasOpenId ? (['openid'] as const) : [])];
    for (const asked of moreAsked) {
      const consented = await agent.authorize(authorizePath(clientId, 'consent', pkce().challenge, asked), { decision: 'approve' });
      if (consented.redirect?.searchParams.get('code') == null)
        throw new Error(`approving the ${asked} request did not end in a code (status ${consented.response.status})`);
    }
    const cookie = cookieHeader(agent);

    // Endpoints that arrived after the bench did are measured only where the server has them,
    // so the bench still runs against older builds.
    const has = async (path: string, method: string) => (await fetch(server!.url + path, { method })).status !== 404;
    let introspector: string | null = null;
    if (await has('/oauth/introspect', 'POST')) {
      const { client_id, client_secret } = await created(['--name', 'Bench resource server', '--redirect-uri', REDIRECT_URI, '--confidential']);
      introspector = basic(client_id, client_secret!);
    }
    let device: Target['device'] = null;
    if (await has('/oauth/device_authorization', 'POST')) {
      const { client_id } = await created(['--name', 'Bench device', '--grant-type', 'device_code']);
      // The /device form's CSRF token (and its cookie), reused for every approval.
      const fields = formFields((await agent.visit('/device')).html, '/device');
      const deviceCookie = cookieHeader(agent);
      device = {
        clientId: client_id,
        approval: (userCode) => ({
          method: 'POST',
          path: '/device',
          headers: { cookie: deviceCookie },
          form: { ...Object.fromEntries(fields), user_code: userCode, decision: 'approve' },
        }),
      };
    }
    profiler = await attachProfiler(server, options);
    return {
      name: workers === 1 ? `gatehouse-${backend}` : `gatehouse-${backend}-w${workers}`,
      server,
      clientId,
      confidential: { clientId: confidentialClient.client_id, authorization: basic(confidentialClient.client_id, confidentialClient.client_secret!) },
      authorizeStatus: 302,
      cookie,
      introspector,
      hasWebSocket: await has('/ws', 'GET'),
      hasTokenExchange,
      hasDpop: 'dpop_signing_alg_values_supported' in ((await (await fetch(`${server.url}/.well-known/oauth-authorization-server`)).json()) as object),
      hasJwtResources,
      hasOpenId,
      device,
      connections: options.connections,
      // With several workers a scrape is one worker's count (README, "WORKERS").
      statements: workers === 1 && (await statementsSent(server.url)) !== null ? async () => (await statementsSent(server!.url))! : null,
      databaseCpuMs: backend === 'postgres' ? await localPostgresCpu(database.url) : null,
      profiler,
      profileDir: options.cpuProfileDir,
      probe: probeOf(options),
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** A fresh oidc-provider (bench/peer/server.ts), its session logged in and consented once through its interaction. */
async function startPeerTarget(adapter: PeerAdapter, options: Options): Promise<Target> {
  const directory = scratchDirectory();
  let server: ServerProcess | null = null;
  let profiler: ProfilerSession | null = null;
  const stop = async () => {
    await profiler?.close();
    await server?.stop();
    await directory.remove();
  };
  try {
    server = await startPeer(adapter, directory.path, { inspect: options.cpuProfileDir !== null, probe: probeOf(options) });
    const agent = new UserAgent(server.url);
    for (const client of [PEER_CLIENTS.public, PEER_CLIENTS.confidential]) {
      const outcome = await agent.visit(authorizePath(client, 'consent', pkce().challenge));
      if (outcome.redirect?.searchParams.get('code') == null)
        throw new Error(`the first authorization of ${client} did not end in a redirect with a code (status ${outcome.response.status})`);
    }
    profiler = await attachProfiler(server, options);
    return {
      name: `peer-${adapter}`,
      server,
      clientId: PEER_CLIENTS.public,
      confidential: { clientId: PEER_CLIENTS.confidential, authorization: basic(PEER_CLIENTS.confidential, PEER_CLIENTS.confidentialSecret) },
      authorizeStatus: 303,
      cookie: cookieHeader(agent),
      introspector: basic(PEER_CLIENTS.resourceServer, PEER_CLIENTS.resourceServerSecret),
      hasWebSocket: false,
      // oidc-provider has DPoP, but the peer is configured as a plain OAuth 2 server (bench/peer/server.ts).
      hasDpop: false,
      // oidc-provider has no RFC 8693 token exchange.
      hasTokenExchange: false,
      hasJwtResources: false,
      hasOpenId: false,
      device: { clientId: PEER_CLIENTS.device, approval: (userCode) => ({ method: 'POST', path: '/_bench/device/approve', form: { user_code: userCode } }) },
      connections: options.connections,
      statements: null,
      databaseCpuMs: null,
      profiler,
      profileDir: options.cpuProfileDir,
      probe: probeOf(options),
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

function startTarget(name: ServerName, options: Options): Promise<Target> {
  const [kind, variant, workers] = name.split('-') as ['gatehouse' | 'peer', string, string | undefined];
  return kind === 'gatehouse'
    ? startGatehouseTarget(variant as BackendName, workers ? Number(workers.slice(1)) : 1, options)
    : startPeerTarget(variant as PeerAdapter, options);
}

const median = (values: number[]) => {
  const sorted = values.filter(Number.isFinite).sort((a, b) => a - b);
  if (sorted.length === 0) return NaN;
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
};

/** Per server and phase, the median of each figure over the rounds. */
interface Summary {
  server: ServerName;
  phase: Phase;
  label: string;
  rounds: number;
  requests: number;
  rps: number;
  p50Ms: number;
  p99Ms: number;
  cpuMsPerRequest: number;
  databaseCpuMsPerRequest: number | null;
  rssMiB: number;
  ofCeiling: number;
  ofFastify: number;
  statementsPerRequest: number | null;
  /** Medians over the rounds: the server's and the load generator's shares of a core, the event loop's delay p99 and max. */
  serverCpuShare: number;
  loadCpuShare: number;
  loopP99Ms: number;
  loopMaxMs: number;
}

function summarize(records: PhaseRecord[], servers: ServerName[], phases: Phase[], ceiling: PhaseRecord, fastify: PhaseRecord): Summary[] {
  return servers.flatMap((server) =>
    phases.flatMap((phase) => {
      const rounds = records.filter((r) => r.server === server && r.phase === phase);
      if (rounds.length === 0) return [];
      const rps = median(rounds.map((r) => r.rps));
      return [
        {
          server,
          phase,
          label: LABELS[phase],
          rounds: rounds.length,
          requests: rounds[0]!.requests,
          rps,
          p50Ms: median(rounds.map((r) => r.p50Ms)),
          p99Ms: median(rounds.map((r) => r.p99Ms)),
          cpuMsPerRequest: median(rounds.map((r) => r.cpuMsPerRequest)),
          databaseCpuMsPerRequest: rounds.every((r) => r.databaseCpuMsPerRequest === null) ? null : median(rounds.map((r) => r.databaseCpuMsPerRequest ?? NaN)),
          rssMiB: median(rounds.map((r) => r.memory.rssMiB)),
          ofCeiling: rps / ceiling.rps,
          ofFastify: rps / fastify.rps,
          statementsPerRequest: rounds.every((r) => r.statementsPerRequest === null) ? null : median(rounds.map((r) => r.statementsPerRequest ?? NaN)),
          serverCpuShare: median(rounds.map((r) => r.serverCpuShare ?? NaN)),
          loadCpuShare: median(rounds.map((r) => r.loadCpuShare ?? NaN)),
          loopP99Ms: median(rounds.map((r) => r.loopDelay?.p99Ms ?? NaN)),
          loopMaxMs: median(rounds.map((r) => r.loopDelay?.maxMs ?? NaN)),
        },
      ];
    }),
  );
}

/** The statements column's name: on PostgreSQL each statement is a round trip. */
function statementsColumn(backends: readonly BackendName[]): string {
  if (!backends.includes('sqlite')) return 'round trips';
  return backends.includes('postgres') ? 'statements (PostgreSQL: round trips)' : 'statements';
}

const perRequest = (value: number | null) => (value === null ? '–' : fixed(value, 2));

/** The server's CPU per request and, where measured, its database's beside it: "0.512 + 0.431". */
const withDatabase = (s: Summary) => fixed(s.cpuMsPerRequest, 3) + (s.databaseCpuMsPerRequest === null ? '' : ` + ${fixed(s.databaseCpuMsPerRequest, 3)}`);

/** Gatehouse beside the peer, phase by phase: one row per Gatehouse backend and phase. */
function sideBySide(summaries: Summary[], options: Options): { headers: string[]; rows: Array<Array<string | number>> } {
  const find = (server: ServerName, phase: Phase) => summaries.find((s) => s.server === server && s.phase === phase);
  const peers = options.peers.map((adapter) => `peer-${adapter}` as const);
  const peerName = (peer: ServerName) => (peer === 'peer-memory' ? 'in-memory' : 'node:sqlite');
  const headers = [
    'operation',
    'Gatehouse req/s',
    ...peers.map((peer) => `oidc-provider ${peerName(peer)} req/s`),
    ...peers.map((peer) => `ratio ÷ ${peerName(peer)}`),
    'Gatehouse p50 / p99 ms',
    ...peers.map((peer) => `${peerName(peer)} p50 / p99 ms`),
    'Gatehouse CPU ms/req (+ its PostgreSQL)',
    ...peers.map((peer) => `${peerName(peer)} CPU ms/req`),
    'Gatehouse RSS MiB',
    ...peers.map((peer) => `${peerName(peer)} RSS MiB`),
    `Gatehouse ${statementsColumn(options.backends)}`,
  ];
  const variants = options.backends.flatMap((backend) => options.workers.map((n) => ({ backend, n })));
  const rows = variants.flatMap(({ backend, n }) =>
    options.phases.flatMap((phase) => {
      const ours = find(n === 1 ? `gatehouse-${backend}` : `gatehouse-${backend}-w${n}`, phase);
      if (!ours) return [];
      const theirs = peers.map((peer) => find(peer, phase));
      const cell = (s: Summary | undefined, f: (s: Summary) => string) => (s ? f(s) : '–');
      return [
        [
          `${ours.label}${[options.backends.length > 1 ? backend : '', options.workers.length > 1 ? `WORKERS=${n}` : '']
            .filter(Boolean)
            .join(', ')
            .replace(/^(.+)$/, ' ($1)')}`,
          fixed(ours.rps, 0),
          ...theirs.map((s) => cell(s, (x) => fixed(x.rps, 0))),
          ...theirs.map((s) => cell(s, (x) => fixed(ours.rps / x.rps, 2))),
          `${fixed(ours.p50Ms, 1)} / ${fixed(ours.p99Ms, 1)}`,
          ...theirs.map((s) => cell(s, (x) => `${fixed(x.p50Ms, 1)} / ${fixed(x.p99Ms, 1)}`)),
          withDatabase(ours),
          ...theirs.map((s) => cell(s, (x) => fixed(x.cpuMsPerRequest, 3))),
          fixed(ours.rssMiB, 0),
          ...theirs.map((s) => cell(s, (x) => fixed(x.rssMiB, 0))),
          perRequest(ours.statementsPerRequest),
        ],
      ];
    }),
  );
  return { headers, rows };
}

async function main(): Promise<number> {
  const parsed = commandLine('bench', HELP, readOptions);
  if ('exit' in parsed) return parsed.exit;
  const { options } = parsed;

  const pins = options.workers.map((n) => ({ n, ...(options.pin ? pinning(n) : { server: null, note: 'not pinned: --no-pin' }) }));
  for (const { n, server } of pins) options.serverCpus.set(n, server);
  const pinned = { note: pins.map(({ n, note }) => `WORKERS=${n}: ${note}`).join('; ') };
  const startedAt = new Date().toISOString();
  const atStart = machine();
  const measured = revision();
  const notes: string[] = [];
  if (options.backends.includes('postgres')) {
    const problem = await postgresProblem(options.postgresUrl);
    if (problem) {
      shout([`PostgreSQL NOT MEASURED: ${problem}`, 'Only SQLite was benchmarked. Set --postgres-url or BENCH_POSTGRES_URL to point at a server.']);
      notes.push(`PostgreSQL not measured: ${problem}`);
      options.backends = options.backends.filter((backend) => backend !== 'postgres');
    }
  }
  const servers: ServerName[] = [
    ...options.backends.flatMap((backend) => options.workers.map((n): ServerName => (n === 1 ? `gatehouse-${backend}` : `gatehouse-${backend}-w${n}`))),
    ...options.peers.map((adapter) => `peer-${adapter}` as const),
  ];
  const warm = options.warmup;
  measuredSeconds = options.duration;
  timelineFile = options.timeline;
  probeDirectory = scratchDirectory().path;
  console.log(
    `Gatehouse bench at ${measured}: ${servers.map((s) => serverLabel(s)).join(', ')}; ${options.rounds} round(s) of ${options.phases.join(', ')}; ${options.connections} connections, ${options.requests} requests per phase, LOG_LEVEL=${options.logLevel}, WORKERS=${options.workers.join(' and ')}${options.nodeOptions ? `, NODE_OPTIONS=${options.nodeOptions}` : ''} (${pinned.note})${options.cpuProfileDir ? ', CPU profiling on (numbers are slower)' : ''}; load average ${atStart.loadAverageAtStart.join(' ')}`,
  );

  const records: PhaseRecord[] = [];
  const failed: Failure[] = [];
  const ceilings = [await ceilingSampler(options, 'ceiling'), await ceilingSampler(options, 'ceiling-fastify')];
  const sampleCeilings = async () => {
    for (const ceiling of ceilings) await ceiling.sample();
  };
  let pooled: PhaseRecord[];
  try {
    for (let round = 1; round <= options.rounds; round++) {
      console.log(`\nround ${round} of ${options.rounds}:`);
      await sampleCeilings();
      for (const phase of options.phases) {
        // Alternating: each round takes the servers in the other order.
        for (const name of round % 2 === 1 ? servers : [...servers].reverse()) {
          if (failed.some((f) => f.server === name && f.phase === phase)) continue;
          let target: Target | null = null;
          try {
            target = await startTarget(name, options);
            const why = unsupported(target, phase);
            if (why !== null) {
              const note = `${serverLabel(name)}: ${LABELS[phase]} not measured (${why})`;
              if (!notes.includes(note)) notes.push(note);
              continue;
            }
            await runPhase(target, phase, options.requests, warm, { record: records, round });
          } catch (error) {
            const reason = (error as Error).message;
            console.error(`  ${serverLabel(name)} ${LABELS[phase]}: FAILED: ${reason}`);
            failed.push({ server: name, phase, round, reason });
          } finally {
            await target?.stop();
          }
        }
      }
      await sampleCeilings();
    }
  } finally {
    pooled = await Promise.all(ceilings.map((ceiling) => ceiling.finish()));
  }
  const [nodeCeiling, fastifyCeiling] = pooled as [PhaseRecord, PhaseRecord];
  for (const c of pooled)
    console.log(`  ${c.label}: ${fixed(c.rps, 0)} req/s, p50 ${fixed(c.p50Ms, 2)} ms, p99 ${fixed(c.p99Ms, 2)} ms, CPU ${fixed(c.cpuMsPerRequest, 3)} ms/req`);

  const summaries = summarize(records, servers, options.phases, nodeCeiling, fastifyCeiling);
  const comparison = options.peers.length > 0 ? sideBySide(summaries, options) : null;
  const name = runName;
  const file = saveResults(name, {
    kind: 'bench',
    startedAt,
    finishedAt: new Date().toISOString(),
    revision: measured,
    machine: { ...atStart, loadAverageAtEnd: loadavg().map((n) => Math.round(n * 100) / 100) },
    options,
    notes,
    ceiling: nodeCeiling,
    fastifyCeiling,
    summary: summaries,
    records,
    failures: failed,
  });

  const rows = [
    ...pooled.map((c) => [
      'ceiling',
      c.label,
      c.requests,
      fixed(c.rps, 0),
      fixed(c.p50Ms, 2),
      fixed(c.p99Ms, 2),
      fixed(c.cpuMsPerRequest, 3),
      fixed(c.memory.rssMiB, 0),
      `${fixed((c.rps / nodeCeiling.rps) * 100, 1)} %`,
      `${fixed((c.rps / fastifyCeiling.rps) * 100, 1)} %`,
      '–',
      '–',
      '–',
    ]),
    ...summaries.map((s) => [
      serverLabel(s.server),
      s.label,
      s.requests,
      fixed(s.rps, 0),
      fixed(s.p50Ms, 2),
      fixed(s.p99Ms, 2),
      withDatabase(s),
      fixed(s.rssMiB, 0),
      `${fixed(s.ofCeiling * 100, 1)} %`,
      `${fixed(s.ofFastify * 100, 1)} %`,
      perRequest(s.statementsPerRequest),
      `${fixed(s.serverCpuShare, 2)} / ${fixed(s.loadCpuShare, 2)}`,
      `${fixed(s.loopP99Ms, 1)} / ${fixed(s.loopMaxMs, 0)}`,
    ]),
  ];
  const headers = [
    'server',
    'phase',
    'requests',
    'req/s',
    'p50 ms',
    'p99 ms',
    'CPU ms/req (+ its PostgreSQL)',
    'RSS MiB',
    'of bare node:http',
    'of bare Fastify',
    `${statementsColumn(options.backends)} per request`,
    'core share: server / load generator',
    'event-loop delay p99 / max ms',
  ];
  console.log(`\n${markdownTable(headers, rows)}\n`);
  if (comparison) console.log(`${markdownTable(comparison.headers, comparison.rows, 1)}\n`);
  if (options.rounds > 1) console.log(`Medians of ${options.rounds} interleaved rounds.`);
  for (const note of notes) console.log(`- ${note}`);
  for (const f of failed) console.log(`- ${serverLabel(f.server)} ${LABELS[f.phase]} FAILED (round ${f.round}): ${f.reason}`);

  const profiled = records.filter((p) => p.cpuProfile);
  if (profiled.length > 0) {
    console.log(`\nCPU profiles (${options.cpuProfileDir}):`);
    for (const p of profiled) console.log(`\n${formatSummary(`${serverLabel(p.server)} ${p.label} (round ${p.round})`, p.cpuProfile!.summary)}`);
  }
  console.log(`\nResults: ${file}`);
  if (options.websockets) {
    console.log('\nWebSocket load: concurrent sockets, then a mass revocation (bench/websockets.ts)');
    await measureWebsockets(options.backends.filter((backend) => !failed.some((f) => f.server === `gatehouse-${backend}`)));
  }
  return failed.length > 0 ? 1 : 0;
}

main().then(exit, (error: unknown) => {
  console.error(`bench: ${(error as Error).stack ?? error}`);
  return exit(1);
});
