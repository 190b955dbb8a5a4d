/**
 * `npm run bench:wal`: how many pages each operation writes on SQLite — a count, steady on
 * a shared machine, unlike requests per second. One server in this process on a fresh
 * database, one request at a time. A second connection holds a read transaction open for
 * the whole run, so that no checkpoint can restart the WAL: it only grows, by one frame per
 * page each commit writes, and its growth over a phase divided by the phase's requests is
 * the pages per request. From the frames' page numbers come what a checkpoint would copy
 * back into the database file per request (each page once per checkpoint), and, with
 * `--trees`, which B-tree (table or index) each page belongs to. With `--backend postgres`,
 * the WAL's growth in KiB per request after a CHECKPOINT (`postgresMeter`). What a phase
 * consumes (codes, refresh tokens, approved device codes) is produced, unmeasured, before it.
 */
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { DatabaseSync } from 'node:sqlite';
import { parseArgs } from 'node:util';
import * as oauth from 'oauth4webapi';
import { COMMAND_LINE } from '../src/audit.ts';
import { registerResource } from '../src/clients/resources.ts';
import pg from 'pg';
import { answerAtDevicePage, deviceApp, requestCodes } from '../test/support/device.ts';
import { authorizationUrl, discover, exchangeRequest, insecure, profile, refresh, revokeToken } from '../test/support/oauth-client.ts';
import { startServer, type TestServer } from '../test/support/server.ts';
import { UserAgent } from '../test/support/user-agent.ts';
import { commandLine, DEFAULT_POSTGRES_URL, fixed, markdownTable } from './harness.ts';

const HELP = `Usage: npm run bench:wal -- [--requests N] [--concurrency N] [--trees] [--backend postgres [--postgres-url URL]]

Counts the pages Gatehouse writes to SQLite's WAL per request, per operation (the code
exchange and the refresh also with an ES256 JWT access token), one request at a time (or
N), the commits per request, and the pages a checkpoint copies back into the database file
per request when it runs every 1,000 or every 10,000 WAL pages.
  --requests N     requests per operation (default 2000: enough for the tables to span many pages)
  --concurrency N  requests in flight at once (default 1); above 1, writes that reach the
                   database in the same turn of the event loop share a commit (group commit,
                   src/store/group-commit.ts), as they do under load
  --trees          also the pages per request of each table and index (SQLite)
  --backend B      sqlite (default) or postgres: on PostgreSQL, the WAL KiB per request, with
                   a CHECKPOINT before each operation (so mostly whole pages: the distinct
                   pages it changed); needs a server nothing else writes to meanwhile
  --postgres-url U administrator connection (default $BENCH_POSTGRES_URL or
                   postgres://postgres@127.0.0.1:5432/postgres)`;

/** A resource server whose access tokens are ES256 JWTs, and the scope asked of it. */
const JWT_RESOURCE = 'https://es256.bench.example/api';
const JWT_SCOPE = 'bench:es256';
const JWT_ASKED = { resource: JWT_RESOURCE, scope: JWT_SCOPE };

const WAL_HEADER = 32;
const FRAME_HEADER = 24;
const CHECKPOINT_EVERY = [1000, 10_000];

interface Options {
  requests: number;
  concurrency: number;
  trees: boolean;
  backend: 'sqlite' | 'postgres';
  postgresUrl: string;
}

function readOptions(argv: string[]): Options | null {
  const { values } = parseArgs({
    args: argv,
    options: {
      requests: { type: 'string', default: '2000' },
      concurrency: { type: 'string', default: '1' },
      trees: { type: 'boolean', default: false },
      backend: { type: 'string', default: 'sqlite' },
      'postgres-url': { type: 'string', default: DEFAULT_POSTGRES_URL },
      help: { type: 'boolean' },
    },
  });
  if (values.help) return null;
  const requests = Number(values.requests);
  if (!Number.isInteger(requests) || requests < 1) throw new Error('--requests must be a positive integer');
  const concurrency = Number(values.concurrency);
  if (!Number.isInteger(concurrency) || concurrency < 1) throw new Error('--concurrency must be a positive integer');
  if (values.backend !== 'sqlite' && values.backend !== 'postgres') throw new Error('--backend must be sqlite or postgres');
  return { requests, concurrency, trees: values.trees, backend: values.backend, postgresUrl: values['postgres-url'] };
}

/** What one backend counts around a phase: `end` gives the phase's row of the table, per request. */
interface Meter {
  title: string;
  columns: string[];
  begin(): Promise<void>;
  end(requests: number): Promise<{ cells: string[]; trees: Map<string, number> }>;
  close(): Promise<void>;
}

/**
 * SQLite: a second connection holds a read transaction open for the whole run, so that no
 * checkpoint can restart the WAL; the WAL's growth over a phase, frame by frame, is what the
 * phase wrote.
 */
