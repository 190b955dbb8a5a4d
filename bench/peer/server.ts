/**
 * The peer `npm run bench` measures Gatehouse against: panva's oidc-provider configured as a
 * plain OAuth 2 server on Gatehouse's paths, in a process of its own, as Gatehouse runs.
 *
 *   node bench/peer/server.ts <port> memory        the provider's own in-memory adapter
 *   node bench/peer/server.ts <port> sqlite:<file> a durable node:sqlite adapter (sqlite-adapter.ts)
 *
 * What is set differs from the defaults only where Gatehouse's behaviour asks for it:
 * - Paths: authorization /oauth/authorize, token /api/token, revocation /oauth/revoke,
 *   introspection /oauth/introspect, device authorization /oauth/device_authorization.
 * - Gatehouse's built-in resource (its URI is the issuer, scopes annotation:read and
 *   annotation:write) is the default resource: every access token is opaque, for it.
 * - Refresh tokens for every client allowed the grant (no offline_access scope), rotated on
 *   every use (the default for public clients only; Gatehouse rotates every client's);
 *   tokens do not end with the session.
 * - One grant per authorization, as Gatehouse has one per code: the consented grant is
 *   copied for each request, so revoking a refresh token revokes one token family, not
 *   every token of the session (which would make all later revocations no-ops).
 * - The in-memory adapter is oidc-provider's own, with a store large enough for the bench
 *   (its default keeps about 2,000 entries and would evict live codes and tokens).
 * Not part of oidc-provider, and outside the measured phases: /interaction/<uid> logs the
 * bench user in and consents (the bench's first authorization goes through it), and
 * POST /_bench/device/approve approves a device code as the device flow's confirmation
 * would. Measured besides the provider: GET /api/profile, a resource server's handler that
 * validates the bearer token with the provider's own AccessToken.find.
 */
import { generateKeyPairSync } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import Provider, { type KoaContextWithOIDC } from 'oidc-provider';
import MemoryAdapter from 'oidc-provider/lib/adapters/memory_adapter.js';
import LRU from 'oidc-provider/lib/helpers/lru.js';
import { normalize } from 'oidc-provider/lib/helpers/user_codes.js';
import { PEER_CLIENTS, PEER_REDIRECT_URI } from './clients.ts';
import { sqliteAdapter } from './sqlite-adapter.ts';

const SCOPES = 'annotation:read annotation:write';
const DEVICE_CODE_GRANT = 'urn:ietf:params:oauth:grant-type:device_code';

function adapterFor(spec: string) {
  if (spec === 'memory') {
    const store = new LRU({ maxSize: 10_000_000 });
    return class extends MemoryAdapter {
      constructor(model: string) {
        super(model, store);
      }
    };
  }
  if (spec.startsWith('sqlite:')) return sqliteAdapter(spec.slice('sqlite:'.length));
  throw new Error(`unknown adapter "${spec}" (memory, sqlite:<file>)`);
}

const port = Number(process.argv[2]);
const issuer = `http://127.0.0.1:${port}`;
const signingKey = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ format: 'jwk' });

const provider = new Provider(issuer, {
  adapter: adapterFor(process.argv[3] ?? 'memory'),
  jwks: { keys: [{ ...signingKey, kid: 'bench', use: 'sig', alg: 'RS256' }] },
  cookies: { keys: ['bench-peer-cookie-key-not-a-secret'] },
  clients: [
    {
      client_id: PEER_CLIENTS.public,
      token_endpoint_auth_method: 'none',
      redirect_uris: [PEER_REDIRECT_URI],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
    },
    {
      client_id: PEER_CLIENTS.confidential,
      client_secret: PEER_CLIENTS.confidentialSecret,
      token_endpoint_auth_method: 'client_secret_basic',
      redirect_uris: [PEER_REDIRECT_URI],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
    },
    {
      client_id: PEER_CLIENTS.device,
      token_endpoint_auth_method: 'none',
      redirect_uris: [],
      grant_types: [DEVICE_CODE_GRANT, 'refresh_token'],
      response_types: [],
    },
    {
      client_id: PEER_CLIENTS.resourceServer,
      client_secret: PEER_CLIENTS.resourceServerSecret,
      token_endpoint_auth_method: 'client_secret_basic',
      redirect_uris: [],
      grant_types: [],
      response_types: [],
    },
  ],
  routes: {
    authorization: '/oauth/authorize',
    token: '/api/token',
    revocation: '/oauth/revoke',
    introspection: '/oauth/introspect',
    device_authorization: '/oauth/device_authorization',
    code_verification: '/device',
  },
  scopes: [],
  features: {
    devInteractions: { enabled: false },
    userinfo: { enabled: false },
    introspection: { enabled: true, allowedPolicy: async () => true },
    revocation: {
      enabled: true,
      allowedPolicy: async (_ctx: unknown, client: { clientId: string }, token: { clientId: string }) => client.clientId === token.clientId,
    },
    deviceFlow: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: async () => issuer,
      useGrantedResource: async () => true,
      getResourceServerInfo: async (_ctx: unknown, resource: string) => {
        if (resource !== issuer) throw new Error(`unknown resource ${resource}`);
        return { scope: SCOPES, audience: issuer, accessTokenFormat: 'opaque', accessTokenTTL: 3600 };
      },
    },
  },
  ttl: {
    AccessToken: 3600,
    AuthorizationCode: 600,
    DeviceCode: 600,
    Grant: 30 * 24 * 3600,
    Interaction: 3600,
    RefreshToken: 30 * 24 * 3600,
    Session: 14 * 24 * 3600,
  },
  rotateRefreshToken: () => true,
  issueRefreshToken: async (_ctx: unknown, client: { grantTypeAllowed(type: string): boolean }) => client.grantTypeAllowed('refresh_token'),
  expiresWithSession: async () => false,
  loadExistingGrant: async (ctx: KoaContextWithOIDC) => {
    const { clientId } = ctx.oidc.client;
    const consentedId = ctx.oidc.result?.consent?.grantId ?? ctx.oidc.session.grantIdFor(clientId);
    const consented = consentedId === undefined ? undefined : await provider.Grant.find(consentedId);
    if (consented === undefined) return undefined;
    const grant = new provider.Grant({ accountId: consented.accountId, clientId });
    grant.addResourceScope(issuer, consented.getResourceScope(issuer));
    await grant.save();
    return grant;
  },
  findAccount: async (_ctx: unknown, sub: string) => ({ accountId: sub, claims: async () => ({ sub }) }),
  interactions: { url: async (_ctx: unknown, interaction: { uid: string }) => `/interaction/${interaction.uid}` },
});

