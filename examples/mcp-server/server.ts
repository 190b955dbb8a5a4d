/**
 * An example MCP server whose tools only answer to people who authorized a client at
 * Gatehouse: a resource server in OAuth terms. Built with the official MCP TypeScript SDK
 * (streamable HTTP, stateless: one MCP server per request), it
 *
 * - publishes RFC 9728 protected resource metadata at
 *   /.well-known/oauth-protected-resource<path of MCP_URL>, naming Gatehouse as its
 *   authorization server, so that MCP clients find Gatehouse on their own;
 * - answers a request without a valid token with 401 and
 *   `WWW-Authenticate: Bearer … resource_metadata="…"` (the SDK's `requireBearerAuth`);
 * - checks every token, in one of two ways (MCP_TOKEN_FORMAT):
 *   - `opaque` (the default): by asking Gatehouse (RFC 7662 introspection, with its own
 *     credentials) on each request: active, issued for this server (`aud`, compared by the
 *     SDK with `expectedResource`), and which scopes it carries;
 *   - `jwt`: Gatehouse issues it RFC 9068 JWT access tokens, which it verifies offline
 *     against Gatehouse's published keys (JWKS): signature, `typ`, issuer, audience, expiry;
 * - offers two tools whose answers depend on those scopes: `list_notes` (notes:read) and
 *   `add_note` (notes:write). Notes live in memory, per person.
 *
 *   npm run example:mcp                          (Gatehouse running at GATEHOUSE_URL, default http://localhost:5000)
 *   MCP_TOKEN_FORMAT=jwt npm run example:mcp     (the same, verifying JWTs offline)
 *
 * On first start it registers itself as a resource server through Gatehouse's command line
 * (which reads DATABASE_URL from the same environment: run it where Gatehouse runs), with the
 * token format of its mode, and keeps the introspection credentials in EXAMPLE_DATA_DIR
 * (default examples/mcp-server/.data); started later in the other mode, it changes the format.
 * Settings: GATEHOUSE_URL; MCP_URL (default http://localhost:4000/mcp), the address clients
 * use, which is also its resource URI; MCP_HOST (default 127.0.0.1) and MCP_PORT (default:
 * MCP_URL's port) to listen on; MCP_CLIENT_ID and MCP_CLIENT_SECRET for credentials of a
 * resource server registered some other way (then nothing is registered or changed).
 */
import { execFile } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import express from 'express';
import { createRemoteJWKSet, errors, jwtVerify } from 'jose';
import * as z from 'zod';
import { discoverAuthorizationServerMetadata } from '@modelcontextprotocol/sdk/client/auth.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { InvalidTokenError, ServerError } from '@modelcontextprotocol/sdk/server/auth/errors.js';
import { metadataHandler } from '@modelcontextprotocol/sdk/server/auth/handlers/metadata.js';
import { requireBearerAuth } from '@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js';
import type { OAuthTokenVerifier } from '@modelcontextprotocol/sdk/server/auth/provider.js';
import { getOAuthProtectedResourceMetadataUrl } from '@modelcontextprotocol/sdk/server/auth/router.js';
import type { AuthInfo } from '@modelcontextprotocol/sdk/server/auth/types.js';
import type { OAuthProtectedResourceMetadata } from '@modelcontextprotocol/sdk/shared/auth.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { requireGatehouse } from '../gatehouse-answers.ts';

const HERE = fileURLToPath(new URL('.', import.meta.url));
const REPOSITORY = fileURLToPath(new URL('../..', import.meta.url));

