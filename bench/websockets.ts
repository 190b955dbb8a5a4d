/**
 * `npm run bench:ws`: many concurrent WebSockets, then a mass revocation (issue 4).
 * Opens `--sockets` connections to /ws spread over `--grants` grants, reports the connect
 * rate and latency and the server's memory per socket, then revokes every grant at once
 * and measures how long until the server has closed every socket with code 4001. Any
 * refused connection or any other close code fails the run.
 */
import { parseArgs } from 'node:util';
import WebSocket from 'ws';
import { UserAgent } from '../test/support/user-agent.ts';
import {
  DEFAULT_POSTGRES_URL,
  createDatabase,
  fixed,
  gatehouse,
  markdownTable,
  percentile,
  postgresProblem,
  saveResults,
  shout,
  startGatehouse,
  timestamp,
  type BackendName,
} from './harness.ts';

const HELP = `Usage: npm run bench:ws -- [--sockets N] [--grants N] [--concurrency N] [--backend sqlite|postgres|both]

Opens N WebSockets (default 2000) over G grants (default 200), C handshakes at a time
(default 100), then revokes every grant at once and times until all sockets are closed.`;

export interface WebsocketLoadOptions {
  sockets: number;
  grants: number;
  concurrency: number;
}

export const DEFAULT_WEBSOCKET_LOAD: WebsocketLoadOptions = { sockets: 2000, grants: 200, concurrency: 100 };
const PASSWORD = 'bench password 1234';
const REDIRECT_URI = 'http://127.0.0.1:9/callback';

export interface WebsocketResult {
  backend: BackendName;
  sockets: number;
  grants: number;
  connectPerSecond: number;
  connectP50Ms: number;
  connectP99Ms: number;
  rssBeforeMiB: number;
  rssAfterMiB: number;
  kibPerSocket: number;
  closeAllMs: number;
}