/** Logs the bench user in, then consents to what the client asks for. */
async function interaction(request: IncomingMessage, response: ServerResponse) {
  const details = await provider.interactionDetails(request, response);
  if (details.prompt.name === 'login') {
    await provider.interactionFinished(request, response, { login: { accountId: PEER_CLIENTS.username } }, { mergeWithLastSubmission: false });
    return;
  }
  const grant = new provider.Grant({ accountId: details.session!.accountId, clientId: details.params.client_id! });
  for (const [resource, scopes] of Object.entries(details.prompt.details.missingResourceScopes ?? {})) grant.addResourceScope(resource, scopes.join(' '));
  await provider.interactionFinished(request, response, { consent: { grantId: await grant.save() } }, { mergeWithLastSubmission: true });
}

/** What a device flow confirmation stores on the device code, for a grant of its own. */
async function approveDevice(userCode: string): Promise<boolean> {
  const code = await provider.DeviceCode.findByUserCode(normalize(userCode));
  if (code === undefined || code.isExpired || code.consumed !== undefined || code.accountId !== undefined) return false;
  const grant = new provider.Grant({ accountId: PEER_CLIENTS.username, clientId: code.clientId });
  grant.addResourceScope(issuer, SCOPES);
  Object.assign(code, {
    accountId: PEER_CLIENTS.username,
    grantId: await grant.save(),
    scope: SCOPES,
    resource: issuer,
    authTime: Math.floor(Date.now() / 1000),
  });
  await code.save();
  return true;
}

function json(response: ServerResponse, status: number, body: unknown) {
  const text = JSON.stringify(body);
  response.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text), 'cache-control': 'no-store' });
  response.end(text);
}

/** The resource server's one endpoint: the bearer token through AccessToken.find, then the answer Gatehouse gives. */
async function profile(request: IncomingMessage, response: ServerResponse) {
  const token = /^Bearer (\S+)$/.exec(request.headers.authorization ?? '')?.[1];
  const found = token === undefined ? undefined : await provider.AccessToken.find(token);
  const audience = found?.aud;
  if (found === undefined || found.isExpired || !(audience === issuer || (Array.isArray(audience) && audience.includes(issuer)))) {
    response.setHeader('www-authenticate', 'Bearer error="invalid_token"');
    return json(response, 401, { error: 'invalid_token' });
  }
  const scopes = (found.scope ?? '').split(' ').filter(Boolean);
  if (!scopes.includes('annotation:read')) return json(response, 403, { error: 'insufficient_scope' });
  json(response, 200, { userid: `acct:${found.accountId}@127.0.0.1`, username: found.accountId, client_id: found.clientId, scopes });
}

async function readForm(request: IncomingMessage): Promise<URLSearchParams> {
  let body = '';
  for await (const chunk of request) body += chunk;
  return new URLSearchParams(body);
}

const handle = provider.callback();
const server = createServer((request, response) => {
  const path = request.url?.split('?')[0] ?? '';
  const answer = (work: Promise<void>) => work.catch((error: unknown) => json(response, 500, { error: String((error as Error).message) }));
  if (path === '/api/profile' && request.method === 'GET') return void answer(profile(request, response));
  if (path.startsWith('/interaction/')) return void answer(interaction(request, response));
  if (path === '/_bench/device/approve' && request.method === 'POST') {
    return void answer(readForm(request).then(async (form) => json(response, (await approveDevice(form.get('user_code') ?? '')) ? 200 : 400, {})));
  }
  handle(request, response);
});
server.listen(port, '127.0.0.1');
process.once('SIGTERM', () => {
  server.close(() => process.exit(0));
  server.closeAllConnections();
});