/** Gatehouse's PUBLIC_URL: its issuer identifier, exactly as its metadata says it. */
const issuer = (process.env.GATEHOUSE_URL || 'http://localhost:5000').replace(/\/$/, '');
const mcpUrl = new URL(process.env.MCP_URL || 'http://localhost:4000/mcp');
/** The URI Gatehouse knows this server by: what `aud` says and `resource create` prints. */
const resourceUri = mcpUrl.href.replace(/\/$/, '');
const host = process.env.MCP_HOST || '127.0.0.1';
const port = Number(process.env.MCP_PORT || mcpUrl.port || (mcpUrl.protocol === 'https:' ? 443 : 80));
const dataDir = process.env.EXAMPLE_DATA_DIR || join(HERE, '.data');
/** `opaque`: introspect each token; `jwt`: verify JWT access tokens offline. */
const tokenFormat = process.env.MCP_TOKEN_FORMAT || 'opaque';
if (tokenFormat !== 'opaque' && tokenFormat !== 'jwt') {
  console.error(`MCP_TOKEN_FORMAT must be opaque or jwt, not "${tokenFormat}"`);
  process.exit(1);
}
/** The one algorithm its JWTs may be signed with: Gatehouse's default, and what it registers. */
const JWT_ALG = 'ES256';
/** How Gatehouse should make its tokens, as `resource create` and `resource update` take it. */
const TOKEN_SETTINGS = ['--token-format', tokenFormat, '--signing-alg', JWT_ALG];

/** The scopes this server defines at Gatehouse, with the words the consent page shows. */
const SCOPES = { 'notes:read': 'Read your notes', 'notes:write': 'Add notes' } as const;

/** Its introspection client, as `gatehouse resource create --json` printed it. */
interface Registration {
  uri: string;
  client_id: string;
  client_secret: string;
}

/** Runs Gatehouse's command line in the repository, with this process's environment. */
async function gatehouse(...args: string[]): Promise<unknown> {
  const { stdout } = await promisify(execFile)(process.execPath, [join(REPOSITORY, 'bin/gatehouse.js'), ...args, '--json'], { cwd: REPOSITORY });
  return JSON.parse(stdout);
}

/** The credentials remembered while Gatehouse still knows them, else a new registration. */
async function registration(): Promise<Registration> {
  if (process.env.MCP_CLIENT_ID && process.env.MCP_CLIENT_SECRET) {
    return { uri: resourceUri, client_id: process.env.MCP_CLIENT_ID, client_secret: process.env.MCP_CLIENT_SECRET };
  }
  const file = join(dataDir, 'resource.json');
  let remembered: Registration | null = null;
  try {
    remembered = JSON.parse(readFileSync(file, 'utf8')) as Registration;
  } catch {
    // first start
  }
  const registered = ((await gatehouse('resource', 'list')) as { uri: string; client_id: string | null; token_format: string; signing_alg: string }[]).find(
    (resource) => resource.uri === resourceUri,
  );
  if (registered && remembered?.uri === resourceUri && registered.client_id === remembered.client_id) {
    if (registered.token_format !== tokenFormat || registered.signing_alg !== JWT_ALG) {
      // Tokens issued already keep their format: a client holding one is refused once, and gets a new one.
      await gatehouse('resource', 'update', resourceUri, ...TOKEN_SETTINGS);
      console.log(`Gatehouse now issues ${tokenFormat} access tokens for ${resourceUri}.`);
    }
    return remembered;
  }
  if (registered) {
    // Gatehouse shows a resource server's secret only once, and this one's is lost.
    console.log(`${resourceUri} is registered, but its credentials are not in ${file}: registering it again (this revokes every grant for it).`);
    await gatehouse('resource', 'delete', resourceUri);
  }
  const scopes = Object.entries(SCOPES).flatMap(([name, description]) => ['--scope', `${name}=${description}`]);
  const created = (await gatehouse('resource', 'create', '--uri', resourceUri, '--name', 'Example notes (MCP)', ...scopes, ...TOKEN_SETTINGS)) as Registration;
  mkdirSync(dataDir, { recursive: true });
  writeFileSync(file, `${JSON.stringify(created, null, 2)}\n`, { mode: 0o600 });
  console.log(`Registered the example with Gatehouse as resource server ${created.uri} (introspection client ${created.client_id}).`);
  return created;
}

await requireGatehouse(new URL(issuer));
let credentials: Registration;
try {
  credentials = await registration();
} catch (error) {
  const { stderr } = error as { stderr?: string };
  console.error(`Could not register the example with Gatehouse: ${stderr?.trim() || (error as Error).message}`);
  console.error(`Run this where Gatehouse runs, with the same DATABASE_URL, or register ${resourceUri} yourself and set MCP_CLIENT_ID and MCP_CLIENT_SECRET.`);
  process.exit(1);
}

