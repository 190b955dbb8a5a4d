/**
 * `npm run bench:metrics`: what many `/metrics` scrapes at once cost everybody else (issue 11
 * item 5). On a fresh SQLite database migrated by the checkout's own `gatehouse migrate`, with
 * millions of audit events, it starts `gatehouse serve`, and while a probe asks for
 * `/.well-known/oauth-authorization-server` every 20 ms it fires a burst of concurrent
 * `GET /metrics`. It reports the probe's latency before the burst (the baseline) and during
 * it, and how long the burst took. `--checkout` measures other checkouts (a worktree of an
 * older commit), interleaved round by round, so that the machine's load hits them alike.
 */
import { resolve } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { parseArgs } from 'node:util';
import { parseDatabaseUrl } from '../src/config.ts';
import {
  commandLine,
  ROOT,
  count,
  createDatabase,
  exit,
  failureReport,
  fixed,
  gatehouse,
  machine,
  markdownTable,
  percentile,
  revision,
  runLoad,
  saveResults,
  startGatehouse,
  timestamp,
  type ServerProcess,
} from './harness.ts';

const HELP = `Usage: npm run bench:metrics -- [options]

Fills a throw-away SQLite database (migrated by the checkout's own gatehouse migrate) with
audit events, starts gatehouse serve on it, and while a probe requests
GET /.well-known/oauth-authorization-server every 20 ms, fires concurrent GET /metrics.
Reports the probe's latency for a few seconds before the scrapes (baseline) and while
they run, and how long the scrapes took.

Options:
  --checkout <dir>   repository whose src/main.ts is measured; repeat to compare several
                     (measured in turn, round by round); default this checkout
  --rounds <n>       rounds per checkout (default 2); the summary gives the median round
  --rows <n>         audit events stored (default 2M)
  --scrapes <n>      concurrent GET /metrics (default 200)
  --seconds <n>      probe window from the first scrape on, at least until the last answer (default 10)
  -h, --help         show this text

Counts accept k and M suffixes (10k, 2M). Writes bench/results/metrics-<timestamp>.json and
prints Markdown tables at the end.`;

const PROBE_PATH = '/.well-known/oauth-authorization-server';
const PROBE_EVERY_MS = 20;
const BASELINE_MS = 3000;
/** A probe slower than this counts as stalled. */
const STALLED_MS = 100;
/** After start-up, before the baseline: the fixed version counts its tables once at start. */
const SETTLE_MS = 2000;
const YEAR = 365 * 24 * 3600_000;

interface Options {
  checkouts: string[];
  rounds: number;
  rows: number;
  scrapes: number;
  seconds: number;
}

