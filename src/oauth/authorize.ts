/**
 * The authorization endpoint: the whole decision, from the request's parameters and the
 * signed-in user (if any) to what happens next — log in, ask for consent, or respond to
 * the client with a code or an error. The route only parses, calls `authorize` and renders.
 *
 * The checks run in order. Until the client and its redirect URL are verified (checks 1
 * and 2), errors are shown on a page and never redirected (RFC 6749 §4.1.2.1, RFC 9700
 * §4.11: no open redirector); the errors of the later checks are marked `redirectable`
 * and go back to the client.
 *
 * @see RFC 6749 §4.1.1, RFC 7636 §4.3, RFC 9207
 */
import { isMultiFactor, type SignedIn } from '../login.ts';
import { accountUri, type Config } from '../config.ts';
import { readIdTokenHint } from '../identity/id-tokens.ts';
import { insertCode } from '../store/atomic-writes.ts';
import { findConsentScopes, saveConsent, type ConsentKey } from '../store/consents.ts';
import type { Client, User } from '../store/schema.ts';
import { consumePushedRequest, findPushedRequest, openPushedRequest } from '../store/pushed-requests.ts';
import { hashToken, mintToken } from '../tokens.ts';
import { codeLifetime, mustPushRequests, mustUsePkce } from './client-rules.ts';
import { recordClient, requestingClient } from './client-kinds.ts';
import type { AppContext } from '../context.ts';
import { OAuthError, invalidRequest, type OAuthErrorCode } from '../protocol/errors.ts';
import { AUTHORIZATION_CODE_GRANT_TYPE } from './grants/types.ts';
import { readParams, single, type RawParams } from '../protocol/params.ts';
import { checkChallenge } from './pkce.ts';
import { consentOrigin, isPrivateUseRedirect, originOf, redirectUriMatches, redirectUrisOf } from '../protocol/redirect-uri.ts';
import { requestScopes, requestedAudience, resourceDetail, type Audience } from './resources.ts';
import { isSubset, joinScopes, splitScopes } from './scopes.ts';

export const RESPONSE_MODES = ['query', 'form_post', 'web_message'] as const;
export const PROMPTS = ['none', 'login', 'consent'] as const;
export type ResponseMode = (typeof RESPONSE_MODES)[number];
export type Prompt = (typeof PROMPTS)[number];

/** Where the outcome of an authorization request goes, once the client is known. */
export interface AuthorizationTarget {
  client: Client;
  redirectUri: string;
  state: string | undefined;
  responseMode: ResponseMode;
}

/** The OpenID Connect parameters of an authentication request (SPEC §4.10). */
export interface OidcRequest {
  /** Copied into the ID token of the code; at most MAX_NONCE_LENGTH characters. */
  nonce: string | null;
  /** Seconds: a login older than this is made again first; null when not asked. */
  maxAge: number | null;
  /** The userid (`acct:` URI) an `id_token_hint` names; null without a hint. */
  hintedSub: string | null;
}

/** The longest `nonce` accepted (SPEC §4.10). */
export const MAX_NONCE_LENGTH = 512;

export interface AuthorizationRequest extends AuthorizationTarget {
  /** The resource server the token will be for (RFC 8707). */
  audience: Audience;
  scopes: string[];
  codeChallenge: string | null;
  prompt: ReadonlySet<Prompt>;
  oidc: OidcRequest;
  /** The thumbprint of the DPoP key the code is for (RFC 9449 §10): its exchange must prove that key. */
  dpopJkt: string | null;
}

/** The parameters this endpoint understands; everything else is ignored (RFC 6749 §3.1). */
export const AUTHORIZATION_PARAMETERS = [
  'client_id',
  'redirect_uri',
  'response_type',
  'state',
  'scope',
  'resource',
  'code_challenge',
  'code_challenge_method',
  'response_mode',
  'prompt',
  // OpenID Connect (SPEC §4.10); `claims`, `display`, `ui_locales`, `claims_locales` and
  // `acr_values` are ignored like any unknown parameter.
  'nonce',
  'max_age',
  'login_hint',
  'id_token_hint',
  'request',
  'request_uri',
  // RFC 9449 §10.
  'dpop_jkt',
] as const;

/**
 * An authorization request as it reached the endpoint: the GET, with the parameters in its
 * query, or the consent form's POST, with them in the form together with the person's answer.
 */
