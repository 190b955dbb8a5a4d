/**
 * The upstream leg of a login through a connection (SPEC §4.13), done with openid-client —
 * a certified relying-party library — never by hand: the authorization request (PKCE S256,
 * `state`, `nonce`), the callback's checks (state, RFC 9207 `iss`, the code exchanged, the ID
 * token's `iss`, `aud`, `exp` and `nonce`), user info. What openid-client leaves out, as
 * OpenID Connect Core §3.1.3.7 allows over TLS, the SPEC asks for: the ID token's signature,
 * verified here with jose against the provider's JWKS (AppContext `remoteKeys`: cached by its
 * Cache-Control, bounded, refetched at most once a minute for an unknown `kid`).
 *
 * Every request to the provider goes through the guarded fetch (protocol/safe-fetch.ts):
 * https only, public addresses unless the connection allows private ones, no redirects,
 * 5 seconds, 64 KiB. Discovery documents are kept per their Cache-Control, within the same
 * bounds as other fetched documents, so a login costs the provider's own round trips.
 *
 * The login under way is a row keyed by the SHA-256 of its `state` and bound to the browser
 * that started it (the SHA-256 of a cookie's random value), taken — deleted — when the
 * callback arrives: a replayed callback, or one carried to another browser, finds nothing.
 */
import { errors as joseErrors, jwtVerify } from 'jose';
import { LRUCache } from 'lru-cache';
import * as oidc from 'openid-client';
import type { AppContext, ProviderTokens } from '../../context.ts';
import { cacheLifetimeSeconds, safeFetch } from '../../protocol/safe-fetch.ts';
import { insertUpstreamLogin, takeUpstreamLogin } from '../../store/connections.ts';
import type { Connection } from '../../store/schema.ts';
import { hashToken, mintToken } from '../../tokens.ts';
import { callbackUrl, clientSecretOf } from './connections.ts';

/** How long a login may stay at the provider (SPEC §4.13). */
export const UPSTREAM_LOGIN_TTL_MS = 10 * 60 * 1000;
/** One deadline per request to the provider, and the most it may answer (SPEC §4.13). */
export const PROVIDER_TIMEOUT_MS = 5000;
export const PROVIDER_MAX_BYTES = 64 * 1024;

/** The longest provider `sub` kept (OIDC Core §2: at most 255 ASCII characters). */
const MAX_SUBJECT_LENGTH = 255;

/** Signature algorithms accepted on a provider's ID token: asymmetric ones (its JWKS), never HS* or `none`. */
const ID_TOKEN_ALGS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA'];

/** RFC 8176 `amr` values: a provider's other values are not repeated in Gatehouse's tokens. */
const REGISTERED_AMR = new Set([
  'face',
  'fpt',
  'geo',
  'hwk',
  'iris',
  'kba',
  'mca',
  'mfa',
  'otp',
  'pin',
  'pop',
  'pwd',
  'rba',
  'retina',
  'sc',
  'sms',
  'swk',
  'tel',
  'user',
  'vbm',
  'wia',
]);
/** `acr` values by which well-known providers say a login proved more than one factor. */
const MULTI_FACTOR_ACR = new Set(['http://schemas.openid.net/pape/policies/2007/06/multi-factor', 'phr', 'phrh', 'urn:okta:loa:2fa:any']);

/** The `amr` every login through a connection has (RFC 8176 `fed`). */
export const FEDERATED_LOGIN_AMR = 'fed';

/** Who the provider says the person is, in Gatehouse's terms. */
export interface UpstreamIdentity {
  /** The provider's `sub` (GitHub: its numeric id, as text). */
  subject: string;
  email: string | null;
  emailVerified: boolean;
  name: string | null;
  preferredUsername: string | null;
  /** The values of the connection's groups claim; null when it has none configured or the provider sent none. */
  groups: string[] | null;
  /** The login's `amr` at Gatehouse: `fed`, plus (with `--trust-mfa`) the provider's factors. */
  amr: string;
}

/**
 * Why a login through a connection failed: `denied` (the person or provider said no), `state`
 * (a replayed, expired or foreign callback), `invalid` (the provider's answer did not hold: a
 * bad ID token, an error), `unreachable` (no answer in time, too large, a refused address).
 * `reason` is for the log and the audit trail: it never quotes a token.
 */
export class UpstreamFailure extends Error {
  override name = 'UpstreamFailure';
  readonly kind: 'denied' | 'state' | 'invalid' | 'unreachable';
  readonly reason: string;
  /** The OAuth error code of the provider's error response (RFC 6749 §5.2), when that is what failed. */
  readonly providerError: string | null;
  constructor(kind: UpstreamFailure['kind'], reason: string, providerError: string | null = null) {
    super(`upstream login failed (${kind}): ${reason}`);
    this.kind = kind;
    this.reason = reason;
    this.providerError = providerError;
  }

