/**
 * The authorization endpoint, as an ordered list of named checks. Until the client and its
 * redirect URL are verified, errors are shown on a page and never redirected (RFC 6749
 * §4.1.2.1, RFC 9700 §4.11: no open redirector); after that, they go back to the client.
 *
 * @see RFC 6749 §4.1.1, RFC 7636 §4.3, RFC 9207
 */
import type { Config, Scope } from '../config.ts';
import { findClient } from '../store/clients.ts';
import { insertCode } from '../store/codes.ts';
import { findConsentScopes, saveConsent } from '../store/consents.ts';
import type { Client, User } from '../store/schema.ts';
import { mintToken } from '../tokens.ts';
import { isClientId } from './client-auth.ts';
import type { AppContext } from '../context.ts';
import { OAuthError, invalidRequest } from './errors.ts';
import { readParams, single, type RawParams } from './params.ts';
import { checkChallenge } from './pkce.ts';
import { redirectUriMatches } from './redirect-uri.ts';
import { grantableScopes, isSubset, joinScopes, splitScopes } from './scopes.ts';

export type ResponseMode = 'query' | 'web_message';
export type Prompt = 'none' | 'login' | 'consent';

/** Where the outcome of an authorization request goes, once the client is known. */
export interface AuthorizationTarget {
  client: Client;
  redirectUri: string;
  state: string | undefined;
  responseMode: ResponseMode;
}

export interface AuthorizationRequest extends AuthorizationTarget {
  scopes: Scope[];
  codeChallenge: string | null;
  prompt: ReadonlySet<Prompt>;
}

/** The parameters this endpoint understands; everything else is ignored (RFC 6749 §3.1). */
export const AUTHORIZATION_PARAMETERS = [
  'client_id',
  'redirect_uri',
  'response_type',
  'state',
  'scope',
  'code_challenge',
  'code_challenge_method',
  'response_mode',
  'prompt',
] as const;

/** Check 1 and 2: the client exists and may use this endpoint, and the redirect URL is its own. Errors here render a page. */
export async function resolveTarget(raw: RawParams, ctx: AppContext): Promise<AuthorizationTarget> {
  const clientId = single(raw, 'client_id');
  if (clientId === undefined) throw invalidRequest('the "client_id" parameter is missing');
  const client = isClientId(clientId) ? await findClient(ctx.db, clientId) : undefined;
  if (!client) throw invalidRequest('unknown client: check the "client_id" parameter');
  if (client.redirect_uri === null) throw invalidRequest('this client has no redirect URL registered');
  const requested = single(raw, 'redirect_uri');
  if (requested !== undefined && !redirectUriMatches(client.redirect_uri, requested)) {
    throw invalidRequest('"redirect_uri" is not the redirect URL registered for this client');
  }
  return {
    client,
    redirectUri: requested ?? client.redirect_uri,
    // A repeated state is rejected by the next checks; the error then goes back without one.
    state: Array.isArray(raw.state) ? undefined : single(raw, 'state'),
    responseMode: raw.response_mode === 'web_message' ? 'web_message' : 'query',
  };
}

/** Checks 3 onwards; errors here go back to the client's redirect URL. */
export function checkRequest(raw: RawParams, target: AuthorizationTarget, config: Config): AuthorizationRequest {
  const optional = AUTHORIZATION_PARAMETERS.filter((name) => name !== 'response_type');
  const params = readParams(raw, ['response_type'], optional);
  if (params.response_type !== 'code') {
    throw new OAuthError('unsupported_response_type', 'only "response_type=code" is supported');
  }
  if (target.client.grant_type !== 'authorization_code') {
    throw new OAuthError('unauthorized_client', 'this client is not registered for the authorization_code grant');
  }
  if (params.response_mode !== undefined && params.response_mode !== 'query' && params.response_mode !== 'web_message') {
    throw invalidRequest('"response_mode" must be query or web_message');
  }
  const scopes = grantableScopes(params.scope, splitScopes(target.client.scopes));
  const codeChallenge = checkChallenge(params.code_challenge, params.code_challenge_method, config.requirePkce || target.client.require_pkce === 1);
  return { ...target, scopes, codeChallenge, prompt: parsePrompt(params.prompt) };
}