function readOptions(argv: string[]): Options | null {
  const { values } = parseArgs({
    args: argv,
    options: {
      checkout: { type: 'string', multiple: true },
      rounds: { type: 'string' },
      rows: { type: 'string' },
      scrapes: { type: 'string' },
      seconds: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help) return null;
  const options: Options = {
    checkouts: (values.checkout ?? [ROOT]).map((dir) => resolve(dir)),
    rounds: count('rounds', values.rounds ?? '2'),
    rows: count('rows', values.rows ?? '2M'),
    scrapes: count('scrapes', values.scrapes ?? '200'),
    seconds: count('seconds', values.seconds ?? '10'),
  };
  if (options.rounds < 1 || options.scrapes < 1 || options.seconds < 1) throw new Error('--rounds, --scrapes and --seconds must be at least 1');
  return options;
}

/**
 * `rows` failed logins in one statement, in columns every schema version has. They expire far
 * in the future: nothing would purge them (and the bench turns the purge schedule off).
 */
function fillAuditEvents(databaseUrl: string, rows: number): number {
  const started = performance.now();
  const location = parseDatabaseUrl(databaseUrl);
  if (location.kind !== 'sqlite') throw new Error('the metrics bench runs on SQLite');
  const db = new DatabaseSync(location.path);
  try {
    const now = Date.now();
    db.prepare(
      `insert into audit_events (at, type, actor_id, user_id, client_id, address, detail, expires_at)
       with recursive n(i) as (select 1 union all select i + 1 from n where i < ?)
       select ? - i, 'login_failed', null, null, null, '192.0.2.1', null, ? from n`,
    ).run(rows, now, now + YEAR);
  } finally {
    db.close();
  }
  return (performance.now() - started) / 1000;
}

interface ProbeSample {
  /** When it was sent, `performance.now()`. */
  sentAt: number;
  ms: number;
  ok: boolean;
}

/** Requests the probe path every 20 ms on the clock, whether or not earlier ones have answered. */
function startProbe(url: string) {
  const samples: ProbeSample[] = [];
  const inFlight = new Set<Promise<void>>();
  const send = () => {
    const sentAt = performance.now();
    const request = fetch(url + PROBE_PATH)
      .then(async (response) => {
        await response.arrayBuffer();
        samples.push({ sentAt, ms: performance.now() - sentAt, ok: response.status === 200 });
      })
      .catch(() => {
        samples.push({ sentAt, ms: performance.now() - sentAt, ok: false });
      })
      .finally(() => inFlight.delete(request));
    inFlight.add(request);
  };
  send();
  const timer = setInterval(send, PROBE_EVERY_MS);
  return {
    async stop(): Promise<ProbeSample[]> {
      clearInterval(timer);
      await Promise.all(inFlight);
      return samples;
    },
  };
}

interface Window {
  requests: number;
  failed: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  /** The share of probes slower than STALLED_MS. */
  stalled: number;
}

function window(samples: ProbeSample[], from: number, to: number): Window {
  const inside = samples.filter((s) => s.sentAt >= from && s.sentAt < to);
  const ms = inside.map((s) => s.ms);
  return {
    requests: inside.length,
    failed: inside.filter((s) => !s.ok).length,
    p50Ms: percentile(ms, 50),
    p99Ms: percentile(ms, 99),
    maxMs: ms.reduce((a, b) => Math.max(a, b), 0),
    stalled: ms.filter((t) => t > STALLED_MS).length / ms.length,
  };
}

interface RoundRecord {
  checkout: string;
  revision: string;
  round: number;
  fillSeconds: number;
  baseline: Window;
  during: Window;
  scrapeSeconds: number;
  scrapeP50Ms: number;
}

async function measureRound(checkout: string, round: number, options: Options): Promise<RoundRecord> {
  const measured = revision(checkout);
  const database = await createDatabase('sqlite', '');
  let server: ServerProcess | null = null;
  try {
    await gatehouse(database.url, ['migrate'], '', checkout);
    const fillSeconds = fillAuditEvents(database.url, options.rows);
    server = await startGatehouse(database.url, { checkout });
    await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));

    const probe = startProbe(server.url);
    const probeStart = performance.now();
    await new Promise((resolve) => setTimeout(resolve, BASELINE_MS));
    const scrapeStart = performance.now();
    const scrapes = await runLoad({ url: server.url, connections: options.scrapes, amount: options.scrapes, next: () => ({ path: '/metrics' }), expect: 200 });
    const windowEnd = Math.max(performance.now(), scrapeStart + options.seconds * 1000);
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, windowEnd - performance.now())));
    const samples = await probe.stop();

    const failure = failureReport(scrapes);
    if (failure) throw new Error(`scrapes failed: ${failure}`);
    const record: RoundRecord = {
      checkout,
      revision: measured,
      round,
      fillSeconds,
      baseline: window(samples, probeStart, scrapeStart),
      during: window(samples, scrapeStart, windowEnd),
      scrapeSeconds: scrapes.seconds,
      scrapeP50Ms: scrapes.p50,
    };
    const failed = record.baseline.failed + record.during.failed;
    if (failed > 0) throw new Error(`${failed} probe requests failed`);
    console.log(
      `  ${measured} round ${round}: filled in ${fixed(fillSeconds, 1)} s; probe p50 ${fixed(record.baseline.p50Ms, 2)} → ${fixed(record.during.p50Ms, 2)} ms, ` +
        `max ${fixed(record.baseline.maxMs, 1)} → ${fixed(record.during.maxMs, 1)} ms; ${options.scrapes} scrapes in ${fixed(record.scrapeSeconds, 2)} s`,
    );
    return record;
  } finally {
    await server?.stop();
    await database.drop();
  }
}