export interface Arrival {
  /** The path and query the request was sent to. */
  url: string;
  params: RawParams;
  /** The consent form's answer; null for the GET. */
  decision: 'approve' | 'deny' | null;
}

/** What the popup page posts to `window.opener` (SPEC §4.1), and to which origin. */
export interface PopupMessage {
  /** The target origin of `postMessage`: always the registered redirect URL's, never one taken from the request. */
  origin: string;
  /** The message, as JSON. */
  message: string;
}

/** The consent page's popup: what to post to the opener if the person closes it. */
export interface PopupCancel {
  /** The target origin of `postMessage`, as for `PopupMessage`. */
  origin: string;
  /** `{"type":"authorization_canceled","state"}`, as JSON. */
  canceled: string;
}

/**
 * The answer to the client (RFC 6749 §4.1.2): a redirect, a form the browser POSTs to the
 * redirect URL (OAuth 2.0 Form Post Response Mode), or in the popup flow a message posted to the opener.
 */
export type AuthorizationResponse =
  | { mode: 'query'; redirectTo: string }
  | { mode: 'form_post'; action: string; fields: { name: string; value: string }[] }
  | { mode: 'web_message'; post: PopupMessage };

export type NextStep =
  /** Send the person to the login page; once logged in, to `next`. `switchAccount`: even if someone is logged in. */
  | { kind: 'login'; next: string; switchAccount: boolean }
  /**
   * The resource server wants a login with a second factor and this one proved none (SPEC
   * §4.12, step-up): the person gives one (or sets one up) first, then comes back to `next`.
   */
  | { kind: 'second_factor'; next: string }
  /** Ask `user` to approve `request`; the form carries `fields` back. */
  | {
      kind: 'consent';
      request: AuthorizationRequest;
      user: User;
      fields: { name: string; value: string }[];
      popup: PopupCancel | null;
      /** The scopes asked for that the person approved before (a client stepping up asks for the old ones and more). */
      approvedBefore: string[];
    }
  /** Answer the client; `refusal` is the error answered, if any, for the log. */
  | { kind: 'respond'; response: AuthorizationResponse; refusal: OAuthError | null };

/**
 * The authorization decision. `signedIn` is who is signed in and their login (null: nobody);
 * `address` is the user's, for the audit trail. Throws the errors that must not go to the
 * client (and any unexpected one); they render the error page.
 */
export async function authorize(arrival: Arrival, signedIn: SignedIn | null, ctx: AppContext, address: string): Promise<NextStep> {
  const pushed = await openPushed(arrival.params, ctx);
  const raw = pushed === null ? arrival.params : pushedParams(pushed, signedIn);
  const target = await resolveTarget(raw, ctx, address);
  try {
    if (pushed === null && mustPushRequests(target.client, ctx.config)) {
      throw redirectableError('invalid_request', `this client must push its authorization requests first (POST ${PAR_PATH}, RFC 9126)`);
    }
    const request = await checkRequest(raw, target, ctx);
    const mustLogIn = signedIn === null || request.prompt.has('login') || loginTooOld(signedIn, request.oidc.maxAge, ctx.now());
    if (mustLogIn) {
      if (request.prompt.has('none')) throw redirectableError('login_required', 'the user is not logged in, or not recently enough');
      return { kind: 'login', next: returnAfterLogin(arrival, request.prompt, ctx.config), switchAccount: signedIn !== null };
    }
    const { user } = signedIn;
    // OIDC Core §3.1.2.1: without asking, the answer may only be about the person the hint names.
    if (request.prompt.has('none') && request.oidc.hintedSub !== null && request.oidc.hintedSub !== accountUri(user.username, ctx.config)) {
      throw redirectableError('login_required', 'the user logged in is not the one "id_token_hint" names');
    }
    // Step-up before consent, and before a code: such a resource's tokens only for such a login.
    if (request.audience.requireSecondFactor && !isMultiFactor(signedIn.login.amr)) {
      if (request.prompt.has('none')) throw redirectableError('interaction_required', 'this resource needs a login with a second factor');
      return { kind: 'second_factor', next: returnAfterLogin(arrival, request.prompt, ctx.config) };
    }
    const { approved, before } = await consentOf(request, user, ctx);
    if (!approved && request.prompt.has('none')) {
      throw redirectableError('consent_required', 'the user has not approved this application');
    }
    if (arrival.decision === 'deny') {
      await answerPushed(pushed, ctx);
      return respond(target, ctx.config, { error: 'access_denied', error_description: 'the user denied the request' });
    }
    if (arrival.decision !== 'approve' && !approved) {
      const popup = request.responseMode === 'web_message' ? popupCancel(request) : null;
      return { kind: 'consent', request, user, fields: formFields(arrival.params), popup, approvedBefore: before };
    }
    // A code is issued from here on: the first write that references the client, so a client
    // known only by its metadata document is recorded now (SPEC §4.8), not for a visitor.
    await answerPushed(pushed, ctx);
    await recordClient(ctx, request.client, user, address);
    const code = arrival.decision === 'approve' ? await approve(request, signedIn, ctx, address) : await issueCode(request, signedIn, ctx, address);
    return respond(target, ctx.config, { code });
  } catch (error) {
    // The error itself says whether it may go to the redirect URL; anything else is thrown on.
    if (error instanceof OAuthError && error.redirectable) {
      await answerPushed(pushed, ctx);
      return respond(target, ctx.config, error.toJSON(), error);
    }
    throw error;
  }
}