function parsePrompt(raw: string | undefined): Set<Prompt> {
  const values = new Set((raw ?? '').split(' ').filter((p) => p !== ''));
  for (const value of values) {
    if (value !== 'none' && value !== 'login' && value !== 'consent') throw invalidRequest(`unsupported "prompt" value "${value}"`);
  }
  if (values.has('none') && values.size > 1) throw invalidRequest('"prompt=none" cannot be combined with other values');
  return values as Set<Prompt>;
}

export type Decision = { kind: 'login' } | { kind: 'consent' } | { kind: 'issue' };

/** What happens next for this user (null: not logged in). */
export async function decide(request: AuthorizationRequest, user: User | null, ctx: AppContext): Promise<Decision> {
  if (user === null || request.prompt.has('login')) {
    if (request.prompt.has('none')) throw new OAuthError('login_required', 'the user is not logged in');
    return { kind: 'login' };
  }
  if (request.client.trusted === 1 && !request.prompt.has('consent')) return { kind: 'issue' };
  const remembered = request.prompt.has('consent') ? undefined : await findConsentScopes(ctx.db, user.id, request.client.id, ctx.now());
  if (remembered !== undefined && isSubset(request.scopes, splitScopes(remembered))) return { kind: 'issue' };
  if (request.prompt.has('none')) throw new OAuthError('consent_required', 'the user has not approved this application');
  return { kind: 'consent' };
}

/**
 * Records the user's approval (so it is not asked again) and issues the code. `address`
 * is the user's, for the audit trail.
 */
export async function approve(request: AuthorizationRequest, user: User, ctx: AppContext, address: string): Promise<string> {
  const now = ctx.now();
  const previous = await findConsentScopes(ctx.db, user.id, request.client.id, now);
  const scopes = joinScopes([...request.scopes, ...(previous === undefined ? [] : splitScopes(previous))]);
  await saveConsent(ctx.db, { userId: user.id, clientId: request.client.id, scopes, now, expiresAt: now + ctx.config.consentTtl * 1000 });
  await ctx.audit({ type: 'consent_granted', userId: user.id, clientId: request.client.id, address, detail: { scope: scopes } });
  return issueCode(request, user, ctx, address);
}

/** Mints the authorization code, bound to client, user, redirect URL, scopes and PKCE challenge. */
export async function issueCode(request: AuthorizationRequest, user: User, ctx: AppContext, address: string): Promise<string> {
  const now = ctx.now();
  const code = mintToken('code');
  await insertCode(ctx.db, {
    hash: code.hash,
    client_id: request.client.id,
    user_id: user.id,
    redirect_uri: request.redirectUri,
    scopes: joinScopes(request.scopes),
    code_challenge: request.codeChallenge,
    created_at: now,
    expires_at: now + ctx.config.authCodeTtl * 1000,
  });
  await ctx.audit({ type: 'code_issued', userId: user.id, clientId: request.client.id, address, detail: { scope: joinScopes(request.scopes) } });
  return code.token;
}

/** The authorization response parameters, with `state` and `iss` (RFC 9207) added. */
export function responseParams(target: AuthorizationTarget, config: Config, result: Record<string, string>): Record<string, string> {
  return { ...result, ...(target.state === undefined ? {} : { state: target.state }), iss: config.publicUrl };
}

/** `redirect_uri` with the response parameters added to its query. */
export function redirectUrl(target: AuthorizationTarget, params: Record<string, string>): string {
  const url = new URL(target.redirectUri);
  for (const [name, value] of Object.entries(params)) url.searchParams.append(name, value);
  return url.href;
}