const gatehouseMetadata = await discoverAuthorizationServerMetadata(issuer).catch(() => undefined);
const introspectionEndpoint = gatehouseMetadata && 'introspection_endpoint' in gatehouseMetadata ? gatehouseMetadata.introspection_endpoint : undefined;
const jwksUri = typeof gatehouseMetadata?.jwks_uri === 'string' ? gatehouseMetadata.jwks_uri : undefined;
if (!introspectionEndpoint || (tokenFormat === 'jwt' && !jwksUri)) {
  console.error(`Gatehouse at ${issuer} did not answer with its metadata (is it running, and is GATEHOUSE_URL its PUBLIC_URL?)`);
  process.exit(1);
}

/**
 * The claims this server reads: an introspection answer (RFC 7662 §2.2) and a JWT access
 * token (RFC 9068 §2.2) name them alike. Gatehouse issues each token for one audience.
 */
interface Claims {
  sub?: string;
  scope?: string;
  client_id?: string;
  exp?: number;
  aud?: string;
  username?: string;
}

/** What the SDK (and so the tools) know of a token that passed either check. */
function authInfo(token: string, claims: Claims): AuthInfo {
  return {
    token,
    clientId: claims.client_id ?? '',
    scopes: claims.scope ? claims.scope.split(' ') : [],
    expiresAt: claims.exp,
    resource: claims.aud ? new URL(claims.aud) : undefined,
    // A JWT carries no username: a person's `sub` at Gatehouse is acct:<username>@<host> (RFC 7565).
    extra: { person: claims.sub ?? '', username: claims.username ?? claims.sub?.match(/^acct:(.+)@[^@]+$/)?.[1] ?? claims.sub ?? '' },
  };
}

// client_secret_basic: both halves form-encoded first (RFC 6749 §2.3.1).
const introspectionAuthorization = `Basic ${Buffer.from(`${encodeURIComponent(credentials.client_id)}:${encodeURIComponent(credentials.client_secret)}`).toString('base64')}`;

/**
 * Asks Gatehouse about each token, on every request: a token revoked a moment ago is refused
 * on the next call. An inactive token is `InvalidTokenError` (401 with WWW-Authenticate);
 * Gatehouse unreachable or refusing our credentials is a `ServerError` (500) — our fault,
 * not the client's.
 */