function sqliteMeter(server: TestServer, options: Options): Meter {
  const path = (server.config.database as { path: string }).path;
  const reader = new DatabaseSync(path, { readOnly: true });
  reader.exec('begin');
  reader.prepare('select count(*) from sqlite_schema').get(); // the snapshot that keeps the WAL from restarting
  const pageSize = (reader.prepare('pragma page_size').get() as { page_size: number }).page_size;
  const frameSize = pageSize + FRAME_HEADER;
  /** The page number of every WAL frame from frame `from` on, and how many of them end a commit. */
  const pagesOf = (from: number) => {
    const fd = openSync(`${path}-wal`, 'r');
    const header = Buffer.alloc(8);
    const pages: number[] = [];
    let commits = 0;
    for (let offset = WAL_HEADER + from * frameSize; offset + frameSize <= fstatSync(fd).size; offset += frameSize) {
      readSync(fd, header, 0, 8, offset);
      pages.push(header.readUInt32BE(0));
      if (header.readUInt32BE(4) !== 0) commits++; // a commit frame holds the database's size after it
    }
    closeSync(fd);
    return { pages, commits };
  };
  const frames = () => {
    const fd = openSync(`${path}-wal`, 'r');
    const size = fstatSync(fd).size;
    closeSync(fd);
    return Math.max(0, Math.floor((size - WAL_HEADER) / frameSize));
  };
  /** Which B-tree each page belongs to, as the database is now (a snapshot of its own, read outside the run's). */
  const treesOf = () => {
    const now = new DatabaseSync(path, { readOnly: true });
    const names = new Map(
      (now.prepare('select pageno, name from dbstat').all() as Array<{ pageno: number; name: string }>).map((row) => [row.pageno, row.name]),
    );
    now.close();
    return names;
  };
  let start = 0;
  const at = options.concurrency === 1 ? 'one at a time' : `${options.concurrency} at a time`;
  return {
    title: `SQLite, ${pageSize / 1024} KiB pages, ${options.requests} requests per operation, ${at}:`,
    columns: [
      'WAL pages per request',
      'commits per request',
      ...CHECKPOINT_EVERY.map((every) => `copied back per request, checkpoint every ${every.toLocaleString('en')} pages`),
    ],
    begin: async () => void (start = frames()),
    end: async (requests) => {
      const { pages: written, commits } = pagesOf(start);
      const copied = CHECKPOINT_EVERY.map((every) => {
        let distinct = 0;
        for (let i = 0; i < written.length; i += every) distinct += new Set(written.slice(i, i + every)).size;
        return distinct / requests;
      });
      const trees = new Map<string, number>();
      if (options.trees) {
        const names = treesOf();
        for (const page of written) trees.set(names.get(page) ?? 'other', (trees.get(names.get(page) ?? 'other') ?? 0) + 1 / requests);
      }
      return { cells: [fixed(written.length / requests), fixed(commits / requests, 2), ...copied.map((c) => fixed(c))], trees };
    },
    close: async () => {
      reader.exec('rollback');
      reader.close();
    },
  };
}

/**
 * PostgreSQL: how far the WAL moved over the phase (`pg_current_wal_lsn`, exact at once, where
 * `pg_stat_wal` lags until each backend flushes its statistics), after a CHECKPOINT, so that every
 * page the phase changes goes into the WAL whole (a full-page image, up to 8 KiB) the first time
 * it changes: the KiB per request are mostly the distinct pages the phase touches, the figure
 * where a random key and a time-ordered one differ. Nothing else may write to this PostgreSQL
 * server meanwhile.
 */
async function postgresMeter(options: Options): Promise<Meter> {
  const admin = new pg.Client({ connectionString: options.postgresUrl });
  await admin.connect();
  const position = async () => (await admin.query<{ lsn: string }>('select pg_current_wal_lsn()::text as lsn')).rows[0]!.lsn;
  let before = '';
  return {
    title: `PostgreSQL, ${options.requests} requests per operation, ${options.concurrency === 1 ? 'one at a time' : `${options.concurrency} at a time`}, a CHECKPOINT before each:`,
    columns: ['WAL KiB per request'],
    begin: async () => {
      await admin.query('checkpoint');
      before = await position();
    },
    end: async (requests) => {
      const { rows } = await admin.query<{ bytes: string }>('select pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::text as bytes', [before]);
      return { cells: [fixed(Number(rows[0]!.bytes) / 1024 / requests)], trees: new Map() };
    },
    close: () => admin.end(),
  };
}