  /** The provider refused the grant itself (RFC 6749 §5.2 `invalid_grant`, GitHub's `bad_refresh_token`): it will never work again. */
  get grantRefused(): boolean {
    return this.providerError === 'invalid_grant' || this.providerError === 'bad_refresh_token';
  }
}

/** A provider's request the guarded fetch refused or got no answer to. */
class ProviderUnreachable extends Error {
  override name = 'ProviderUnreachable';
}

/** openid-client's fetch, through the guarded fetch; `onAnswer` sees each answer's headers (discovery's Cache-Control). */
function guardedFetch(connection: Connection, onAnswer?: (url: string, cacheControl: string | undefined) => void) {
  return async (url: string, options: { method: string; headers: Record<string, string>; body?: unknown }): Promise<Response> => {
    // Header names in lower case, as the guarded fetch's own.
    const headers = Object.fromEntries(Object.entries(options.headers).map(([name, value]) => [name.toLowerCase(), value]));
    const body = options.body === undefined || options.body === null ? undefined : String(options.body);
    const fetched = await safeFetch(new URL(url), {
      allowPrivateAddresses: connection.allow_private_address === 1,
      timeoutMs: PROVIDER_TIMEOUT_MS,
      maxBytes: PROVIDER_MAX_BYTES,
      accept: headers.accept ?? 'application/json',
      request: { method: options.method, headers, body },
    });
    if (!fetched.ok) throw new ProviderUnreachable(`${new URL(url).host}: ${fetched.reason}`);
    onAnswer?.(url, fetched.headers['cache-control']);
    const responseHeaders = new Headers();
    for (const [name, value] of Object.entries(fetched.headers)) if (typeof value === 'string') responseHeaders.set(name, value);
    return new Response(fetched.status === 204 ? null : new Uint8Array(fetched.body), { status: fetched.status, headers: responseHeaders });
  };
}

interface Provider {
  readonly config: oidc.Configuration;
  readonly expiresAt: number;
}

/** The provider configurations of this process, by connection and its last change (an update starts afresh); bounded. */
const providers = new WeakMap<AppContext, LRUCache<string, Provider>>();

/** The connection's provider as openid-client sees it: discovered (and cached), or from its URLs. */
async function providerOf(ctx: AppContext, connection: Connection): Promise<oidc.Configuration> {
  let cache = providers.get(ctx);
  if (!cache) providers.set(ctx, (cache = new LRUCache({ max: 200 })));
  const key = `${connection.id} ${connection.updated_at}`;
  const cached = cache.get(key);
  if (cached && ctx.now() < cached.expiresAt) return cached.config;
  const secret = await clientSecretOf(ctx, connection);
  let maxAgeSeconds = cacheLifetimeSeconds(undefined);
  let config: oidc.Configuration;
  if (connection.kind === 'oidc') {
    const discovered = await oidc.discovery(new URL(connection.issuer!), connection.client_id, { client_secret: secret }, undefined, {
      [oidc.customFetch]: guardedFetch(connection, (url, cacheControl) => {
        if (url.includes('/.well-known/')) maxAgeSeconds = cacheLifetimeSeconds(cacheControl);
      }),
      timeout: PROVIDER_TIMEOUT_MS / 1000,
    });
    // The client authentication the provider supports, client_secret_basic first (RFC 6749 §2.3.1's default).
    const methods = discovered.serverMetadata().token_endpoint_auth_methods_supported;
    const auth = !methods || methods.includes('client_secret_basic') ? oidc.ClientSecretBasic(secret) : oidc.ClientSecretPost(secret);
    config = new oidc.Configuration(discovered.serverMetadata(), connection.client_id, { client_secret: secret }, auth);
  } else {
    config = new oidc.Configuration(
      {
        issuer: new URL(connection.authorization_url!).origin,
        authorization_endpoint: connection.authorization_url!,
        token_endpoint: connection.token_url!,
        userinfo_endpoint: connection.userinfo_url!,
      },
      connection.client_id,
      { client_secret: secret },
      // GitHub and its like document the secret in the form.
      oidc.ClientSecretPost(secret),
    );
  }
  config[oidc.customFetch] = guardedFetch(connection);
  config.timeout = PROVIDER_TIMEOUT_MS / 1000;
  cache.set(key, { config, expiresAt: ctx.now() + maxAgeSeconds * 1000 });
  return config;
}

