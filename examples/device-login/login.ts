/**
 * An example command-line tool that logs in with Gatehouse through the device authorization
 * grant (RFC 8628), as a tool running over SSH or in a container would: it cannot receive a
 * redirect, so it shows a code and a URL, the person approves on their phone or laptop, and
 * the tool polls until the tokens arrive. Then it calls `GET /api/profile` as that person.
 *
 *   npm run example:device     (Gatehouse running at GATEHOUSE_URL, default http://localhost:5000)
 *
 * Settings: GATEHOUSE_URL; EXAMPLE_CLIENT_ID to use a device client registered elsewhere;
 * otherwise the tool registers one on first run through Gatehouse's command line (which reads
 * DATABASE_URL from the same environment: run it where Gatehouse runs) and remembers it in
 * EXAMPLE_DATA_DIR (default examples/device-login/.data).
 */
import { execFile } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import * as oauth from 'oauth4webapi';
import { requireGatehouse } from '../gatehouse-answers.ts';

const REPOSITORY = fileURLToPath(new URL('../..', import.meta.url));
const issuer = new URL(process.env.GATEHOUSE_URL || 'http://localhost:5000');
const dataDir = process.env.EXAMPLE_DATA_DIR || fileURLToPath(new URL('.data', import.meta.url));
/** oauth4webapi refuses plain http unless told; Gatehouse on localhost is plain http. */
const options = issuer.protocol === 'http:' ? { [oauth.allowInsecureRequests]: true } : {};

/** The remembered client ID while Gatehouse still knows it, else a new device client. */
async function deviceClientId(): Promise<string> {
  if (process.env.EXAMPLE_CLIENT_ID) return process.env.EXAMPLE_CLIENT_ID;
  const run = async (...args: string[]) =>
    JSON.parse((await promisify(execFile)(process.execPath, [join(REPOSITORY, 'bin/gatehouse.js'), ...args, '--json'], { cwd: REPOSITORY })).stdout);
  const file = join(dataDir, 'client.json');
  let known: string | undefined;
  try {
    known = (JSON.parse(readFileSync(file, 'utf8')) as { client_id: string }).client_id;
  } catch {
    // first run
  }
  const clients = (await run('client', 'list')) as { client_id: string }[];
  if (known !== undefined && clients.some((client) => client.client_id === known)) return known;
  // A public client: a tool on someone's machine cannot keep a secret.
  const { client_id } = (await run('client', 'create', '--name', 'Device login example', '--grant-type', 'device_code', '--scope', 'annotation:read')) as {
    client_id: string;
  };
  mkdirSync(dataDir, { recursive: true });
  writeFileSync(file, `${JSON.stringify({ client_id }, null, 2)}\n`);
  console.log(`Registered the example with Gatehouse as device client ${client_id}.`);
  return client_id;
}

await requireGatehouse(issuer);
const as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...options }));
const client: oauth.Client = { client_id: await deviceClientId() };
const auth = oauth.None();

// 1. Ask for a device code and a user code.
const codes = await oauth.processDeviceAuthorizationResponse(
  as,
  client,
  await oauth.deviceAuthorizationRequest(as, client, auth, { scope: 'annotation:read' }, options),
);
console.log(`\nTo log in, open ${codes.verification_uri} and enter the code\n\n    ${codes.user_code}\n\nor open ${codes.verification_uri_complete}\n`);

// 2. Poll politely: wait the interval before each poll (the first one too), and 5 seconds
//    longer from each slow_down on (RFC 8628 §3.5).
let interval = codes.interval ?? 5;
const deadline = Date.now() + codes.expires_in * 1000;
let tokens: oauth.TokenEndpointResponse | undefined;
while (tokens === undefined) {
  if (Date.now() >= deadline) throw new Error('the code expired before anyone approved it: run the example again');
  await sleep(interval * 1000);
  try {
    tokens = await oauth.processDeviceCodeResponse(as, client, await oauth.deviceCodeGrantRequest(as, client, auth, codes.device_code, options));
  } catch (error) {
    if (!(error instanceof oauth.ResponseBodyError)) throw error;
    if (error.error === 'authorization_pending') continue;
    if (error.error === 'slow_down') {
      interval += 5;
      continue;
    }
    // access_denied, expired_token, or anything else: the login is over.
    console.error(error.error === 'access_denied' ? 'The request was denied.' : `Gatehouse refused: ${error.error} (${error.error_description ?? ''})`);
    process.exit(1);
  }
}

// 3. Use the API as the person who approved.
const profile = await fetch(new URL('/api/profile', as.issuer), { headers: { authorization: `Bearer ${tokens.access_token}` } });
if (!profile.ok) throw new Error(`GET /api/profile answered ${profile.status}`);
const me = (await profile.json()) as { username: string; scopes: string[] };
console.log(`Logged in as ${me.username} (scopes: ${me.scopes.join(' ')}).`);
