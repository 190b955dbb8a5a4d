/**
 * Upstream identity providers for the connection suites (SPEC §4.13): where people log in
 * before Gatehouse logs them in. Each is served over https with a certificate from the test
 * CA (./tls.ts) on 127.0.0.1 and known as `https://localhost:<port>` (the origin a browser in
 * the tests visits too), so Gatehouse reaches it only with the connection's
 * --allow-private-address.
 * - `startOidcUpstream`: panva's oidc-provider, a certified OpenID Connect provider — a
 *   company's provider as Gatehouse meets it, the well-behaved reference;
 * - `startGitHubStandIn`: GitHub Enterprise Server's OAuth endpoints and user API (GitHub has
 *   no OpenID Connect), answering as GitHub does, quirks included;
 * - `startHostileProvider`: a small OpenID Connect provider made with jose that attacks the
 *   relying party in one chosen way per login (a bad ID token, an endless or oversized answer…);
 * - `startTlsProxy`: https in front of a second Gatehouse (plain http), so that it can be an
 *   upstream provider at an https issuer.
 * No provider shows a page: before each login the test says who logs in (`nextLogin`), or that
 * the person declines, and the authorization endpoint redirects back at once — so a plain
 * redirect chain, or a browser, goes through. Each counts the requests per path it got
 * (`requests`), for the caching tests, and has one client whose redirect URIs the test adds
 * once the connection's callback URL is known (`allowRedirectUri`).
 */
import { createHash, randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer } from 'node:https';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { createServer as createTlsServer } from 'node:tls';
import { exportJWK, generateKeyPair, SignJWT, UnsecuredJWT, type JWK, type JWTPayload } from 'jose';
import Provider from 'oidc-provider';
import MemoryAdapter from 'oidc-provider/lib/adapters/memory_adapter.js';
import LRU from 'oidc-provider/lib/helpers/lru.js';
import { serverCertificate } from './tls.ts';

/** What of oidc-provider's API this file uses beyond bench/peer/oidc-provider.d.ts. */
declare module 'oidc-provider' {
  interface Grant {
    addOIDCScope(scope: string): void;
  }
}

/** The one client every provider here has, and what every provider tells a test. */
export interface UpstreamClient {
  clientId: string;
  clientSecret: string;
  /** Registers a redirect URI for the client (a connection's callback URL is known only once it exists). */
  allowRedirectUri(uri: string): void;
  /** How many requests `path` got. */
  requests(path: string): number;
  close(): Promise<void>;
}

/** A person at an OpenID Connect provider, as its ID token and user info tell of them. */
export interface UpstreamAccount {
  sub: string;
  email?: string;
  email_verified?: boolean;
  name?: string;
  preferred_username?: string;
  groups?: string[];
  /** How they authenticated (`["pwd", "otp"]`, `["mfa"]`…), in the ID token. */
  amr?: string[];
  acr?: string;
  /** When they authenticated, in seconds since the epoch (the ID token's `auth_time`; default: now). startOidcUpstream only. */
  authTime?: number;
}

const DISCOVERY = '/.well-known/openid-configuration';

const random = (bytes = 16) => randomBytes(bytes).toString('base64url');
const s256 = (verifier: string) => createHash('sha256').update(verifier).digest('base64url');

/** The claims a provider's user info gives: the account without how and when it authenticated. */
function profileClaims({ amr: _amr, acr: _acr, authTime: _authTime, ...claims }: UpstreamAccount) {
  return claims;
}

type Handler = (request: IncomingMessage, response: ServerResponse, path: string) => unknown;

/**
 * An https server on 127.0.0.1 for `localhost` and `127.0.0.1` that counts each path's
 * requests before `handle` answers; a handler's exception (a test's mistake, say a login
 * nobody announced) is the 500 answer's text. `close` ends every connection, a hanging one too.
 */