/** Errors of the upstream leg as UpstreamFailures; anything else (a bug, the database) goes on up. */
function asFailure(error: unknown): UpstreamFailure | null {
  if (error instanceof UpstreamFailure) return error;
  const cause = (error as { cause?: unknown }).cause;
  if (error instanceof ProviderUnreachable || cause instanceof ProviderUnreachable)
    return new UpstreamFailure('unreachable', String((cause ?? error) as Error).slice(0, 300));
  if (error instanceof oidc.AuthorizationResponseError) {
    const kind = error.error === 'access_denied' ? 'denied' : 'invalid';
    return new UpstreamFailure(kind, `the provider answered ${error.error}${error.error_description ? `: ${error.error_description}` : ''}`.slice(0, 300));
  }
  if (error instanceof oidc.ResponseBodyError)
    return new UpstreamFailure('invalid', `the provider answered ${error.error} (HTTP ${error.status})`, error.error);
  const answered = errorAnsweredWith200(error);
  if (answered !== null) return new UpstreamFailure('invalid', `the provider answered ${answered} (HTTP 200)`, answered);
  if (error instanceof oidc.ClientError || error instanceof joseErrors.JOSEError || error instanceof oidc.WWWAuthenticateChallengeError)
    return new UpstreamFailure('invalid', `${(error as Error).message}`.slice(0, 300));
  if ((error as { name?: string }).name === 'RemoteKeysUnavailable') return new UpstreamFailure('unreachable', (error as Error).message.slice(0, 300));
  if (error instanceof TypeError || error instanceof SyntaxError)
    return new UpstreamFailure('invalid', `the provider's answer is malformed: ${error.message}`.slice(0, 300));
  return null;
}

/**
 * The `error` of a token endpoint's answer that carried one with status 200, as GitHub's do:
 * openid-client finds no `access_token` in it and keeps the body in the error's cause. Only a
 * code of RFC 6749 §5.2's characters, short: it goes into messages and the audit trail.
 */
function errorAnsweredWith200(error: unknown): string | null {
  if (!(error instanceof oidc.ClientError) || error.code !== 'OAUTH_INVALID_RESPONSE') return null;
  const body = (error.cause as { cause?: { body?: { error?: unknown } } } | undefined)?.cause?.body;
  const code = body?.error;
  return typeof code === 'string' && /^[\x20\x21\x23-\x5b\x5d-\x7e]{1,64}$/.test(code) ? code : null;
}

async function failingAs<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    throw asFailure(error) ?? error;
  }
}

export interface UpstreamStart {
  /** Where to send the browser. */
  url: URL;
  /** The value for the browser's binding cookie; null when the browser's own may stay. */
  binding: string;
}

/**
 * Begins a login at the connection's provider: the authorization URL, and the row the
 * callback will take. `binding` is the browser's binding cookie's value if it has one (a new
 * one is made otherwise). `linkUserId`: **Connect** — the identity will be linked to this
 * person. `loginHint`: the address typed on the login page (email-first). `fresh`: the
 * provider is asked to authenticate the person again (a recent login is needed).
 */
export async function beginUpstreamLogin(
  ctx: AppContext,
  connection: Connection,
  p: { binding: string | undefined; next: string; linkUserId?: string; loginHint?: string; fresh?: boolean },
): Promise<UpstreamStart> {
  const config = await failingAs(() => providerOf(ctx, connection));
  const verifier = oidc.randomPKCECodeVerifier();
  const state = oidc.randomState();
  const nonce = oidc.randomNonce();
  const binding = p.binding !== undefined && p.binding.length >= 32 && p.binding.length <= 100 ? p.binding : mintToken('upstreamBinding').token;
  const now = ctx.now();
  await insertUpstreamLogin(ctx.db, {
    state_hash: hashToken(state),
    connection_id: connection.id,
    binding_hash: hashToken(binding),
    code_verifier: verifier,
    nonce,
    next: p.next,
    link_user_id: p.linkUserId ?? null,
    // Only an OpenID Connect provider's ID token can say when the person authenticated.
    max_age: p.fresh && connection.kind === 'oidc' ? 0 : null,
    created_at: now,
    expires_at: now + UPSTREAM_LOGIN_TTL_MS,
  });
  const parameters: Record<string, string> = {
    redirect_uri: callbackUrl(ctx, connection.id),
    // An OAuth 2.0 provider asked for no scopes gets no `scope` parameter, not an empty one.
    ...(connection.scope === '' ? {} : { scope: connection.scope }),
    state,
    code_challenge: await oidc.calculatePKCECodeChallenge(verifier),
    code_challenge_method: 'S256',
  };
  if (connection.kind === 'oidc') parameters.nonce = nonce;
  if (p.loginHint) parameters.login_hint = p.loginHint;
  if (p.fresh && connection.kind === 'oidc') parameters.max_age = '0';
  return { url: oidc.buildAuthorizationUrl(config, parameters), binding };
}