/** Where clients push their authorization requests (RFC 9126): oauth/par.ts. */
export const PAR_PATH = '/oauth/par';

/** `request_uri` values Gatehouse gives out at its PAR endpoint (RFC 9126 §2.2); any other is a request object by reference, not supported. */
export const REQUEST_URI_PREFIX = 'urn:ietf:params:oauth:request_uri:';

/** Once a browser brings a pushed request, the time a person has to log in and answer it. */
const OPENED_PUSHED_REQUEST_MS = 600_000;

/** A pushed request a browser brought: its parameters as checked at push time, and when it was first brought. */
interface PushedRequest {
  hash: string;
  params: RawParams;
  openedAt: number;
}

/**
 * The pushed request `request_uri` names (SPEC §4.14), opened; null for a request that was not
 * pushed. Unknown, expired, answered already or pushed by another client: the error page (the
 * redirect URL is in the request, which cannot be trusted then).
 */
async function openPushed(raw: RawParams, ctx: AppContext): Promise<PushedRequest | null> {
  const requestUri = single(raw, 'request_uri');
  if (requestUri === undefined || !requestUri.startsWith(REQUEST_URI_PREFIX)) return null;
  const clientId = single(raw, 'client_id');
  if (clientId === undefined) throw invalidRequest('the "client_id" parameter is missing');
  const hash = hashToken(requestUri);
  const opened = await openPushedRequest(ctx.db, hash, clientId, ctx.now(), OPENED_PUSHED_REQUEST_MS);
  if (!opened) throw invalidRequest('the "request_uri" is unknown, has expired or was answered already, or another client pushed it');
  return { hash, params: JSON.parse(opened.params) as RawParams, openedAt: opened.opened_at! };
}

/**
 * What a request to the authorization endpoint asks, read without opening anything: a pushed
 * request's own parameters (unanswered, unexpired, of the client named), or null for an
 * unknown one; a request that was not pushed, its own. For the login page on the way, which
 * must show what the client pushed (`login_hint`, the popup's answer), never what the URL says
 * beside it.
 */
export async function requestedParams(raw: RawParams, ctx: AppContext): Promise<RawParams | null> {
  const requestUri = single(raw, 'request_uri');
  if (requestUri === undefined || !requestUri.startsWith(REQUEST_URI_PREFIX)) return raw;
  const clientId = single(raw, 'client_id');
  const pushed = clientId === undefined ? undefined : await findPushedRequest(ctx.db, hashToken(requestUri), clientId, ctx.now());
  return pushed === undefined ? null : (JSON.parse(pushed) as RawParams);
}

/**
 * The pushed parameters as this arrival reads them: a login made since the request was first
 * brought satisfies its `prompt=login` and `max_age` (what the return URL's edits do for a
 * request that was not pushed: `returnAfterLogin`).
 */
function pushedParams(pushed: PushedRequest, signedIn: SignedIn | null): RawParams {
  if (signedIn === null || signedIn.login.authTime < pushed.openedAt) return pushed.params;
  const { max_age: _satisfied, ...params } = pushed.params;
  const prompt = single(params, 'prompt')
    ?.split(' ')
    .filter((p) => p !== 'login')
    .join(' ');
  return { ...params, ...(prompt === undefined ? {} : { prompt }) };
}

