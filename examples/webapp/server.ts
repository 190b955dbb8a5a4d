/**
 * An example third-party application that signs its users in with Gatehouse.
 *
 * This server only hands out the application's files: the OAuth client itself runs in the
 * browser (public/app.js, with oauth4webapi), as a single-page application would — a public
 * client using PKCE, with no secret to keep. What the server adds is set-up: on first start
 * it registers the application with Gatehouse through Gatehouse's own command line, and
 * remembers the client ID in .data/client.json.
 *
 *   npm run example            (Gatehouse running at GATEHOUSE_URL, default http://localhost:5000)
 *
 * Settings: GATEHOUSE_URL; EXAMPLE_PORT (default 3000); EXAMPLE_CLIENT_ID to use a client
 * registered elsewhere instead; EXAMPLE_DATA_DIR (default examples/webapp/.data). The command
 * line that registers the client reads Gatehouse's own settings (DATABASE_URL) from the same
 * environment, so run this from the directory Gatehouse runs in.
 */
import { readFileSync } from 'node:fs';
import { createServer, type ServerResponse } from 'node:http';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { registration, registrationFailed } from '../register.ts';
import { requireGatehouse } from '../gatehouse-answers.ts';

const HERE = fileURLToPath(new URL('.', import.meta.url));

const gatehouseUrl = new URL(process.env.GATEHOUSE_URL || 'http://localhost:5000');
const port = Number(process.env.EXAMPLE_PORT || 3000);
const dataDir = process.env.EXAMPLE_DATA_DIR || join(HERE, '.data');
// localhost rather than 127.0.0.1: what people type. The popup's answer and the redirect
// both go to exactly this origin, so every request is sent here (see `canonical` below).
const origin = `http://localhost:${port}`;
const redirectUri = `${origin}/callback`;
/** What the application asks for: reading the profile needs no more (least privilege). */
const scope = 'annotation:read';

/** The client ID: EXAMPLE_CLIENT_ID, or the example's own registration. */
async function clientId(): Promise<string> {
  if (process.env.EXAMPLE_CLIENT_ID) return process.env.EXAMPLE_CLIENT_ID;
  // A public client (no secret: a browser cannot keep one) that must use PKCE.
  const args = ['--name', 'Example web app', '--redirect-uri', redirectUri, '--require-pkce', '--scope', scope];
  return (await registration(dataDir, redirectUri, args)).client_id;
}

await requireGatehouse(gatehouseUrl);
let settings: string;
try {
  settings = JSON.stringify({ gatehouse: gatehouseUrl.origin, client_id: await clientId(), redirect_uri: redirectUri, scope });
} catch (error) {
  registrationFailed(error, redirectUri);
}

const FILES: Record<string, { path: string; type: string }> = {
  '/': { path: join(HERE, 'public/index.html'), type: 'text/html; charset=utf-8' },
  // The redirect flow comes back here; the same page finishes the sign-in.
  '/callback': { path: join(HERE, 'public/index.html'), type: 'text/html; charset=utf-8' },
  '/app.js': { path: join(HERE, 'public/app.js'), type: 'text/javascript; charset=utf-8' },
  '/style.css': { path: join(HERE, 'public/style.css'), type: 'text/css; charset=utf-8' },
  // The library is one dependency-free ES module that runs in browsers as it does in Node.
  '/oauth4webapi.js': { path: fileURLToPath(import.meta.resolve('oauth4webapi')), type: 'text/javascript; charset=utf-8' },
};

const websocketOrigin = gatehouseUrl.origin.replace(/^http/, 'ws');
const HEADERS = {
  // Scripts only from here; the page talks to Gatehouse's API and WebSocket and nothing else.
  'Content-Security-Policy': `default-src 'self'; connect-src 'self' ${gatehouseUrl.origin} ${websocketOrigin}; base-uri 'none'; frame-ancestors 'none'`,
  // /callback carries the authorization code in its URL: it must not travel in a Referer.
  'Referrer-Policy': 'no-referrer',
  'X-Content-Type-Options': 'nosniff',
  'Cache-Control': 'no-store',
};

function send(response: ServerResponse, status: number, type: string, body: string | Buffer): void {
  response.writeHead(status, { ...HEADERS, 'Content-Type': type }).end(body);
}

const server = createServer((request, response) => {
  const url = new URL(request.url ?? '/', origin);
  if (request.headers.host !== `localhost:${port}`) {
    // Tokens live in this origin's sessionStorage: one origin only (127.0.0.1:3000 is another).
    response.writeHead(302, { Location: `${origin}${url.pathname}${url.search}` }).end();
    return;
  }
  if (request.method !== 'GET' && request.method !== 'HEAD') return send(response, 405, 'text/plain', 'Method not allowed');
  if (url.pathname === '/config.json') return send(response, 200, 'application/json', settings);
  const file = FILES[url.pathname];
  if (!file) return send(response, 404, 'text/plain', 'Not found');
  send(response, 200, file.type, readFileSync(file.path));
});

server.listen(port, '127.0.0.1', () => {
  console.log(`Example app: ${origin} (signing in with Gatehouse at ${gatehouseUrl.origin})`);
});

// Ctrl-C or a test's kill: stop at once, the app holds no state worth finishing.
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => server.close(() => process.exit(0)).closeAllConnections());