const introspecting: OAuthTokenVerifier = {
  async verifyAccessToken(token: string): Promise<AuthInfo> {
    let answer: Claims & { active: boolean };
    try {
      const response = await fetch(introspectionEndpoint, {
        method: 'POST',
        headers: { authorization: introspectionAuthorization, 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
        body: new URLSearchParams({ token, token_type_hint: 'access_token' }),
      });
      if (!response.ok) throw new Error(`introspection answered ${response.status}`);
      answer = (await response.json()) as Claims & { active: boolean };
    } catch (error) {
      console.error(`Could not check a token with Gatehouse: ${(error as Error).message}`);
      throw new ServerError('could not check the token');
    }
    if (!answer.active) throw new InvalidTokenError('The token is not active');
    return authInfo(token, answer);
  },
};

/**
 * Verifies each JWT offline: no request to Gatehouse (but the key set, now and then), so a
 * token stays accepted until its `exp` even if its grant is revoked meanwhile — which is why
 * Gatehouse gives JWTs a short life. A token that fails is `InvalidTokenError` (401); the key
 * set unreachable or unreadable is a `ServerError` (500).
 */
function verifyingJwts(jwksUri: string): OAuthTokenVerifier {
  // Gatehouse's public keys, fetched when first needed and again for a key id not seen yet.
  const keys = createRemoteJWKSet(new URL(jwksUri));
  return {
    async verifyAccessToken(token: string): Promise<AuthInfo> {
      try {
        const { payload } = await jwtVerify<Claims>(token, keys, { issuer, audience: resourceUri, typ: 'at+jwt', algorithms: [JWT_ALG] });
        return authInfo(token, payload);
      } catch (error) {
        if (
          !(error instanceof errors.JOSEError) ||
          error instanceof errors.JWKSTimeout ||
          error instanceof errors.JWKSInvalid ||
          error.code === errors.JOSEError.code
        ) {
          console.error(`Could not get Gatehouse's keys: ${(error as Error).message}`);
          throw new ServerError('could not check the token');
        }
        if (error instanceof errors.JWTExpired) throw new InvalidTokenError('The token has expired');
        if (error instanceof errors.JWTClaimValidationFailed && error.claim === 'aud') throw new InvalidTokenError('Token was not issued for this resource');
        throw new InvalidTokenError('The token is not valid');
      }
    },
  };
}

/** Every person's notes, in memory: an example keeps nothing on disk. */
const notes = new Map<string, string[]>();

const refused = (scope: keyof typeof SCOPES): CallToolResult => ({
  isError: true,
  content: [{ type: 'text', text: `This needs the ${scope} scope, which the token does not carry: authorize the client again and allow "${SCOPES[scope]}".` }],
});

/** The MCP server for one request, answering as the person the token belongs to. */
function notesServer(): McpServer {
  const server = new McpServer({ name: 'gatehouse-example-notes', version: '1.0.0' });
  server.registerTool('list_notes', { description: 'Lists your notes (needs notes:read).', inputSchema: {} }, async (_arguments, { authInfo }) => {
    if (!authInfo?.scopes.includes('notes:read')) return refused('notes:read');
    const mine = notes.get(String(authInfo.extra?.person)) ?? [];
    const text = mine.length === 0 ? `${authInfo.extra?.username} has no notes yet.` : mine.map((note, index) => `${index + 1}. ${note}`).join('\n');
    return { content: [{ type: 'text', text }] };
  });
  server.registerTool(
    'add_note',
    { description: 'Adds a note (needs notes:write).', inputSchema: { text: z.string().min(1).max(500).describe('the note') } },
    async ({ text }, { authInfo }) => {
      if (!authInfo?.scopes.includes('notes:write')) return refused('notes:write');
      const person = String(authInfo.extra?.person);
      notes.set(person, [...(notes.get(person) ?? []), text]);
      return { content: [{ type: 'text', text: `Added note ${notes.get(person)!.length} for ${authInfo.extra?.username}.` }] };
    },
  );
  return server;
}

const resourceMetadataUrl = getOAuthProtectedResourceMetadataUrl(mcpUrl);
const resourceMetadata: OAuthProtectedResourceMetadata = {
  resource: resourceUri,
  authorization_servers: [issuer],
  scopes_supported: Object.keys(SCOPES),
  bearer_methods_supported: ['header'],
  resource_name: 'Example notes (MCP)',
};

const app = express();
// Readable by browser-based clients too (the SDK's handler sends CORS headers).
app.use(new URL(resourceMetadataUrl).pathname, metadataHandler(resourceMetadata));
const verifier = tokenFormat === 'jwt' ? verifyingJwts(jwksUri!) : introspecting;
const bearer = requireBearerAuth({ verifier, resourceMetadataUrl, expectedResource: new URL(resourceUri) });
app.post(mcpUrl.pathname, bearer, express.json(), async (request, response) => {
  // Stateless: no session to remember between requests, so any instance can answer any request.
  const server = notesServer();
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
  response.on('close', () => {
    void transport.close();
    void server.close();
  });
  await server.connect(transport);
  await transport.handleRequest(request, response, request.body);
});
// No server-sent event stream and no session to delete in stateless mode.
app.all(mcpUrl.pathname, bearer, (_request, response) => {
  response
    .status(405)
    .set('allow', 'POST')
    .json({ jsonrpc: '2.0', error: { code: -32000, message: 'Method not allowed.' }, id: null });
});

const listener = app.listen(port, host, () => {
  const check = tokenFormat === 'jwt' ? 'JWTs verified offline' : 'tokens introspected';
  console.log(`Example MCP server: ${mcpUrl.href} (${check}, from Gatehouse at ${issuer}; resource metadata at ${resourceMetadataUrl})`);
});

// Ctrl-C or a test's kill: stop at once, the notes are only an example.
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => listener.close(() => process.exit(0)).closeAllConnections());
