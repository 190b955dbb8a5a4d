/**
 * `npm run bench`: Gatehouse under load, phase by phase, on SQLite and on PostgreSQL, next
 * to the ceiling of a bare Node `http` server on the same machine.
 *
 * Every request gets input nobody has used before: the authorize phase's redirects carry
 * the codes the exchange phase redeems, whose refresh tokens the refresh phase rotates,
 * whose successors the revocation phase revokes. A warm-up round of the same chain runs
 * first, unrecorded. Any response without the expected status fails the run (exit 1).
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { UserAgent } from '../test/support/user-agent.ts';
import {
  DEFAULT_POSTGRES_URL,
  createDatabase,
  exit,
  failureReport,
  failures,
  fixed,
  gatehouse,
  machine,
  markdownTable,
  percentile,
  postgresProblem,
  revision,
  runLoad,
  saveResults,
  shout,
  startCeiling,
  pinning,
  startGatehouse,
  timestamp,
  type BackendName,
  type LoadResult,
  type Memory,
  type ServerProcess,
} from './harness.ts';
import { measureWebsockets } from './websockets.ts';
import { connectProfiler, formatSummary, summarise, type ProfileSummary, type ProfilerSession } from './profile.ts';

const HELP = `Usage: npm run bench -- [options]

Measures Gatehouse phase by phase on SQLite and on PostgreSQL: authorize with a logged-in,
already-consented session (302 with a code), code exchange, refresh, bearer GET
/api/profile, introspection by a resource server, WebSocket connect (these two only if
the server has /oauth/introspect and /ws), and revocation; and, in the same run, a bare
Node http server answering a tiny JSON body as the ceiling. Gatehouse and the ceiling run
as separate processes, the load generator (autocannon) in this one. Every request gets
fresh input, and any response without the expected status fails the run (exit code 1).

Options:
  --connections <n>     concurrent connections (default 50)
  --requests <n>        requests per token phase (default 3000); bearer /api/profile gets
                        3 times as many; the ceiling is sampled with 4 times as many before and
                        again after the phases; the unrecorded warm-up round gets a quarter
  --backends <list>     comma-separated: sqlite,postgres (default both; PostgreSQL is skipped,
                        loudly, when it cannot be reached)
  --postgres-url <url>  administrator connection used to create and drop a throw-away database
                        (default $BENCH_POSTGRES_URL or postgres://postgres@127.0.0.1:5432/postgres)
  --cpu-prof            record a CPU profile of the server during every phase (V8's sampling
                        profiler through the inspector, as node --cpu-prof does, but cut per
                        phase) and print the top self-time functions
  --cpu-prof-dir <dir>  where the .cpuprofile files go (default: a new directory in the temp dir)
  --log-level <level>   the server's LOG_LEVEL (default warn: no per-request lines); info
                        measures the cost of the one-line-per-request log (written to /dev/null)
  --no-websockets       skip the closing WebSocket load (2000 concurrent sockets over 200
                        grants, then every grant revoked at once: npm run bench:ws alone)
  --workers <n>         serve from n processes (WORKERS=n); where taskset exists and the machine
                        has n+1 cores, the server is pinned to cores 1..n and the load to core 0
  -h, --help            show this text

Writes bench/results/<timestamp>.json and prints a Markdown table at the end.`;

const REDIRECT_URI = 'http://127.0.0.1:9/callback'; // never visited: the bench reads the code from the Location header
const USERNAME = 'bench';

type Phase = 'ceiling' | 'authorize' | 'exchange' | 'refresh' | 'profile' | 'introspect' | 'ws' | 'revoke';

const LABELS: Record<Phase, string> = {
  ceiling: 'ceiling: bare node:http',
  authorize: 'authorize (302 + code)',
  exchange: 'code exchange',
  refresh: 'refresh',
  profile: 'bearer GET /api/profile',
  introspect: 'introspection',
  ws: 'WebSocket connect',
  revoke: 'revocation',
};

interface PhaseRecord {
  phase: Phase;
  label: string;
  requests: number;
  seconds: number;
  rps: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  /** Of the process under load, right after the phase. */
  memory: Memory;
  /** rps divided by the ceiling's rps. */
  ofCeiling: number;
  cpuProfile?: { file: string; summary: ProfileSummary };
}

interface BackendReport {
  backend: BackendName;
  status: 'measured' | 'failed' | 'skipped';
  reason?: string;
  phases: PhaseRecord[];
}