/** Marks the pushed request answered, once: a second answer (another tab, a replay) gets the error page. */
async function answerPushed(pushed: PushedRequest | null, ctx: AppContext): Promise<void> {
  if (pushed !== null && !(await consumePushedRequest(ctx.db, pushed.hash, ctx.now()))) {
    throw invalidRequest('this authorization request was answered already: the application must start again');
  }
}

/** An error found once the client and its redirect URL are verified: it goes back to the client. */
function redirectableError(error: OAuthErrorCode, description: string): OAuthError {
  return new OAuthError(error, description, undefined, undefined, true);
}

/**
 * Checks 1 and 2: the client exists and may use this endpoint, and the redirect URL is its
 * own. Its errors are not redirectable: they render a page.
 */
export async function resolveTarget(raw: RawParams, ctx: AppContext, address: string): Promise<AuthorizationTarget> {
  const clientId = single(raw, 'client_id');
  if (clientId === undefined) throw invalidRequest('the "client_id" parameter is missing');
  const client = await requestingClient(ctx, clientId, address);
  const registered = redirectUrisOf(client);
  const [only, ...others] = registered;
  if (only === undefined) throw invalidRequest('this client has no redirect URL registered');
  const requested = single(raw, 'redirect_uri');
  if (requested !== undefined && !registered.some((uri) => redirectUriMatches(uri, requested))) {
    throw invalidRequest('"redirect_uri" is not a redirect URL registered for this client');
  }
  if (requested === undefined && others.length > 0) throw invalidRequest('the "redirect_uri" parameter is missing: this client has several redirect URLs');
  const redirectUri = requested ?? only;
  // A popup's message and a posted form need a web origin; an application's own scheme (RFC 8252 §7.1) has none.
  if (isPrivateUseRedirect(redirectUri) && (raw.response_mode === 'web_message' || raw.response_mode === 'form_post'))
    throw invalidRequest('"response_mode" web_message and form_post need an https or loopback redirect URL');
  return {
    client,
    redirectUri,
    // A repeated state is rejected by the next checks; the error then goes back without one.
    state: Array.isArray(raw.state) ? undefined : single(raw, 'state'),
    // An unknown mode is refused by the next checks; the error then goes back the default way.
    responseMode: RESPONSE_MODES.find((mode) => mode === raw.response_mode) ?? 'query',
  };
}

/** Checks 3 onwards. The client and its redirect URL are verified: every error here is redirectable. */
export async function checkRequest(raw: RawParams, target: AuthorizationTarget, ctx: AppContext): Promise<AuthorizationRequest> {
  try {
    // `resource` is read apart: repeated, it is invalid_target (RFC 8707 §2), not invalid_request.
    const optional = AUTHORIZATION_PARAMETERS.filter((name) => name !== 'response_type' && name !== 'resource');
    // OIDC Core §6: request objects are not supported, by value or by reference. Checked first:
    // such a request may carry nothing else but them and `client_id`.
    if (raw.request !== undefined) throw new OAuthError('request_not_supported', 'the "request" parameter is not supported');
    if (raw.request_uri !== undefined) throw new OAuthError('request_uri_not_supported', 'the "request_uri" parameter is not supported');
    const params = readParams(raw, ['response_type'], optional);
    if (params.response_type !== 'code') {
      throw new OAuthError('unsupported_response_type', 'only "response_type=code" is supported');
    }
    if (target.client.grant_type !== AUTHORIZATION_CODE_GRANT_TYPE) {
      throw new OAuthError('unauthorized_client', 'this client is not registered for the authorization_code grant');
    }
    if (params.response_mode !== undefined && !(RESPONSE_MODES as readonly string[]).includes(params.response_mode)) {
      throw invalidRequest(`"response_mode" must be one of ${RESPONSE_MODES.join(', ')}`);
    }
    const audience = await requestedAudience(ctx, raw.resource);
    const scopes = requestScopes(params.scope, target.client, audience);
    const codeChallenge = checkChallenge(params.code_challenge, params.code_challenge_method, mustUsePkce(target.client, ctx.config));
    const oidc = await checkOidcParameters(params, ctx);
    // An RFC 7638 thumbprint by SHA-256, as DPoP proofs' keys are named (oauth/dpop.ts).
    if (params.dpop_jkt !== undefined && !/^[A-Za-z0-9_-]{43}$/.test(params.dpop_jkt)) {
      throw invalidRequest('"dpop_jkt" must be the base64url SHA-256 thumbprint of a key (43 characters)');
    }
    return { ...target, audience, scopes, codeChallenge, prompt: parsePrompt(params.prompt), oidc, dpopJkt: params.dpop_jkt ?? null };
  } catch (error) {
    throw error instanceof OAuthError ? error.toRedirectable() : error;
  }
}