/** What the callback completes: who the provider says logged in, and what the login was for. */
export interface UpstreamResult {
  identity: UpstreamIdentity;
  next: string;
  linkUserId: string | null;
  /** The provider's tokens of this login: kept when the connection keeps them (kept-tokens.ts). */
  tokens: ProviderTokens;
}

/** The tokens of a provider's token response, made at `now`; a refresh that sends no new refresh token keeps `previous`'s. */
function providerTokens(response: oidc.TokenEndpointResponse, now: number, previous: string | null = null): ProviderTokens {
  // Whole seconds, at most a year: a provider's `expires_in` may be any non-negative number.
  const lifetime = response.expires_in === undefined ? null : Math.min(Math.round(response.expires_in), MAX_PROVIDER_TOKEN_SECONDS);
  return {
    access_token: response.access_token,
    refresh_token: response.refresh_token ?? previous,
    scope: response.scope ?? null,
    expires_at: lifetime === null ? null : now + lifetime * 1000,
  };
}

/** The longest a provider's access token is taken to live: its `expires_in` beyond that counts as this. */
const MAX_PROVIDER_TOKEN_SECONDS = 365 * 24 * 3600;

/**
 * New provider tokens for a person's refresh token (RFC 6749 §6), through the guarded fetch like
 * every request to the provider. Throws UpstreamFailure.
 */
export function refreshUpstreamTokens(ctx: AppContext, connection: Connection, refreshToken: string): Promise<ProviderTokens> {
  return failingAs(async () => providerTokens(await oidc.refreshTokenGrant(await providerOf(ctx, connection), refreshToken), ctx.now(), refreshToken));
}

/**
 * Completes the login the callback answers: takes its row (by `state`, for this browser's
 * binding), has openid-client check the answer and exchange the code, verifies the ID token's
 * signature, and reads who the person is. Throws UpstreamFailure.
 */
export async function finishUpstreamLogin(
  ctx: AppContext,
  connection: Connection,
  query: URLSearchParams,
  binding: string | undefined,
): Promise<UpstreamResult> {
  const state = query.get('state');
  if (state === null || state.length > 200 || binding === undefined || binding.length > 100)
    throw new UpstreamFailure('state', 'the callback carries no state, or the browser no binding');
  const row = await takeUpstreamLogin(ctx.db, { stateHash: hashToken(state), bindingHash: hashToken(binding), now: ctx.now() });
  if (!row || row.connection_id !== connection.id) throw new UpstreamFailure('state', 'the state is unknown, used, expired, or another browser’s');
  return failingAs(async () => {
    const config = await providerOf(ctx, connection);
    const current = new URL(callbackUrl(ctx, connection.id));
    current.search = query.toString();
    const oidcLogin = connection.kind === 'oidc';
    const tokens = await oidc.authorizationCodeGrant(config, current, {
      pkceCodeVerifier: row.code_verifier,
      expectedState: state,
      ...(oidcLogin ? { expectedNonce: row.nonce, idTokenExpected: true } : {}),
      // Asked to authenticate afresh: the ID token's auth_time must say it did (not an old session at the provider).
      ...(row.max_age === null ? {} : { maxAge: row.max_age }),
    });
    const identity = oidcLogin ? await openIdIdentity(ctx, connection, config, tokens) : await oauth2Identity(connection, config, tokens.access_token);
    return { identity, next: row.next, linkUserId: row.link_user_id, tokens: providerTokens(tokens, ctx.now()) };
  });
}

type Claims = Record<string, unknown>;
const text = (value: unknown): string | null => (typeof value === 'string' && value !== '' ? value : null);

