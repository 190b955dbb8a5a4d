/**
 * What a client ID metadata document costs at the authorization endpoint (issue 12): the
 * time to the consent page for a client seen for the first time (its document fetched over
 * https from a local server, validated, the client recorded), for one already cached, and
 * for a registered client as the baseline. Median of `BENCH_ROUNDS` (default 40) each, on
 * SQLite. Run with `node bench/client-metadata.ts`; it makes a throw-away CA and restarts
 * itself with NODE_EXTRA_CA_CERTS pointing at it, as test/run.ts does.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { sqlite } from '../test/support/backends.ts';
import { startServer } from '../test/support/server.ts';
import { CA_CERT, createTestCa, serverCertificate } from '../test/support/tls.ts';
import { UserAgent } from '../test/support/user-agent.ts';

if (!process.env.GATEHOUSE_TEST_CA_DIR) {
  const dir = mkdtempSync(join(tmpdir(), 'gatehouse-bench-ca-'));
  createTestCa(dir);
  const env = { ...process.env, GATEHOUSE_TEST_CA_DIR: dir, NODE_EXTRA_CA_CERTS: join(dir, CA_CERT) };
  process.exit(spawnSync(process.execPath, process.argv.slice(1), { env, stdio: 'inherit' }).status ?? 1);
}

const rounds = Number(process.env.BENCH_ROUNDS ?? 40);
const documents = createServer(serverCertificate(['127.0.0.1']), (req, res) => {
  const url = `https://127.0.0.1:${(documents.address() as AddressInfo).port}${req.url}`;
  res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'max-age=3600' });
  res.end(JSON.stringify({ client_id: url, client_name: 'Bench CLI', redirect_uris: ['http://127.0.0.1/callback'] }));
});
await new Promise<void>((resolve) => documents.listen(0, '127.0.0.1', resolve));
const origin = `https://127.0.0.1:${(documents.address() as AddressInfo).port}`;

const server = await startServer(sqlite, { CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES: 'true', LOG_LEVEL: 'warn' });
await server.createUser('alice');
const { client } = await server.createClient({ redirectUris: ['http://127.0.0.1/callback'] });
const alice = new UserAgent(server.url);
await alice.login('alice');

const query = (clientId: string) =>
  `/oauth/authorize?${new URLSearchParams({ client_id: clientId, redirect_uri: 'http://127.0.0.1:50000/callback', response_type: 'code', state: 's', code_challenge: 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM', code_challenge_method: 'S256' })}`;

async function median(label: string, clientIdOf: (round: number) => string): Promise<void> {
  const times: number[] = [];
  for (let round = -3; round < rounds; round++) {
    const path = query(clientIdOf(round));
    const started = performance.now();
    const response = await alice.fetch(path);
    await response.text();
    if (response.status !== 200) throw new Error(`${label}: ${response.status}`);
    if (round >= 0) times.push(performance.now() - started); // the first three warm up
  }
  times.sort((a, b) => a - b);
  console.log(
    `${label}: median ${times[Math.floor(times.length / 2)]!.toFixed(2)} ms, p90 ${times[Math.floor(times.length * 0.9)]!.toFixed(2)} ms (${rounds} requests)`,
  );
}

await median('registered client (baseline)', () => client.id);
await median('metadata document, first authorization (fetch included)', (round) => `${origin}/first/${round + 3}.json`);
await median('metadata document, cached', () => `${origin}/cached.json`);
await server.close();
documents.close();