/** The middle value; with an even count, the mean of the two middle ones (two rounds give their mean). */
function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = sorted.length / 2;
  return Number.isInteger(middle) ? (sorted[middle - 1]! + sorted[middle]!) / 2 : sorted[Math.floor(middle)]!;
}

async function main(): Promise<number> {
  const parsed = commandLine('bench:metrics', HELP, readOptions);
  if ('exit' in parsed) return parsed.exit;
  const { options } = parsed;
  const startedAt = new Date().toISOString();
  const host = machine();
  console.log(
    `Metrics scrape bench: ${options.rows.toLocaleString('en')} audit events, ${options.scrapes} concurrent scrapes, ${options.rounds} round(s) of ` +
      `${options.checkouts.map((dir) => revision(dir)).join(', ')}; load average ${host.loadAverageAtStart.join(' ')}`,
  );
  const rounds: RoundRecord[] = [];
  for (let round = 1; round <= options.rounds; round++) {
    for (const checkout of options.checkouts) rounds.push(await measureRound(checkout, round, options));
  }

  const file = saveResults(`metrics-${timestamp()}`, { kind: 'metrics-scrape', startedAt, machine: host, options, rounds });
  const ratio = (during: number, baseline: number) => `${fixed(during / baseline, 1)}×`;
  const roundRows = rounds.map((r) => [
    r.revision,
    r.round,
    fixed(r.baseline.p50Ms, 2),
    fixed(r.baseline.p99Ms, 2),
    fixed(r.during.p50Ms, 2),
    fixed(r.during.p99Ms, 2),
    fixed(r.during.maxMs, 1),
    `${fixed(r.during.stalled * 100, 0)} %`,
    ratio(r.during.p50Ms, r.baseline.p50Ms),
    ratio(r.during.p99Ms, r.baseline.p99Ms),
    fixed(r.scrapeSeconds, 2),
  ]);
  const headers = [
    'checkout',
    'round',
    'baseline p50 ms',
    'baseline p99 ms',
    'during p50 ms',
    'during p99 ms',
    'during max ms',
    `during > ${STALLED_MS} ms`,
    'p50 × baseline',
    'p99 × baseline',
    `${options.scrapes} scrapes s`,
  ];
  console.log(`\n${markdownTable(headers, roundRows)}`);
  const summaryRows = options.checkouts.map((checkout) => {
    const of = rounds.filter((r) => r.checkout === checkout);
    const m = (pick: (r: RoundRecord) => number) => median(of.map(pick));
    return [
      of[0]!.revision,
      `median of ${of.length}`,
      fixed(
        m((r) => r.baseline.p50Ms),
        2,
      ),
      fixed(
        m((r) => r.baseline.p99Ms),
        2,
      ),
      fixed(
        m((r) => r.during.p50Ms),
        2,
      ),
      fixed(
        m((r) => r.during.p99Ms),
        2,
      ),
      fixed(
        m((r) => r.during.maxMs),
        1,
      ),
      `${fixed(m((r) => r.during.stalled) * 100, 0)} %`,
      `${fixed(
        m((r) => r.during.p50Ms / r.baseline.p50Ms),
        1,
      )}×`,
      `${fixed(
        m((r) => r.during.p99Ms / r.baseline.p99Ms),
        1,
      )}×`,
      fixed(
        m((r) => r.scrapeSeconds),
        2,
      ),
    ];
  });
  console.log(`\n${markdownTable(headers, summaryRows)}`);
  console.log(`\nResults: ${file}`);
  return 0;
}

main().then(exit, (error: unknown) => {
  console.error(`bench:metrics: ${(error as Error).stack ?? error}`);
  return exit(1);
});