async function openIdIdentity(
  ctx: AppContext,
  connection: Connection,
  config: oidc.Configuration,
  tokens: oidc.TokenEndpointResponse & oidc.TokenEndpointResponseHelpers,
): Promise<UpstreamIdentity> {
  const jwksUri = config.serverMetadata().jwks_uri;
  if (!jwksUri) throw new UpstreamFailure('invalid', 'the provider publishes no jwks_uri: its ID token’s signature cannot be checked');
  const keys = ctx.remoteKeys.keySet(jwksUri, { allowPrivateAddress: connection.allow_private_address === 1 });
  // openid-client checked iss, aud, exp and nonce; the signature is checked here.
  await jwtVerify(tokens.id_token!, keys.getKey, { algorithms: ID_TOKEN_ALGS, issuer: config.serverMetadata().issuer, audience: connection.client_id });
  let claims: Claims = { ...tokens.claims()! };
  const subject = claims.sub as string;
  if (subject.length > MAX_SUBJECT_LENGTH) throw new UpstreamFailure('invalid', `the ID token's sub is longer than ${MAX_SUBJECT_LENGTH} characters`);
  const missing = text(claims.email) === null || (connection.groups_claim !== null && claims[connection.groups_claim] === undefined);
  if (missing && config.serverMetadata().userinfo_endpoint) {
    // User info fills in what the ID token left out; its `sub` must be the ID token's.
    claims = { ...(await oidc.fetchUserInfo(config, tokens.access_token, subject)), ...claims };
  }
  return identityFrom(connection, subject, claims);
}

async function oauth2Identity(connection: Connection, config: oidc.Configuration, accessToken: string): Promise<UpstreamIdentity> {
  const user = await protectedJson(config, accessToken, connection.userinfo_url!);
  if (typeof user !== 'object' || user === null || Array.isArray(user)) throw new UpstreamFailure('invalid', 'the user info is not a JSON object');
  const claims = user as Claims;
  const id = claims.sub ?? claims.id;
  const subject = typeof id === 'number' && Number.isSafeInteger(id) ? String(id) : text(id);
  if (subject === null || subject.length > MAX_SUBJECT_LENGTH) throw new UpstreamFailure('invalid', 'the user info names no id, or one too long');
  const mapped: Claims = { ...claims, preferred_username: claims.preferred_username ?? claims.login ?? claims.username };
  if (connection.preset === 'github') Object.assign(mapped, await githubEmail(config, accessToken, connection.userinfo_url!));
  return identityFrom(connection, subject, mapped);
}

/**
 * GitHub's verified primary email (its emails API), or its primary one unverified, or none: the
 * profile's `email` is only the public one, which the person may have set to anything.
 */
async function githubEmail(config: oidc.Configuration, accessToken: string, userUrl: string): Promise<Claims> {
  const emails = await protectedJson(config, accessToken, `${userUrl}/emails`);
  if (!Array.isArray(emails)) throw new UpstreamFailure('invalid', 'GitHub’s emails answer is not a list');
  const primary = emails.find((entry) => typeof entry === 'object' && entry !== null && entry.primary === true) as Claims | undefined;
  return { email: text(primary?.email), email_verified: primary?.verified === true };
}

/** GETs a JSON document with the access token (openid-client's protected-resource request). */
async function protectedJson(config: oidc.Configuration, accessToken: string, url: string): Promise<unknown> {
  const response = await oidc.fetchProtectedResource(config, accessToken, new URL(url), 'GET');
  if (response.status !== 200) throw new UpstreamFailure('invalid', `${new URL(url).pathname} answered HTTP ${response.status}`);
  return response.json();
}

function identityFrom(connection: Connection, subject: string, claims: Claims): UpstreamIdentity {
  const groupsClaim = connection.groups_claim === null ? undefined : claims[connection.groups_claim];
  const groups = Array.isArray(groupsClaim) ? groupsClaim.filter((g): g is string => typeof g === 'string' && g !== '' && g.length <= 100).slice(0, 200) : null;
  const name = text(claims.name) ?? ([text(claims.given_name), text(claims.family_name)].filter(Boolean).join(' ') || null);
  return {
    subject,
    email: text(claims.email)?.slice(0, 320) ?? null,
    emailVerified: claims.email_verified === true || claims.email_verified === 'true',
    name: name?.slice(0, 200) ?? null,
    preferredUsername: text(claims.preferred_username)?.slice(0, 100) ?? null,
    groups: connection.groups_claim === null ? null : groups,
    amr: federatedAmr(connection, claims),
  };
}

/**
 * `fed`, and with `--trust-mfa` the provider's own RFC 8176 values plus `mfa` when its `amr`
 * or `acr` says the login proved more than one factor. Without it, nothing the provider says
 * about factors counts here.
 */
function federatedAmr(connection: Connection, claims: Claims): string {
  if (connection.trust_mfa !== 1) return FEDERATED_LOGIN_AMR;
  const amr = Array.isArray(claims.amr) ? claims.amr.filter((value): value is string => typeof value === 'string' && REGISTERED_AMR.has(value)) : [];
  const acr = text(claims.acr);
  const multiFactor = amr.includes('mfa') || (acr !== null && MULTI_FACTOR_ACR.has(acr));
  return [...new Set([FEDERATED_LOGIN_AMR, ...amr, ...(multiFactor ? ['mfa'] : [])])].join(' ');
}
