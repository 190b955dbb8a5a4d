/**
 * The application's side of the flow, done with oauth4webapi — a real, strict OAuth client
 * library — against the server's published metadata.
 */
import * as oauth from 'oauth4webapi';
import type { TestServer } from './server.ts';
import type { UserAgent } from './user-agent.ts';

export const insecure = { [oauth.allowInsecureRequests]: true } as const;

export interface App {
  as: oauth.AuthorizationServer;
  client: oauth.Client;
  auth: oauth.ClientAuth;
  redirectUri: string;
}

export async function discover(server: TestServer, clientId: string, options: { secret?: string | null; redirectUri?: string } = {}): Promise<App> {
  const issuer = new URL(server.url);
  const as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }));
  return {
    as,
    client: { client_id: clientId },
    auth: options.secret ? oauth.ClientSecretBasic(options.secret) : oauth.None(),
    redirectUri: options.redirectUri ?? 'http://127.0.0.1:8765/callback',
  };
}

export interface Authorization {
  url: URL;
  state: string;
  verifier: string;
}

export async function authorizationUrl(app: App, params: Record<string, string> = {}): Promise<Authorization> {
  const verifier = oauth.generateRandomCodeVerifier();
  const state = oauth.generateRandomState();
  const url = new URL(app.as.authorization_endpoint!);
  url.search = new URLSearchParams({
    client_id: app.client.client_id,
    redirect_uri: app.redirectUri,
    response_type: 'code',
    state,
    code_challenge: await oauth.calculatePKCECodeChallenge(verifier),
    code_challenge_method: 'S256',
    ...params,
  }).toString();
  return { url, state, verifier };
}

/** Authorize as `username` (approving consent) and exchange the code: the whole flow. */
export async function obtainTokens(app: App, agent: UserAgent, username = 'alice', params: Record<string, string> = {}): Promise<oauth.TokenEndpointResponse> {
  const authorization = await authorizationUrl(app, params);
  const outcome = await agent.authorize(authorization.url, { username });
  if (!outcome.redirect) throw new Error(`authorization did not redirect back: ${outcome.response.status}`);
  const callback = oauth.validateAuthResponse(app.as, app.client, outcome.redirect, authorization.state);
  const response = await oauth.authorizationCodeGrantRequest(app.as, app.client, app.auth, callback, app.redirectUri, authorization.verifier, insecure);
  return oauth.processAuthorizationCodeResponse(app.as, app.client, response);
}

/** The validated authorization response, for tests that send the code exchange themselves (possibly many times). */
export async function obtainCallback(
  app: App,
  agent: UserAgent,
  params: Record<string, string> = {},
): Promise<{ callback: URLSearchParams; verifier: string }> {
  const authorization = await authorizationUrl(app, params);
  const outcome = await agent.authorize(authorization.url);
  return { callback: oauth.validateAuthResponse(app.as, app.client, outcome.redirect!, authorization.state), verifier: authorization.verifier };
}

/** A code, straight from the redirect, for tests that exchange it by hand. */
export async function obtainCode(app: App, agent: UserAgent, params: Record<string, string> = {}): Promise<{ code: string; verifier: string }> {
  const { callback, verifier } = await obtainCallback(app, agent, params);
  return { code: callback.get('code')!, verifier };
}

/** The code exchange as the library sends it, unprocessed: for tests that expect refusals. */
export function exchangeRequest(app: App, authorized: { callback: URLSearchParams; verifier: string }): Promise<Response> {
  return oauth.authorizationCodeGrantRequest(app.as, app.client, app.auth, authorized.callback, app.redirectUri, authorized.verifier, insecure);
}

/** The refresh request as the library sends it, unprocessed: for tests that expect refusals. */
export function refreshRequest(app: App, refreshToken: string): Promise<Response> {
  return oauth.refreshTokenGrantRequest(app.as, app.client, app.auth, refreshToken, insecure);
}

/** A token endpoint answer as the tests read it: a token response or an RFC 6749 §5.2 error. */
export interface TokenResult {
  status: number;
  body: { access_token?: string; refresh_token?: string; error?: string; error_description?: string };
}

export async function tokenResult(response: Response): Promise<TokenResult> {
  return { status: response.status, body: (await response.json()) as TokenResult['body'] };
}

export async function refresh(app: App, refreshToken: string): Promise<oauth.TokenEndpointResponse> {
  return oauth.processRefreshTokenResponse(app.as, app.client, await refreshRequest(app, refreshToken));
}

export async function revokeToken(app: App, token: string): Promise<void> {
  await oauth.processRevocationResponse(await oauth.revocationRequest(app.as, app.client, app.auth, token, insecure));
}

/** GET /api/profile with the token (plain fetch: the library throws on the 401s some tests expect). */
export function profile(server: TestServer, accessToken: string): Promise<Response> {
  return fetch(new URL('/api/profile', server.url), { headers: { authorization: `Bearer ${accessToken}` } });
}

/** POST a form to the server, as a client library would but with full control over the body. */
export function postForm(
  server: TestServer,
  path: string,
  form: Record<string, string> | URLSearchParams | string,
  headers: Record<string, string> = {},
): Promise<Response> {
  const body = typeof form === 'string' || form instanceof URLSearchParams ? form : new URLSearchParams(form);
  return fetch(new URL(path, server.url), {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
    body: body.toString(),
  });
}

/** A confidential client_credentials client allowed `scope`, and the tokens it obtains for `resource` with oauth4webapi. */
export async function clientCredentialsTokens(
  server: TestServer,
  scope: string,
  resource: string,
): Promise<{ clientId: string; tokens: oauth.TokenEndpointResponse }> {
  const registered = await server.createClient({ name: 'Batch job', grantType: 'client_credentials', redirectUris: [], confidential: true, scope });
  const job = await discover(server, registered.client.id, { secret: registered.secret! });
  const params = new URLSearchParams({ resource });
  const tokens = await oauth.processClientCredentialsResponse(
    job.as,
    job.client,
    await oauth.clientCredentialsGrantRequest(job.as, job.client, job.auth, params, insecure),
  );
  return { clientId: registered.client.id, tokens };
}