async function serveHttps(handle: Handler) {
  const counts = new Map<string, number>();
  const server = createServer(serverCertificate(['localhost', '127.0.0.1']), (request, response) => {
    const path = new URL(request.url ?? '/', 'https://localhost').pathname;
    counts.set(path, (counts.get(path) ?? 0) + 1);
    Promise.resolve()
      .then(() => handle(request, response, path))
      .catch((error: Error) => (response.headersSent ? response.destroy() : text(response, 500, error.message)));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    origin: `https://localhost:${(server.address() as AddressInfo).port}`,
    requests: (path: string) => counts.get(path) ?? 0,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

function text(response: ServerResponse, status: number, body: string): void {
  response.writeHead(status, { 'content-type': 'text/plain; charset=utf-8' }).end(body);
}

function sendJson(response: ServerResponse, status: number, body: unknown): void {
  response.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' }).end(JSON.stringify(body));
}

/** A 302 to `uri` with `params` added to its query (those not null or undefined). */
function redirect(response: ServerResponse, uri: string, params: Record<string, string | null | undefined>): URL {
  const target = new URL(uri);
  for (const [name, value] of Object.entries(params)) if (value != null) target.searchParams.set(name, value);
  response.writeHead(302, { location: target.href }).end();
  return target;
}

async function readForm(request: IncomingMessage): Promise<URLSearchParams> {
  let body = '';
  for await (const chunk of request) body += chunk;
  return new URLSearchParams(body);
}

/**
 * Whether the request authenticates as the client: client_secret_basic (each part
 * form-encoded inside the Base64, RFC 6749 §2.3.1) or client_secret_post.
 */
function authenticates(request: IncomingMessage, form: URLSearchParams, clientId: string, clientSecret: string): boolean {
  const basic = /^Basic\s+(\S+)$/i.exec(request.headers.authorization ?? '')?.[1];
  if (basic === undefined) return form.get('client_id') === clientId && form.get('client_secret') === clientSecret;
  const [id, secret] = Buffer.from(basic, 'base64')
    .toString()
    .split(':')
    .map((part) => new URLSearchParams(`part=${part}`).get('part'));
  return id === clientId && secret === clientSecret;
}

export interface OidcUpstreamOptions {
  /** How ID tokens are signed (default RS256); the JWKS has an RS256 and an ES256 key either way. */
  idTokenAlg?: 'RS256' | 'ES256';
  /**
   * Whether the ID token carries the account's claims (email, name, groups…) too. By default
   * it carries `sub`, `acr`, `amr` and `auth_time` only, as oidc-provider does for the code flow
   * when user info exists (OpenID Connect Core §5.4): the relying party must ask user info.
   */
  claimsInIdToken?: boolean;
}

export interface OidcUpstream extends UpstreamClient {
  /** `https://localhost:<port>`; oidc-provider's endpoints /auth, /token, /me (user info), /jwks. */
  issuer: string;
  /**
   * Who logs in at the next authorization request ('deny': the person declines, which ends at
   * the redirect URI with `error=access_denied`). Without it the authorization ends with
   * `error=login_required`: the provider remembers nobody (see `startOidcUpstream`).
   */
  nextLogin(account: UpstreamAccount | 'deny'): void;
  /** The Cache-Control of the discovery document and the JWKS (oidc-provider sends none); null for none again. */
  setCacheControl(value: string | null): void;
}

/**
 * The claims each scope gives. `acr`, `amr` and `auth_time` go with `openid`, so that every ID
 * token has them, as at most providers; oidc-provider's default would add them only when the
 * relying party asks for them (the `claims` request parameter).
 */
const SCOPE_CLAIMS = {
  openid: ['sub', 'acr', 'amr', 'auth_time'],
  email: ['email', 'email_verified'],
  profile: ['name', 'preferred_username'],
  groups: ['groups'],
};

async function privateJwk(alg: 'RS256' | 'ES256'): Promise<JWK> {
  const { privateKey } = await generateKeyPair(alg, { extractable: true });
  return { ...(await exportJWK(privateKey)), kid: alg.toLowerCase(), alg, use: 'sig' };
}

/**
 * oidc-provider with one confidential client (registered for client_secret_basic, which
 * oidc-provider takes client_secret_post for as well), PKCE S256 required, the scopes openid,
 * email, profile and groups. Its login and consent are one interaction (/interaction/<uid>,
 * outside oidc-provider) that finishes at once as `nextLogin` says, with the account's `amr`
 * and `acr`. Through its adapter:
 * - the client is read afresh at every use, so that redirect URIs added later count at once;
 * - sessions are never stored, so every authorization request is a login of its own. A
 *   remembered session would let a test's second person in only through oidc-provider's
 *   "log out the first one?" page (an auto-submitting form, no redirect); tokens therefore do
 *   not end with the session.
 */
export async function startOidcUpstream(options: OidcUpstreamOptions = {}): Promise<OidcUpstream> {
  const clientId = random();
  const clientSecret = random(32);
  const redirectUris: string[] = [];
  const accounts = new Map<string, UpstreamAccount>();
  let next: UpstreamAccount | 'deny' | null = null;
  let cacheControl: string | null = null;

  const server = await serveHttps((request, response, path) => {
    if (path.startsWith('/interaction/')) return finishInteraction(request, response);
    if (cacheControl !== null && (path === DISCOVERY || path === '/jwks')) response.setHeader('cache-control', cacheControl);
    return answer(request, response);
  });

  const client = () => ({
    client_id: clientId,
    client_secret: clientSecret,
    redirect_uris: [...redirectUris],
    grant_types: ['authorization_code'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
    id_token_signed_response_alg: options.idTokenAlg ?? 'RS256',
  });
  const store = new LRU({ maxSize: 1000 });
  const adapter = (model: string) => {
    if (model === 'Client') return { find: async (id: string) => (id === clientId ? client() : undefined) };
    if (model === 'Session') return { find: async () => undefined, findByUid: async () => undefined, upsert: async () => {}, destroy: async () => {} };
    return new MemoryAdapter(model, store);
  };

  const provider = new Provider(server.origin, {
    adapter,
    jwks: { keys: await Promise.all([privateJwk('RS256'), privateJwk('ES256')]) },
    cookies: { keys: [random(32)] },
    claims: SCOPE_CLAIMS,
    conformIdTokenClaims: !options.claimsInIdToken,
    pkce: { required: () => true },
    expiresWithSession: async () => false,
    features: { devInteractions: { enabled: false }, resourceIndicators: { enabled: false } },
    findAccount: async (_ctx: unknown, sub: string) => {
      const account = accounts.get(sub);
      return account && { accountId: sub, claims: async () => profileClaims(account) };
    },
    interactions: { url: async (_ctx: unknown, interaction: { uid: string }) => `/interaction/${interaction.uid}` },
    // Set so that oidc-provider prints no notice about using its defaults.
    ttl: { AccessToken: 600, IdToken: 600, Interaction: 600, Session: 3600, Grant: 3600 },
    // Errors that cannot go back to the client (an unknown redirect_uri) as JSON, not its default page and notice.
    renderError: async (ctx: { type: string; body: unknown }, out: unknown) => {
      ctx.type = 'json';
      ctx.body = out;
    },
  });
  const answer = provider.callback();

  /** Logs in whoever the test chose, consenting to the scope asked for, or declines. */
  async function finishInteraction(request: IncomingMessage, response: ServerResponse) {
    const { params } = await provider.interactionDetails(request, response);
    const login = next;
    next = null;
    if (login === null) {
      return provider.interactionFinished(request, response, {
        error: 'login_required',
        error_description: 'Nobody logs in: the test called no nextLogin(…).',
      });
    }
    if (login === 'deny') {
      return provider.interactionFinished(request, response, { error: 'access_denied', error_description: 'The person declined to log in.' });
    }
    const grant = new provider.Grant({ accountId: login.sub, clientId: params.client_id! });
    grant.addOIDCScope(params.scope!);
    const consent = { grantId: await grant.save() };
    await provider.interactionFinished(request, response, { login: { accountId: login.sub, amr: login.amr, acr: login.acr, ts: login.authTime }, consent });
  }

  return {
    issuer: server.origin,
    clientId,
    clientSecret,
    allowRedirectUri: (uri) => void redirectUris.push(uri),
    nextLogin(account) {
      if (account !== 'deny') accounts.set(account.sub, account);
      next = account;
    },
    setCacheControl: (value) => void (cacheControl = value),
    requests: server.requests,
    close: server.close,
  };
}

/** A person at GitHub. `id` is their identity there; `login`, the user name, can change. */
export interface GitHubUser {
  id: number;
  login: string;
  name?: string;
  /** The email shown on their profile (`email` in /user); absent or null when they show none. */
  publicEmail?: string | null;
  /** Their addresses, as /user/emails lists them to a token with the `user:email` (or `user`) scope. */
  emails: { email: string; primary: boolean; verified: boolean }[];
}

export interface GitHubStandIn extends UpstreamClient {
  /** `https://localhost:<port>`, the base of GitHub Enterprise Server's paths (the API under /api/v3). */
  baseUrl: string;
  /** Who logs in at the next authorization request ('deny': the person declines). Without it the authorization answers 500. */
  nextLogin(user: GitHubUser | 'deny'): void;
  /** Every token it issued stops working, refresh tokens too: the person revoked the app in their GitHub settings. */
  revokeAll(): void;
}

const GITHUB_DOCS = 'https://docs.github.com';
const AUTHORIZATION_ERRORS = `${GITHUB_DOCS}/apps/managing-oauth-apps/troubleshooting-authorization-request-errors/`;
const TOKEN_ERRORS = {
  incorrect_client_credentials: 'The client_id and/or client_secret passed are incorrect.',
  bad_verification_code: 'The code passed is incorrect or expired.',
  bad_refresh_token: 'The refresh token passed is incorrect or expired.',
  redirect_uri_mismatch: 'The redirect_uri MUST match the registered callback URL for this application.',
};

/** An error of GitHub's token endpoint, as it sends them: with status 200. */
function gitHubTokenError(error: keyof typeof TOKEN_ERRORS) {
  const anchor = error.replaceAll('_', '-');
  return {
    error,
    error_description: TOKEN_ERRORS[error],
    error_uri: `${GITHUB_DOCS}/apps/managing-oauth-apps/troubleshooting-oauth-app-access-token-request-errors/#${anchor}`,
  };
}

/**
 * GitHub Enterprise Server as an OAuth app meets it, from GitHub's documentation:
 * - GET /login/oauth/authorize: an unknown client_id gets a 404 page; a redirect_uri that is
 *   not registered is sent to the first registered one with `error=redirect_uri_mismatch`;
 *   a person who declines, to the redirect URI with `error=access_denied`. PKCE is optional
 *   (only S256), as GitHub does not require it; scopes may be separated by spaces or commas.
 * - POST /login/oauth/access_token: every error has status 200 and an `error` member (JSON
 *   with `Accept: application/json`, else form-encoded like the answer itself); a code is
 *   single use and good for 10 minutes, a wrong code_verifier gets `bad_verification_code`
 *   (GitHub does not document this case); `redirect_uri` is checked only when sent; the
 *   granted scopes come back comma-separated, the token type as `bearer`. With
 *   `expiringUserTokens` (a GitHub App whose user tokens expire) it answers as such an app: a
 *   `ghu_` token good for 8 hours with a `ghr_` refresh token good for 6 months, and
 *   `grant_type=refresh_token` gives a new pair, after which the old pair works no more; a
 *   refresh token it does not know gets `bad_refresh_token`; `scope` comes back empty.
 * - GET /api/v3/user and /api/v3/user/emails: the token as `Bearer` or `token`; 401
 *   `{"message": "Bad credentials"}` (or "Requires authentication") otherwise; 403 without a
 *   User-Agent header; /user/emails is 404 to a token without `user:email` or `user`.
 */
export async function startGitHubStandIn(options: { expiringUserTokens?: boolean } = {}): Promise<GitHubStandIn> {
  const clientId = randomBytes(10).toString('hex');
  const clientSecret = randomBytes(20).toString('hex');
  const redirectUris: string[] = [];
  const codes = new Map<string, { user: GitHubUser; scopes: string[]; redirectUri: string; challenge: string | null; expires: number }>();
  type Grant = { user: GitHubUser; scopes: string[] };
  const tokens = new Map<string, Grant>();
  /** Refresh token → the grant and the access token issued with it. */
  const refreshTokens = new Map<string, { grant: Grant; accessToken: string }>();
  let next: GitHubUser | 'deny' | null = null;

  const server = await serveHttps((request, response, path) => {
    if (request.method === 'GET' && path === '/login/oauth/authorize') return authorize(request, response);
    if (request.method === 'POST' && path === '/login/oauth/access_token') return accessToken(request, response);
    if (request.method === 'GET' && path === '/api/v3/user') return api(request, response, ({ user }) => user);
    if (request.method === 'GET' && path === '/api/v3/user/emails')
      return api(request, response, ({ user, scopes }) => scopes.some((scope) => scope === 'user' || scope === 'user:email') && user.emails);
    sendJson(response, 404, { message: 'Not Found', documentation_url: `${GITHUB_DOCS}/rest`, status: '404' });
  });

  function authorize(request: IncomingMessage, response: ServerResponse) {
    const query = new URL(request.url!, server.origin).searchParams;
    if (query.get('client_id') !== clientId) return text(response, 404, 'Not Found');
    const registered = redirectUris[0];
    if (registered === undefined) throw new Error('the GitHub stand-in has no callback URL: call allowRedirectUri(…) first');
    const redirectUri = query.get('redirect_uri') ?? registered;
    const state = query.get('state');
    if (!redirectUris.includes(redirectUri)) {
      const error_uri = `${AUTHORIZATION_ERRORS}#redirect-uri-mismatch`;
      return redirect(response, registered, { error: 'redirect_uri_mismatch', error_description: TOKEN_ERRORS.redirect_uri_mismatch, error_uri, state });
    }
    const user = next;
    next = null;
    if (user === null) throw new Error('nobody logs in at the GitHub stand-in: call nextLogin(…) first');
    if (user === 'deny') {
      const error_uri = `${AUTHORIZATION_ERRORS}#access-denied`;
      return redirect(response, redirectUri, { error: 'access_denied', error_description: 'The user has denied your application access.', error_uri, state });
    }
    const challenge = query.get('code_challenge');
    if (challenge !== null && query.get('code_challenge_method') !== 'S256') return text(response, 400, 'Only the S256 code challenge method is accepted.');
    const code = randomBytes(10).toString('hex');
    const scopes = (query.get('scope') ?? '').split(/[\s,]+/).filter(Boolean);
    codes.set(code, { user, scopes, redirectUri, challenge, expires: Date.now() + 10 * 60_000 });
    redirect(response, redirectUri, { code, state });
  }

  async function accessToken(request: IncomingMessage, response: ServerResponse) {
    const form = await readForm(request);
    const reply = (body: Record<string, string | number>) =>
      request.headers.accept?.includes('application/json')
        ? sendJson(response, 200, body)
        : response
            .writeHead(200, { 'content-type': 'application/x-www-form-urlencoded; charset=utf-8' })
            .end(String(new URLSearchParams(Object.entries(body).map(([name, value]): [string, string] => [name, String(value)]))));
    if (!authenticates(request, form, clientId, clientSecret)) return reply(gitHubTokenError('incorrect_client_credentials'));
    if (options.expiringUserTokens && form.get('grant_type') === 'refresh_token') {
      const presented = form.get('refresh_token') ?? '';
      const refreshed = refreshTokens.get(presented);
      if (refreshed === undefined) return reply(gitHubTokenError('bad_refresh_token'));
      refreshTokens.delete(presented);
      tokens.delete(refreshed.accessToken);
      return reply(issue(refreshed.grant));
    }
    const code = form.get('code') ?? '';
    const grant = codes.get(code);
    codes.delete(code);
    if (grant === undefined || grant.expires < Date.now() || (grant.challenge !== null && s256(form.get('code_verifier') ?? '') !== grant.challenge)) {
      return reply(gitHubTokenError('bad_verification_code'));
    }
    if (form.has('redirect_uri') && form.get('redirect_uri') !== grant.redirectUri) return reply(gitHubTokenError('redirect_uri_mismatch'));
    reply(issue(grant));
  }

  function issue(grant: Grant): Record<string, string | number> {
    if (!options.expiringUserTokens) {
      const token = `gho_${randomBytes(18).toString('hex')}`;
      tokens.set(token, grant);
      return { access_token: token, token_type: 'bearer', scope: grant.scopes.join(',') };
    }
    const [token, refreshToken] = [`ghu_${randomBytes(18).toString('hex')}`, `ghr_${randomBytes(38).toString('hex')}`];
    tokens.set(token, grant);
    refreshTokens.set(refreshToken, { grant, accessToken: token });
    return {
      access_token: token,
      expires_in: 28800,
      refresh_token: refreshToken,
      refresh_token_expires_in: 15897600,
      token_type: 'bearer',
      // A GitHub App has permissions, not scopes.
      scope: '',
    };
  }

  /** An API answer for the token's grant: `body`'s value, or 404 when it is false. */
  function api(request: IncomingMessage, response: ServerResponse, body: (grant: Grant) => GitHubUser | GitHubUser['emails'] | false) {
    if (!request.headers['user-agent'])
      return text(response, 403, 'Request forbidden by administrative rules. Please make sure your request has a User-Agent header.');
    const token = /^(?:Bearer|token)\s+(\S+)$/i.exec(request.headers.authorization ?? '')?.[1];
    const grant = token === undefined ? undefined : tokens.get(token);
    if (grant === undefined) {
      return sendJson(response, 401, {
        message: token ? 'Bad credentials' : 'Requires authentication',
        documentation_url: `${GITHUB_DOCS}/rest`,
        status: '401',
      });
    }
    const found = body(grant);
    if (found === false) return sendJson(response, 404, { message: 'Not Found', documentation_url: `${GITHUB_DOCS}/rest`, status: '404' });
    if (Array.isArray(found)) {
      const publicEmail = grant.user.publicEmail ?? null;
      const visibility = (email: string, primary: boolean) => (primary ? (email === publicEmail ? 'public' : 'private') : null);
      return sendJson(
        response,
        200,
        found.map(({ email, primary, verified }) => ({ email, primary, verified, visibility: visibility(email, primary) })),
      );
    }
    sendJson(response, 200, { login: found.login, id: found.id, type: 'User', name: found.name ?? null, email: found.publicEmail ?? null });
  }

  return {
    baseUrl: server.origin,
    clientId,
    clientSecret,
    allowRedirectUri: (uri) => void redirectUris.push(uri),
    nextLogin: (user) => void (next = user),
    revokeAll: () => {
      tokens.clear();
      refreshTokens.clear();
    },
    requests: server.requests,
    close: server.close,
  };
}

/**
 * How the hostile provider misbehaves at one login:
 * - in the ID token: `wrong-aud` (another client's), `wrong-nonce`, `no-nonce`, `wrong-iss`,
 *   `foreign-key` (signed by a key not in its JWKS, under the kid of the one that is),
 *   `expired`, `alg-none` (an unsecured JWT);
 * - in the authorization response: `wrong-iss-param` (RFC 9207 `iss` not the issuer);
 * - at the token endpoint: `oversized` (a valid answer padded past 64 KiB), `slow` (never
 *   answers, the connection left open), `bad-json` (status 200, cut-off JSON).
 */
export type Attack =
  'wrong-aud' | 'wrong-nonce' | 'no-nonce' | 'wrong-iss' | 'wrong-iss-param' | 'foreign-key' | 'expired' | 'alg-none' | 'oversized' | 'slow' | 'bad-json';

export interface HostileProvider extends UpstreamClient {
  /** `https://localhost:<port>`; endpoints /authorize, /token, /userinfo, /jwks. */
  issuer: string;
  /** Who logs in at the next authorization request, and how the provider misbehaves with it (no attack: not at all). */
  nextLogin(login: { account: UpstreamAccount; attack?: Attack }): void;
  /** The last redirect back to the client, for a test to replay. */
  lastRedirect(): URL | null;
}

const ATTACKER = 'https://attacker.example';

interface Authorization {
  account: UpstreamAccount;
  attack?: Attack;
  redirectUri: string;
  nonce: string | null;
  challenge: string | null;
}

/**
 * An OpenID Connect provider of a few dozen lines, made with jose (no JWS by hand), which
 * behaves — PKCE S256 required, codes single use, `iss` in the authorization response, the
 * account's claims in the ID token and user info — except in the way `nextLogin` chose.
 */
export async function startHostileProvider(): Promise<HostileProvider> {
  const clientId = random();
  const clientSecret = random(32);
  const redirectUris: string[] = [];
  const codes = new Map<string, Authorization>();
  const tokens = new Map<string, UpstreamAccount>();
  let next: { account: UpstreamAccount; attack?: Attack } | null = null;
  let last: URL | null = null;
  const [key, foreignKey] = await Promise.all([generateKeyPair('RS256'), generateKeyPair('RS256')]);
  const jwks = { keys: [{ ...(await exportJWK(key.publicKey)), kid: 'hostile', alg: 'RS256', use: 'sig' }] };

  const server = await serveHttps((request, response, path) => {
    if (path === DISCOVERY) return sendJson(response, 200, discovery);
    if (path === '/jwks') return sendJson(response, 200, jwks);
    if (path === '/authorize') return authorize(request, response);
    if (path === '/token' && request.method === 'POST') return token(request, response);
    if (path === '/userinfo') return userinfo(request, response);
    sendJson(response, 404, { error: 'not_found' });
  });
  const issuer = server.origin;
  const discovery = {
    issuer,
    authorization_endpoint: `${issuer}/authorize`,
    token_endpoint: `${issuer}/token`,
    userinfo_endpoint: `${issuer}/userinfo`,
    jwks_uri: `${issuer}/jwks`,
    response_types_supported: ['code'],
    subject_types_supported: ['public'],
    id_token_signing_alg_values_supported: ['RS256'],
    scopes_supported: ['openid', 'email', 'profile', 'groups'],
    token_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post'],
    code_challenge_methods_supported: ['S256'],
    authorization_response_iss_parameter_supported: true,
  };

  function authorize(request: IncomingMessage, response: ServerResponse) {
    const query = new URL(request.url!, issuer).searchParams;
    const redirectUri = query.get('redirect_uri') ?? '';
    if (query.get('client_id') !== clientId || !redirectUris.includes(redirectUri)) return sendJson(response, 400, { error: 'invalid_request' });
    const login = next;
    next = null;
    if (login === null) throw new Error('nobody logs in at the hostile provider: call nextLogin(…) first');
    const code = random();
    codes.set(code, { ...login, redirectUri, nonce: query.get('nonce'), challenge: query.get('code_challenge') });
    last = redirect(response, redirectUri, { code, state: query.get('state'), iss: login.attack === 'wrong-iss-param' ? ATTACKER : issuer });
  }

  async function token(request: IncomingMessage, response: ServerResponse) {
    const form = await readForm(request);
    if (!authenticates(request, form, clientId, clientSecret)) return sendJson(response, 401, { error: 'invalid_client' });
    const code = form.get('code') ?? '';
    const authorization = codes.get(code);
    codes.delete(code);
    if (
      authorization === undefined ||
      form.get('redirect_uri') !== authorization.redirectUri ||
      s256(form.get('code_verifier') ?? '') !== authorization.challenge
    ) {
      return sendJson(response, 400, { error: 'invalid_grant' });
    }
    if (authorization.attack === 'slow') return; // no answer: close() ends the connection
    if (authorization.attack === 'bad-json') return void response.writeHead(200, { 'content-type': 'application/json' }).end('{"access_token": "');
    const accessToken = random();
    tokens.set(accessToken, authorization.account);
    const body = { access_token: accessToken, token_type: 'Bearer', expires_in: 600, id_token: await idToken(authorization) };
    sendJson(response, 200, authorization.attack === 'oversized' ? { ...body, padding: 'A'.repeat(96 * 1024) } : body);
  }

  async function idToken({ account, attack, nonce }: Authorization): Promise<string> {
    const now = Math.floor(Date.now() / 1000);
    const issuedAt = attack === 'expired' ? now - 3600 : now;
    const claims: JWTPayload = {
      ...account,
      iss: attack === 'wrong-iss' ? ATTACKER : issuer,
      aud: attack === 'wrong-aud' ? 'another-client' : clientId,
      iat: issuedAt,
      auth_time: issuedAt,
      exp: issuedAt + 600,
    };
    if (attack === 'wrong-nonce') claims.nonce = random();
    else if (attack !== 'no-nonce' && nonce !== null) claims.nonce = nonce;
    if (attack === 'alg-none') return new UnsecuredJWT(claims).encode();
    const signed = new SignJWT(claims).setProtectedHeader({ alg: 'RS256', kid: 'hostile', typ: 'JWT' });
    return signed.sign(attack === 'foreign-key' ? foreignKey.privateKey : key.privateKey);
  }

  function userinfo(request: IncomingMessage, response: ServerResponse) {
    const accessToken = /^Bearer\s+(\S+)$/i.exec(request.headers.authorization ?? '')?.[1];
    const account = accessToken === undefined ? undefined : tokens.get(accessToken);
    if (account === undefined) {
      response.setHeader('www-authenticate', 'Bearer error="invalid_token"');
      return sendJson(response, 401, { error: 'invalid_token' });
    }
    sendJson(response, 200, profileClaims(account));
  }

  return {
    issuer,
    clientId,
    clientSecret,
    allowRedirectUri: (uri) => void redirectUris.push(uri),
    nextLogin: (login) => void (next = login),
    lastRedirect: () => last,
    requests: server.requests,
    close: server.close,
  };
}

export interface TlsProxy {
  /** `https://localhost:<port>`: the PUBLIC_URL of the Gatehouse behind it. */
  origin: string;
  port: number;
  /** Sends connections to 127.0.0.1:`port` from now on (before: they are closed at once). */
  target(port: number): void;
  close(): Promise<void>;
}

/**
 * A TLS-terminating TCP proxy to a plain http server on 127.0.0.1. It is started first, since
 * its origin is the PUBLIC_URL of the Gatehouse started behind it, whose port is known only
 * then (`target`). It adds no forwarding headers: Gatehouse sees plain http from 127.0.0.1.
 */
export async function startTlsProxy(): Promise<TlsProxy> {
  let targetPort: number | null = null;
  const sockets = new Set<Socket>();
  const server = createTlsServer(serverCertificate(['localhost', '127.0.0.1']), (socket) => {
    if (targetPort === null) return void socket.destroy();
    const upstream = connect(targetPort, '127.0.0.1');
    const end = () => {
      socket.destroy();
      upstream.destroy();
    };
    for (const side of [socket, upstream]) {
      sockets.add(side);
      side.once('close', () => sockets.delete(side)).on('error', end); // a reset on either side ends both
    }
    socket.pipe(upstream).pipe(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    origin: `https://localhost:${port}`,
    port,
    target: (port) => void (targetPort = port),
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const socket of sockets) socket.destroy();
      }),
  };
}