interface Options {
  connections: number;
  requests: number;
  backends: BackendName[];
  postgresUrl: string;
  cpuProfileDir: string | null;
  logLevel: string;
  /** Whether to close with the WebSocket load of bench/websockets.ts. */
  websockets: boolean;
  /** WORKERS for the server, and the cores it is pinned to (null: not pinned). */
  workers: number;
  serverCpus: string | null;
}

function readOptions(argv: string[]): Options | null {
  const { values } = parseArgs({
    args: argv,
    options: {
      connections: { type: 'string' },
      requests: { type: 'string' },
      backends: { type: 'string' },
      'postgres-url': { type: 'string' },
      'cpu-prof': { type: 'boolean' },
      'cpu-prof-dir': { type: 'string' },
      'log-level': { type: 'string' },
      'no-websockets': { type: 'boolean' },
      workers: { type: 'string' },
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
  const backends = (values.backends ?? 'sqlite,postgres').split(',').map((name) => name.trim());
  for (const name of backends) if (name !== 'sqlite' && name !== 'postgres') throw new Error(`--backends: unknown backend "${name}" (sqlite, postgres)`);
  const options: Options = {
    connections: count('connections', values.connections, 50),
    requests: count('requests', values.requests, 3000),
    backends: [...new Set(backends)] as BackendName[],
    postgresUrl: values['postgres-url'] ?? DEFAULT_POSTGRES_URL,
    cpuProfileDir: values['cpu-prof'] || values['cpu-prof-dir'] ? (values['cpu-prof-dir'] ?? join(tmpdir(), `gatehouse-profiles-${timestamp()}`)) : null,
    logLevel: values['log-level'] ?? 'warn',
    websockets: !values['no-websockets'],
    workers: count('workers', values.workers, 1),
    serverCpus: null,
  };
  if (!['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].includes(options.logLevel)) throw new Error(`--log-level: unknown level "${options.logLevel}"`);
  if (options.workers > 1 && options.cpuProfileDir) throw new Error('--cpu-prof profiles one process: use it with --workers 1');
  if (options.requests < options.connections * 4) throw new Error(`--requests must be at least 4 × --connections (${options.connections * 4}): the warm-up round gets a quarter`);
  return options;
}

// ---------------------------------------------------------------------------------------

/** A server being measured, with what the phases need to talk to it. */
interface Target {
  backend: BackendName;
  server: ServerProcess;
  clientId: string;
  /** The logged-in user's session cookie(s). */
  cookie: string;
  /** The Authorization header of a confidential client acting as resource server; null when the server has no /oauth/introspect. */
  introspector: string | null;
  hasWebSocket: boolean;
  connections: number;
  profiler: ProfilerSession | null;
  profileDir: string | null;
}

interface Pair {
  access: string;
  refresh: string;
}

function pkce() {
  const verifier = randomBytes(32).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
}

function authorizePath(clientId: string, state: string, challenge: string): string {
  const query = new URLSearchParams({ response_type: 'code', client_id: clientId, redirect_uri: REDIRECT_URI, state, code_challenge: challenge, code_challenge_method: 'S256' });
  return `/oauth/authorize?${query}`;
}

/** The pair in a token response, or null. */
function tokensOf(body: string): Pair | null {
  const parsed = JSON.parse(body) as { access_token?: unknown; refresh_token?: unknown };
  return typeof parsed.access_token === 'string' && typeof parsed.refresh_token === 'string' ? { access: parsed.access_token, refresh: parsed.refresh_token } : null;
}

function header(headers: Record<string, string | string[] | undefined>, name: string): string | undefined {
  const found = Object.entries(headers).find(([key]) => key.toLowerCase() === name)?.[1];
  return Array.isArray(found) ? found[0] : found;
}

/** Takes the next input; an exhausted pool yields a value the server must refuse, so the run fails instead of hanging. */
function take<T>(pool: T[], exhausted: T): T {
  return pool.shift() ?? exhausted;
}

/** Runs one phase; records it (with a CPU profile when asked) unless this is the warm-up. */
async function phase(target: Target, name: Phase, records: PhaseRecord[] | null, load: () => Promise<LoadResult>): Promise<LoadResult> {
  const profiler = records ? target.profiler : null;
  await profiler?.start();
  const result = await load();
  const profile = profiler ? await profiler.stop() : null;
  const memory = target.server.memory();
  const problem = failureReport(result);
  if (problem) throw new Error(`${target.backend} ${LABELS[name]}: ${failures(result)} of ${result.requests} requests failed: ${problem}`);
  if (records) {
    const record: PhaseRecord = {
      phase: name,
      label: LABELS[name],
      requests: result.requests,
      seconds: result.seconds,
      rps: result.rps,
      p50Ms: result.p50,
      p99Ms: result.p99,
      maxMs: result.max,
      memory,
      ofCeiling: NaN,
    };
    if (profile && target.profileDir) {
      const file = join(target.profileDir, `${target.backend}-${name}.cpuprofile`);
      writeFileSync(file, JSON.stringify(profile));
      record.cpuProfile = { file, summary: summarise(profile) };
    }
    records.push(record);
    printPhase(target.backend, record);
  }
  return result;
}

function printPhase(backend: BackendName, p: PhaseRecord): void {
  console.log(
    `  ${backend.padEnd(8)} ${p.label.padEnd(24)} ${String(p.requests).padStart(6)} req ${fixed(p.rps, 0).padStart(6)} req/s  p50 ${fixed(p.p50Ms, 2).padStart(7)} ms  p99 ${fixed(p.p99Ms, 2).padStart(7)} ms  RSS ${fixed(p.memory.rssMiB, 0)} MiB`,
  );
}

/**
 * One round of the chain: n authorizations, n exchanges of their codes, n refreshes of the
 * resulting tokens, bearer requests, introspections and WebSocket connects with the fresh
 * access tokens, and n revocations of the fresh refresh tokens.
 */
async function chain(target: Target, n: number, records: PhaseRecord[] | null): Promise<void> {
  const { server, clientId, connections } = target;
  const url = server.url;

  const requests = Array.from({ length: n }, () => ({ state: randomBytes(12).toString('base64url'), ...pkce() }));
  const verifiers = new Map(requests.map((r) => [r.state, r.verifier]));
  const codes: Array<{ code: string; verifier: string }> = [];
  await phase(target, 'authorize', records, () =>
    runLoad({
      url,
      connections,
      amount: n,
      expect: 302,
      next: () => {
        const request = take(requests, { state: 'exhausted', verifier: '', challenge: 'exhausted' });
        return { path: authorizePath(clientId, request.state, request.challenge), headers: { cookie: target.cookie } };
      },
      check: (_body, headers) => {
        const location = new URL(header(headers, 'location') ?? '', 'http://invalid');
        const code = location.searchParams.get('code');
        const verifier = verifiers.get(location.searchParams.get('state') ?? '');
        if (code === null || verifier === undefined) return false;
        codes.push({ code, verifier });
        return true;
      },
    }),
  );

  const issued: Pair[] = [];
  await phase(target, 'exchange', records, () =>
    runLoad({
      url,
      connections,
      amount: n,
      expect: 200,
      next: () => {
        const { code, verifier } = take(codes, { code: 'exhausted', verifier: 'exhausted' });
        return { method: 'POST', path: '/api/token', form: { grant_type: 'authorization_code', code, redirect_uri: REDIRECT_URI, client_id: clientId, code_verifier: verifier } };
      },
      check: (body) => {
        const pair = tokensOf(body);
        if (pair) issued.push(pair);
        return pair !== null;
      },
    }),
  );

  const refreshed: Pair[] = [];
  await phase(target, 'refresh', records, () =>
    runLoad({
      url,
      connections,
      amount: n,
      expect: 200,
      next: () => ({
        method: 'POST',
        path: '/api/token',
        form: { grant_type: 'refresh_token', refresh_token: take(issued, { access: '', refresh: 'exhausted' }).refresh, client_id: clientId },
      }),
      check: (body) => {
        const pair = tokensOf(body);
        if (pair) refreshed.push(pair);
        return pair !== null;
      },
    }),
  );

  // Every access token from the refresh phase is live; the bearer phase goes round them all.
  let turn = 0;
  await phase(target, 'profile', records, () =>
    runLoad({
      url,
      connections,
      amount: n * 3,
      expect: 200,
      next: () => ({ path: '/api/profile', headers: { authorization: `Bearer ${refreshed[turn++ % refreshed.length]!.access}` } }),
      check: (body) => body.includes(`"username":"${USERNAME}"`),
    }),
  );

  const introspector = target.introspector;
  if (introspector !== null) {
    await phase(target, 'introspect', records, () =>
      runLoad({
        url,
        connections,
        amount: n,
        expect: 200,
        next: () => ({
          method: 'POST',
          path: '/oauth/introspect',
          headers: { authorization: introspector },
          form: { token: refreshed[turn++ % refreshed.length]!.access, token_type_hint: 'access_token' },
        }),
        check: (body) => body.includes('"active":true'),
      }),
    );
  }

  if (target.hasWebSocket) {
    await phase(target, 'ws', records, () => websocketConnects(url, refreshed.map((pair) => pair.access), n, connections));
  }

  await phase(target, 'revoke', records, () =>
    runLoad({
      url,
      connections,
      amount: n,
      expect: 200,
      next: () => ({
        method: 'POST',
        path: '/oauth/revoke',
        form: { token: take(refreshed, { access: '', refresh: 'exhausted' }).refresh, token_type_hint: 'refresh_token', client_id: clientId },
      }),
    }),
  );
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
 * The bare-Node ceiling, sampled before and after the backend's phases and pooled, so that
 * background load that comes and goes on a shared machine weighs on both sides of the ratio.
 */
async function ceilingSampler(options: Options) {
  const ceiling = await startCeiling();
  const samples: LoadResult[] = [];
  const load = (amount: number) => runLoad({ url: ceiling.url, connections: options.connections, amount, expect: 200, next: () => ({ path: '/' }) });
  const sample = async () => {
    const result = await load(options.requests * 4);
    const problem = failureReport(result);
    if (problem) throw new Error(`ceiling: ${problem}`);
    samples.push(result);
  };
  await load(options.requests); // warm-up
  return {
    sample,
    /** The pooled samples as one record; stops the ceiling's process. */
    async finish(): Promise<PhaseRecord> {
      const memory = ceiling.memory();
      await ceiling.stop();
      const latencies = samples.flatMap((s) => s.latencies);
      const seconds = samples.reduce((sum, s) => sum + s.seconds, 0);
      return {
        phase: 'ceiling',
        label: LABELS.ceiling,
        requests: latencies.length,
        seconds,
        rps: latencies.length / seconds,
        p50Ms: percentile(latencies, 50),
        p99Ms: percentile(latencies, 99),
        maxMs: latencies.reduce((a, b) => Math.max(a, b), 0),
        memory,
        ofCeiling: 1,
      };
    },
  };
}

/** Creates the user and client with the CLI, starts the server, logs in and consents once. */
async function prepare(backend: BackendName, databaseUrl: string, options: Options): Promise<Target> {
  const password = randomBytes(18).toString('base64url');
  await gatehouse(databaseUrl, ['user', 'create', USERNAME, '--email', `${USERNAME}@example.com`, '--admin', '--password-stdin'], password);
  const { client_id: clientId } = JSON.parse(await gatehouse(databaseUrl, ['client', 'create', '--name', 'Bench client', '--redirect-uri', REDIRECT_URI, '--json'])) as {
    client_id: string;
  };
  const server = await startGatehouse(databaseUrl, { inspect: options.cpuProfileDir !== null, logLevel: options.logLevel, workers: options.workers, cpus: options.serverCpus });

  const agent = new UserAgent(server.url);
  const first = pkce();
  const outcome = await agent.authorize(authorizePath(clientId, 'consent', first.challenge), { username: USERNAME, password, decision: 'approve' });
  if (outcome.redirect?.searchParams.get('code') == null) {
    await server.stop();
    throw new Error(`${backend}: logging in and approving the client did not end in a redirect with a code (status ${outcome.response.status})`);
  }
  const cookie = [...agent.cookies].map(([name, value]) => `${name}=${value}`).join('; ');

  // Endpoints that arrived after the bench did are measured only where the server has them,
  // so the bench still runs against older builds.
  const has = async (path: string, method: string) => (await fetch(server.url + path, { method })).status !== 404;
  let introspector: string | null = null;
  if (await has('/oauth/introspect', 'POST')) {
    const created = await gatehouse(databaseUrl, ['client', 'create', '--name', 'Bench resource server', '--redirect-uri', REDIRECT_URI, '--confidential', '--json']);
    const { client_id, client_secret } = JSON.parse(created) as { client_id: string; client_secret: string };
    introspector = `Basic ${Buffer.from(`${encodeURIComponent(client_id)}:${encodeURIComponent(client_secret)}`).toString('base64')}`;
  }
  const hasWebSocket = await has('/ws', 'GET');
  const profiler = options.cpuProfileDir === null ? null : await connectProfiler(server.inspectorUrl!);
  if (options.cpuProfileDir !== null) mkdirSync(options.cpuProfileDir, { recursive: true });
  return { backend, server, clientId, cookie, introspector, hasWebSocket, connections: options.connections, profiler, profileDir: options.cpuProfileDir };
}

async function benchBackend(backend: BackendName, options: Options, notes: string[]): Promise<BackendReport> {
  const phases: PhaseRecord[] = [];
  console.log(`\n${backend}:`);
  const database = await createDatabase(backend, options.postgresUrl);
  let target: Target | null = null;
  let ceiling: Awaited<ReturnType<typeof ceilingSampler>> | null = null;
  try {
    ceiling = await ceilingSampler(options);
    await ceiling.sample();
    target = await prepare(backend, database.url, options);
    const missing = [
      ...(target.introspector === null ? ['introspection: not measured, this server has no /oauth/introspect (404)'] : []),
      ...(target.hasWebSocket ? [] : ['WebSocket connect: not measured, this server has no /ws (404)']),
    ];
    for (const note of missing) if (!notes.includes(note)) notes.push(note);
    await chain(target, Math.max(options.connections, Math.floor(options.requests / 4)), null); // warm-up, unrecorded
    await chain(target, options.requests, phases);
    await ceiling.sample();
    const pooled = await ceiling.finish();
    ceiling = null;
    printPhase(backend, pooled);
    for (const record of phases) record.ofCeiling = record.rps / pooled.rps;
    return { backend, status: 'measured', phases: [pooled, ...phases] };
  } catch (error) {
    console.error(`  ${backend}: FAILED: ${(error as Error).message}`);
    return { backend, status: 'failed', reason: (error as Error).message, phases };
  } finally {
    await ceiling?.finish();
    await target?.profiler?.close();
    await target?.server.stop();
    await database.drop();
  }
}

async function main(): Promise<number> {
  let options: Options | null;
  try {
    options = readOptions(process.argv.slice(2));
  } catch (error) {
    console.error(`bench: ${(error as Error).message}\n\n${HELP}`);
    return 2;
  }
  if (options === null) {
    console.log(HELP);
    return 0;
  }

  const pinned = pinning(options.workers);
  options.serverCpus = pinned.server;
  const startedAt = new Date().toISOString();
  const measured = revision();
  const notes: string[] = [];
  const reports: BackendReport[] = [];
  console.log(
    `Gatehouse bench at ${measured}: ${options.connections} connections, ${options.requests} requests per token phase, LOG_LEVEL=${options.logLevel}, WORKERS=${options.workers} (${pinned.note})${options.cpuProfileDir ? ', CPU profiling on (numbers are slower)' : ''}`,
  );

  for (const backend of options.backends) {
    if (backend === 'postgres') {
      const problem = await postgresProblem(options.postgresUrl);
      if (problem) {
        shout([`PostgreSQL NOT MEASURED: ${problem}`, 'Only SQLite was benchmarked. Set --postgres-url or BENCH_POSTGRES_URL to point at a server.']);
        notes.push(`PostgreSQL not measured: ${problem}`);
        reports.push({ backend, status: 'skipped', reason: problem, phases: [] });
        continue;
      }
    }
    reports.push(await benchBackend(backend, options, notes));
  }

  const name = timestamp();
  const file = saveResults(name, { kind: 'bench', startedAt, revision: measured, machine: machine(), options, notes, backends: reports });

  const rows = reports.flatMap((report) =>
    report.phases.map((p) => [
      report.backend,
      p.label,
      p.requests,
      fixed(p.rps, 0),
      fixed(p.p50Ms, 2),
      fixed(p.p99Ms, 2),
      fixed(p.memory.rssMiB, 0),
      Number.isFinite(p.ofCeiling) ? `${fixed(p.ofCeiling * 100, 1)} %` : '-',
    ]),
  );
  console.log(`\n${markdownTable(['backend', 'phase', 'requests', 'req/s', 'p50 ms', 'p99 ms', 'RSS MiB', 'of ceiling'], rows)}\n`);
  for (const note of notes) console.log(`- ${note}`);
  for (const report of reports) if (report.status === 'failed') console.log(`- ${report.backend} FAILED: ${report.reason}`);

  const profiled = reports.flatMap((report) => report.phases.filter((p) => p.cpuProfile).map((p) => ({ report, p })));
  if (profiled.length > 0) {
    console.log(`\nCPU profiles (${options.cpuProfileDir}):`);
    for (const { report, p } of profiled) console.log(`\n${formatSummary(`${report.backend} ${p.label}`, p.cpuProfile!.summary)}`);
  }
  console.log(`\nResults: ${file}`);
  if (options.websockets) {
    console.log('\nWebSocket load: concurrent sockets, then a mass revocation (bench/websockets.ts)');
    await measureWebsockets(reports.filter((report) => report.status !== 'failed').map((report) => report.backend));
  }
  return reports.some((report) => report.status === 'failed') ? 1 : 0;
}

main().then(exit, (error: unknown) => {
  console.error(`bench: ${(error as Error).stack ?? error}`);
  return exit(1);
});