/** `nonce`, `max_age` and `id_token_hint` (SPEC §4.10); `login_hint` is the login page's (oauth/pending.ts). */
async function checkOidcParameters(params: Partial<Record<(typeof AUTHORIZATION_PARAMETERS)[number], string>>, ctx: AppContext): Promise<OidcRequest> {
  const { nonce, max_age: maxAge, id_token_hint: hint } = params;
  if (nonce !== undefined && nonce.length > MAX_NONCE_LENGTH) throw invalidRequest(`"nonce" must be at most ${MAX_NONCE_LENGTH} characters`);
  if (maxAge !== undefined && !/^\d{1,10}$/.test(maxAge)) throw invalidRequest('"max_age" must be a non-negative integer (seconds)');
  const hinted = hint === undefined ? null : await readIdTokenHint(ctx, hint);
  if (hint !== undefined && hinted === null) throw invalidRequest('"id_token_hint" is not an ID token this server issued');
  return { nonce: nonce ?? null, maxAge: maxAge === undefined ? null : Number(maxAge), hintedSub: hinted?.sub ?? null };
}

/** Whether the session's login is older than `max_age` allows (`0`: any login is, as with `prompt=login`). */
function loginTooOld(signedIn: SignedIn | null, maxAge: number | null, now: number): boolean {
  return signedIn !== null && maxAge !== null && now - signedIn.login.authTime >= maxAge * 1000;
}

function parsePrompt(raw: string | undefined): Set<Prompt> {
  const values = new Set((raw ?? '').split(' ').filter((p) => p !== ''));
  for (const value of values) {
    if (!(PROMPTS as readonly string[]).includes(value)) throw invalidRequest(`unsupported "prompt" value "${value}"`);
  }
  if (values.has('none') && values.size > 1) throw invalidRequest('"prompt=none" cannot be combined with other values');
  return values as Set<Prompt>;
}

/**
 * Whether the user need not be asked: the client is trusted, or the user approved these
 * scopes before — for a client no administrator checked, for this redirect origin, so that
 * an approval for one place never sends a code to another unasked (with `prompt=none`:
 * `consent_required`). `prompt=consent` asks anyway. `before`: the scopes asked for that
 * were approved before, which a consent page shows apart from the new ones.
 */
async function consentOf(request: AuthorizationRequest, user: User, ctx: AppContext): Promise<{ approved: boolean; before: string[] }> {
  if (request.client.trusted === 1 && !request.prompt.has('consent')) return { approved: true, before: [] };
  const remembered = await findConsentScopes(ctx.db, consentKey(request, user), ctx.now());
  const before = remembered === undefined ? [] : request.scopes.filter((scope) => splitScopes(remembered).includes(scope));
  return { approved: !request.prompt.has('consent') && remembered !== undefined && isSubset(request.scopes, splitScopes(remembered)), before };
}

/** What a consent to `request` is remembered by: an administrator's client's holds for all its redirect URLs. */
function consentKey(request: AuthorizationRequest, user: User): ConsentKey {
  const redirectOrigin = request.client.kind === 'registered' ? '' : consentOrigin(request.redirectUri);
  return { userId: user.id, clientId: request.client.id, resourceId: request.audience.id, redirectOrigin };
}

/**
 * Records the user's approval (so it is not asked again) and issues the code. `address`
 * is the user's, for the audit trail.
 */
async function approve(request: AuthorizationRequest, signedIn: SignedIn, ctx: AppContext, address: string): Promise<string> {
  const { user } = signedIn;
  const now = ctx.now();
  const about = consentKey(request, user);
  const previous = await findConsentScopes(ctx.db, about, now);
  const scopes = joinScopes([...request.scopes, ...(previous === undefined ? [] : splitScopes(previous))]);
  await saveConsent(ctx.db, { ...about, scopes, now, expiresAt: now + ctx.config.consentTtl * 1000 });
  await ctx.audit({
    type: 'consent_granted',
    userId: user.id,
    clientId: request.client.id,
    address,
    detail: { scope: scopes, ...resourceDetail(request.audience) },
  });
  return issueCode(request, signedIn, ctx, address);
}