async function main(): Promise<void> {
  const parsed = commandLine('bench:wal', HELP, readOptions);
  if ('exit' in parsed) process.exit(parsed.exit);
  const options = parsed.options;
  const { requests: n, concurrency } = options;

  // SQLITE_GROUP_COMMIT=false from the command line compares against a transaction per write (docs/performance.md).
  const groupCommit: Record<string, string> = process.env.SQLITE_GROUP_COMMIT === undefined ? {} : { SQLITE_GROUP_COMMIT: process.env.SQLITE_GROUP_COMMIT };
  process.env.GATEHOUSE_TEST_POSTGRES = options.postgresUrl;
  const backends = await import('../test/support/backends.ts');
  const backend = options.backend === 'postgres' ? backends.postgres : backends.sqlite;
  const server = await startServer(backend, { LOG_LEVEL: 'warn', TOKEN_REQUESTS_PER_CLIENT: '0', TOKEN_REQUESTS_PER_ADDRESS: '0', ...groupCommit });
  const meter = options.backend === 'postgres' ? await postgresMeter(options) : sqliteMeter(server, options);

  await server.createUser('alice');
  await registerResource(
    server.app.gatehouse,
    { uri: JWT_RESOURCE, name: 'ES256 API', scopes: [{ name: JWT_SCOPE, description: 'Bench' }], tokenFormat: 'jwt', signingAlg: 'ES256' },
    COMMAND_LINE,
  );
  const { client } = await server.createClient({ name: 'Bench', requirePkce: true, scope: `annotation:read annotation:write ${JWT_SCOPE}` });
  const app = await discover(server, client.id);
  const agent = new UserAgent(server.url);
  await agent.login('alice');
  await agent.authorize((await authorizationUrl(app)).url); // consent, once
  await agent.authorize((await authorizationUrl(app, JWT_ASKED)).url); // and for the JWT resource server

  const results: { operation: string; cells: string[]; trees: Map<string, number> }[] = [];
  /** Sends `request` for each of `inputs`, `concurrency` at a time, and counts what they write. */
  async function measure<T, R>(operation: string, inputs: T[], request: (input: T) => Promise<R>): Promise<R[]> {
    await meter.begin();
    const outputs: R[] = [];
    let next = 0;
    const lane = async () => {
      while (next < inputs.length) {
        const input = inputs[next++]!;
        outputs.push(await request(input));
      }
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, inputs.length) }, lane));
    results.push({ operation, ...(await meter.end(inputs.length)) });
    return outputs;
  }
  const times = Array.from({ length: n }, (_, i) => i);

  const authorizeEach = (asked: Record<string, string>) => async () => {
    const authorization = await authorizationUrl(app, asked);
    const outcome = await agent.visit(authorization.url.pathname + authorization.url.search);
    return { callback: oauth.validateAuthResponse(app.as, app.client, outcome.redirect!, authorization.state), verifier: authorization.verifier };
  };
  const callbacks = await measure('authorize (consented session → code)', times, authorizeEach({}));
  const exchangeEach = async (authorized: Awaited<ReturnType<ReturnType<typeof authorizeEach>>>) =>
    oauth.processAuthorizationCodeResponse(app.as, app.client, await exchangeRequest(app, authorized));
  const pairs = await measure('code exchange', callbacks, exchangeEach);
  const rotated = await measure('refresh with rotation', pairs, (pair) => refresh(app, pair.refresh_token!));
  const jwtCallbacks = await Promise.all(times.map(authorizeEach(JWT_ASKED)));
  const jwtPairs = await measure('code exchange, ES256 JWT access token', jwtCallbacks, exchangeEach);
  await measure('refresh, ES256 JWT access token', jwtPairs, (pair) => refresh(app, pair.refresh_token!));
  await measure('bearer GET /api/profile', rotated, async (pair) => {
    if ((await profile(server, pair.access_token)).status !== 200) throw new Error('a bearer request failed');
  });
  await measure('revocation', rotated, (pair) => revokeToken(app, pair.refresh_token!));

  const device = await deviceApp(server);
  const deviceCodes: string[] = [];
  for (const _ of times) {
    const requested = await requestCodes(device);
    await answerAtDevicePage(agent, requested, 'approve');
    deviceCodes.push(requested.device_code);
  }
  server.advance(5); // the polling interval
  await measure('device-code exchange', deviceCodes, async (code) =>
    oauth.processGenericTokenEndpointResponse(
      device.as,
      device.client,
      await oauth.deviceCodeGrantRequest(device.as, device.client, device.auth, code, insecure),
    ),
  );

  await meter.close();
  await server.close();
  console.log(`${meter.title}\n`);
  console.log(
    markdownTable(
      ['operation', ...meter.columns],
      results.map((r) => [r.operation, ...r.cells]),
      1,
    ),
  );
  for (const r of results.filter((r) => r.trees.size > 0)) {
    console.log(
      `\n${r.operation}: ${[...r.trees]
        .sort((a, b) => b[1] - a[1])
        .map(([name, pages]) => `${name} ${fixed(pages, 2)}`)
        .join(', ')}`,
    );
  }
}

await main();