/** One access token per grant: log in and consent once, then authorize and exchange G times. */
async function mintTokens(url: string, clientId: string, grants: number): Promise<{ access: string; refresh: string }[]> {
  const agent = new UserAgent(url);
  const authorize = `/oauth/authorize?${new URLSearchParams({ client_id: clientId, response_type: 'code', redirect_uri: REDIRECT_URI })}`;
  const first = await agent.authorize(authorize, { username: 'bench', password: PASSWORD });
  if (!first.redirect?.searchParams.get('code')) throw new Error('could not authorize the bench client');
  const tokens = [];
  for (let i = 0; i < grants; i++) {
    const response = await agent.fetch(authorize);
    const code = new URL(response.headers.get('location')!).searchParams.get('code')!;
    const exchange = await fetch(`${url}/api/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ grant_type: 'authorization_code', code, client_id: clientId, redirect_uri: REDIRECT_URI }),
    });
    if (exchange.status !== 200) throw new Error(`code exchange answered ${exchange.status}`);
    const body = (await exchange.json()) as { access_token: string; refresh_token: string };
    tokens.push({ access: body.access_token, refresh: body.refresh_token });
  }
  return tokens;
}

/** One backend's run: G grants, N sockets over them, then every grant revoked at once. */
export async function websocketLoad(
  backend: BackendName,
  { sockets: SOCKETS, grants: GRANTS, concurrency: CONCURRENCY }: WebsocketLoadOptions = DEFAULT_WEBSOCKET_LOAD,
): Promise<WebsocketResult> {
  const database = await createDatabase(backend, DEFAULT_POSTGRES_URL);
  try {
    await gatehouse(database.url, ['user', 'create', 'bench', '--email', 'bench@example.com', '--password-stdin'], PASSWORD);
    const { client_id: clientId } = JSON.parse(
      // A legacy client without PKCE: the bench measures sockets, not the authorization flow.
      await gatehouse(database.url, ['client', 'create', '--name', 'WS bench', '--redirect-uri', REDIRECT_URI, '--no-require-pkce', '--json']),
    ) as { client_id: string };
    const server = await startGatehouse(database.url);
    try {
      const tokens = await mintTokens(server.url, clientId, GRANTS);
      const wsUrl = `${server.url.replace(/^http/, 'ws')}/ws`;
      const rssBefore = server.memory().rssMiB;

      const sockets: WebSocket[] = [];
      const closeCodes: Promise<number>[] = [];
      const latencies: number[] = [];
      let next = 0;
      const started = performance.now();
      const opener = async () => {
        while (next < SOCKETS) {
          const index = next++;
          const begin = performance.now();
          const socket = new WebSocket(wsUrl, { headers: { authorization: `Bearer ${tokens[index % tokens.length]!.access}` } });
          closeCodes.push(new Promise((resolve) => socket.once('close', (code) => resolve(code))));
          await new Promise<void>((resolve, reject) => {
            socket.once('open', () => resolve());
            socket.once('error', reject);
            socket.once('unexpected-response', (_request, response) => reject(new Error(`handshake refused: ${response.statusCode}`)));
          });
          latencies.push(performance.now() - begin);
          sockets.push(socket);
        }
      };
      await Promise.all(Array.from({ length: CONCURRENCY }, opener));
      const connectSeconds = (performance.now() - started) / 1000;
      await new Promise((resolve) => setTimeout(resolve, 500)); // let the server settle before reading its memory
      const rssAfter = server.memory().rssMiB;

      const revokeStart = performance.now();
      await Promise.all(
        tokens.map(async ({ refresh }) => {
          const response = await fetch(`${server.url}/oauth/revoke`, {
            method: 'POST',
            headers: { 'content-type': 'application/x-www-form-urlencoded' },
            body: new URLSearchParams({ token: refresh, client_id: clientId }),
          });
          if (response.status !== 200) throw new Error(`revocation answered ${response.status}`);
        }),
      );
      const codes = await Promise.all(closeCodes);
      const closeAllMs = performance.now() - revokeStart;
      const wrong = codes.filter((code) => code !== 4001).length;
      if (wrong > 0) throw new Error(`${wrong} sockets closed with a code other than 4001`);

      return {
        backend,
        sockets: SOCKETS,
        grants: GRANTS,
        connectPerSecond: SOCKETS / connectSeconds,
        connectP50Ms: percentile(latencies, 50),
        connectP99Ms: percentile(latencies, 99),
        rssBeforeMiB: rssBefore,
        rssAfterMiB: rssAfter,
        kibPerSocket: ((rssAfter - rssBefore) * 1024) / SOCKETS,
        closeAllMs,
      };
    } finally {
      await server.stop();
    }
  } finally {
    await database.drop();
  }
}

/** Measures each backend and prints the table; returns the results (saved under bench/results/). */
export async function measureWebsockets(backends: BackendName[], options: WebsocketLoadOptions = DEFAULT_WEBSOCKET_LOAD): Promise<WebsocketResult[]> {
  const results: WebsocketResult[] = [];
  for (const backend of backends) results.push(await websocketLoad(backend, options));
  const file = saveResults(`websockets-${timestamp()}`, { ...options, results });
  console.log(
    `\n${markdownTable(
      ['backend', 'sockets', 'connects/s', 'p50 ms', 'p99 ms', 'RSS before MiB', 'RSS after MiB', 'KiB/socket', 'all closed after ms'],
      results.map((r) => [
        r.backend,
        r.sockets,
        fixed(r.connectPerSecond, 0),
        fixed(r.connectP50Ms),
        fixed(r.connectP99Ms),
        fixed(r.rssBeforeMiB),
        fixed(r.rssAfterMiB),
        fixed(r.kibPerSocket),
        fixed(r.closeAllMs, 0),
      ]),
    )}\nWebSocket results: ${file}`,
  );
  return results;
}

if (import.meta.main) {
  const { values: flags } = parseArgs({
    options: {
      sockets: { type: 'string', default: String(DEFAULT_WEBSOCKET_LOAD.sockets) },
      grants: { type: 'string', default: String(DEFAULT_WEBSOCKET_LOAD.grants) },
      concurrency: { type: 'string', default: String(DEFAULT_WEBSOCKET_LOAD.concurrency) },
      backend: { type: 'string', default: 'sqlite' },
      help: { type: 'boolean' },
    },
  });
  if (flags.help) {
    console.log(HELP);
    process.exit(0);
  }
  const backends: BackendName[] = flags.backend === 'both' ? ['sqlite', 'postgres'] : [flags.backend as BackendName];
  if (backends.includes('postgres')) {
    const problem = await postgresProblem(DEFAULT_POSTGRES_URL);
    if (problem) {
      shout([`PostgreSQL not measured: ${problem}`]);
      backends.splice(backends.indexOf('postgres'), 1);
    }
  }
  await measureWebsockets(backends, { sockets: Number(flags.sockets), grants: Number(flags.grants), concurrency: Number(flags.concurrency) });
}