/**
 * Mints the authorization code, bound to client, user, redirect URL, resource, scopes and PKCE
 * challenge, and carrying the login it was approved in (its grant's `auth_time` and `amr`).
 */
async function issueCode(request: AuthorizationRequest, { user, login }: SignedIn, ctx: AppContext, address: string): Promise<string> {
  const now = ctx.now();
  const code = mintToken('code');
  const issued = ctx.audit.pending({
    type: 'code_issued',
    userId: user.id,
    clientId: request.client.id,
    address,
    detail: { scope: joinScopes(request.scopes), ...resourceDetail(request.audience) },
  });
  await insertCode(
    ctx.db,
    {
      hash: code.hash,
      client_id: request.client.id,
      user_id: user.id,
      redirect_uri: request.redirectUri,
      resource_id: request.audience.id,
      scopes: joinScopes(request.scopes),
      code_challenge: request.codeChallenge,
      auth_time: login.authTime,
      amr: login.amr,
      sid: login.sid,
      nonce: request.oidc.nonce,
      dpop_jkt: request.dpopJkt,
      created_at: now,
      expires_at: now + codeLifetime(request.client, ctx.config) * 1000,
    },
    issued.row,
  );
  issued.committed();
  return code.token;
}

/**
 * Where to come back to after logging in: the same request, as a GET (the consent form's
 * parameters move into the query), without `prompt=login` and `max_age`, or it would ask
 * again: the login just made is as fresh as either asks (its `auth_time` tells the client).
 */
export function returnAfterLogin(arrival: Arrival, prompt: ReadonlySet<Prompt>, config: Config): string {
  const again = new URL(arrival.url, config.publicUrl);
  if (arrival.decision !== null) {
    for (const name of AUTHORIZATION_PARAMETERS) again.searchParams.delete(name);
    for (const { name, value } of formFields(arrival.params)) again.searchParams.set(name, value);
  }
  again.searchParams.delete('max_age');
  const kept = [...prompt].filter((p) => p !== 'login');
  if (kept.length > 0) again.searchParams.set('prompt', kept.join(' '));
  else again.searchParams.delete('prompt');
  return again.pathname + again.search;
}

/** The request's parameters, for the consent form to send back. */
function formFields(raw: RawParams): { name: string; value: string }[] {
  return AUTHORIZATION_PARAMETERS.flatMap((name) => {
    const value = raw[name];
    return typeof value === 'string' ? [{ name, value }] : [];
  });
}

/** The answer to the client, with `state` and `iss` (RFC 9207) added. */
function respond(target: AuthorizationTarget, config: Config, result: Record<string, string>, refusal: OAuthError | null = null): NextStep {
  const params = { ...result, ...(target.state === undefined ? {} : { state: target.state }), iss: config.publicUrl };
  if (target.responseMode === 'web_message') return { kind: 'respond', response: { mode: 'web_message', post: popupMessage(target, params) }, refusal };
  if (target.responseMode === 'form_post') {
    const fields = Object.entries(params).map(([name, value]) => ({ name, value }));
    return { kind: 'respond', response: { mode: 'form_post', action: target.redirectUri, fields }, refusal };
  }
  const url = new URL(target.redirectUri);
  for (const [name, value] of Object.entries(params)) url.searchParams.append(name, value);
  return { kind: 'respond', response: { mode: 'query', redirectTo: url.href }, refusal };
}

/** What the popup page posts: the code or the error; a denial is a cancellation. */
export function popupMessage(target: AuthorizationTarget, params: Record<string, string>): PopupMessage {
  const { error, error_description, code } = params;
  const message =
    error === 'access_denied'
      ? { type: 'authorization_canceled', state: target.state }
      : { type: 'authorization_response', ...(code ? { code } : { error, error_description }), state: target.state };
  return { origin: originOf(target.redirectUri), message: JSON.stringify(message) };
}

export function popupCancel(target: AuthorizationTarget): PopupCancel {
  return { origin: originOf(target.redirectUri), canceled: JSON.stringify({ type: 'authorization_canceled', state: target.state }) };
}
