/**
 * `npm run bench:round-trips`: how many queries each operation sends to PostgreSQL — each
 * one a round trip (BEGIN and COMMIT included) — counted on the wire by wrapping
 * node-postgres's `Client.prototype.query`, one request at a time, on a throw-away database.
 * A count, not a timing: the same on a busy machine as on a quiet one.
 *
 *   npm run bench:round-trips [-- --postgres-url postgres://postgres@127.0.0.1:5432/postgres] [--statements]
 */
import { parseArgs } from 'node:util';
import * as oauth from 'oauth4webapi';
import pg from 'pg';
import { answerAtDevicePage, deviceApp, pollRequest, requestCodes } from '../test/support/device.ts';
import { discover, exchangeRequest, obtainCallback, obtainTokens, postForm, refreshRequest, insecure } from '../test/support/oauth-client.ts';
import { startServer } from '../test/support/server.ts';
import { UserAgent } from '../test/support/user-agent.ts';

const { values: options } = parseArgs({
  options: {
    'postgres-url': { type: 'string', default: process.env.TEST_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres' },
    statements: { type: 'boolean', default: false },
    help: { type: 'boolean', default: false },
  },
});
if (options.help) {
  console.log('usage: npm run bench:round-trips [-- --postgres-url <url>] [--statements]');
  process.exit(0);
}
process.env.GATEHOUSE_TEST_POSTGRES = options['postgres-url'];
const { postgres } = await import('../test/support/backends.ts');

let sent: string[] = [];
const query = pg.Client.prototype.query;
pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
  const text = args[0];
  sent.push(typeof text === 'string' ? text : String((text as { text?: string }).text));
  return (query as (...a: unknown[]) => unknown).apply(this, args);
} as typeof query;

/** Runs `operation` alone and returns the queries it sent (fan-out sent after the answer included). */
async function counted(operation: () => Promise<unknown>): Promise<string[]> {
  await new Promise((resolve) => setTimeout(resolve, 50));
  sent = [];
  await operation();
  await new Promise((resolve) => setTimeout(resolve, 50)); // the revocation fan-out goes out after the answer
  const queries = sent;
  sent = [];
  return queries;
}

const server = await startServer(postgres, { TOKEN_REQUESTS_PER_ADDRESS: '0', TOKEN_REQUESTS_PER_CLIENT: '0', LOG_LEVEL: 'warn' });
const rows: [string, string[]][] = [];
try {
  await server.createUser('alice');
  const { client } = await server.createClient({});
  const app = await discover(server, client.id);
  const agent = new UserAgent(server.url);
  await obtainTokens(app, agent); // logged in and consented: later authorizations are one request
  const assertStatus = (expected: number) => (response: Response) => {
    if (response.status !== expected) throw new Error(`expected ${expected}, got ${response.status}`);
    return response;
  };

  let authorized!: Awaited<ReturnType<typeof obtainCallback>>;
  rows.push(['authorize (consented session → code)', await counted(async () => (authorized = await obtainCallback(app, agent)))]);
  let pair!: oauth.TokenEndpointResponse;
  rows.push([
    'code exchange',
    await counted(async () => (pair = await oauth.processAuthorizationCodeResponse(app.as, app.client, await exchangeRequest(app, authorized)))),
  ]);
  let next!: oauth.TokenEndpointResponse;
  rows.push([
    'refresh',
    await counted(async () => (next = await oauth.processRefreshTokenResponse(app.as, app.client, await refreshRequest(app, pair.refresh_token!)))),
  ]);
  rows.push([
    'revocation (public client, refresh token)',
    await counted(async () => assertStatus(200)(await postForm(server, '/oauth/revoke', { token: next.refresh_token!, client_id: client.id }))),
  ]);

  const device = await deviceApp(server);
  const codes = await requestCodes(device);
  await answerAtDevicePage(agent, codes, 'approve');
  server.advance(6);
  rows.push(['device-code exchange', await counted(async () => assertStatus(200)(await pollRequest(device, codes.device_code)))]);

  const machine = await server.createClient({ name: 'Machine', grantType: 'client_credentials', redirectUris: [], confidential: true });
  const machineApp = await discover(server, machine.client.id, { secret: machine.secret });
  const confidential = await server.createClient({ name: 'Confidential', confidential: true });
  const confidentialApp = await discover(server, confidential.client.id, { secret: confidential.secret });
  const confidentialPair = await obtainTokens(confidentialApp, agent);
  rows.push([
    'revocation (confidential client, refresh token)',
    await counted(async () =>
      assertStatus(200)(
        await oauth.revocationRequest(confidentialApp.as, confidentialApp.client, confidentialApp.auth, confidentialPair.refresh_token!, insecure),
      ),
    ),
  ]);

  rows.push([
    'client_credentials',
    await counted(async () =>
      assertStatus(200)(await oauth.clientCredentialsGrantRequest(machineApp.as, machineApp.client, machineApp.auth, new URLSearchParams(), insecure)),
    ),
  ]);
} finally {
  await server.close();
}

console.log('| operation | round trips | of which BEGIN/COMMIT |');
console.log('|---|---:|---:|');
for (const [name, queries] of rows) {
  const framing = queries.filter((q) => /^(begin|commit)/i.test(q.trim())).length;
  console.log(`| ${name} | ${queries.length} | ${framing} |`);
}
if (options.statements) {
  for (const [name, queries] of rows) {
    console.log(`\n${name}:`);
    for (const q of queries) console.log(`  ${q.replace(/\s+/g, ' ').slice(0, 160)}`);
  }
}
