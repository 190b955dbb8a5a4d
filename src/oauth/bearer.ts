/** Bearer token checks for the resource side. @see RFC 6750 §2.1, §3.1 */
import { liveAccessTokenHashes } from '../store/liveness.ts';
import { findLiveBearerToken, type BearerTokenInfo } from '../store/tokens.ts';
import { hashIfWellFormed } from '../tokens.ts';
import type { AppContext } from '../context.ts';
import { OAuthError } from '../protocol/errors.ts';
import { BUILTIN_RESOURCE_ID } from './resources.ts';

export type { BearerTokenInfo };

/** The token of an `Authorization: Bearer …` header, or undefined. */
export function bearerToken(authorization: string | undefined): string | undefined {
  const match = authorization === undefined ? null : /^Bearer +([\x21-\x7e]+) *$/i.exec(authorization);
  return match?.[1];
}

/**
 * The live access token's grant and user, for the service's own API (`/api/profile`, `/ws`):
 * `invalid_token` for a missing, unknown, expired or revoked token, and for a token meant for
 * another resource server (SPEC §4.4: its audience is not this API).
 */
export async function authenticateAccessToken(ctx: AppContext, token: string | undefined): Promise<BearerTokenInfo> {
  if (token === undefined) throw new OAuthError('invalid_token', 'an access token is required');
  return checkAccessToken(ctx, token);
}

/**
 * A request that sent no token at all (RFC 6750 §3.1): its challenge names no error. Only
 * where the SPEC says so (userinfo); `/api/profile` answers `invalid_token`, as h's does.
 */
export class NoBearerToken extends OAuthError {
  constructor() {
    super('invalid_token', 'an access token is required');
  }
}

/** As `authenticateAccessToken`, but a request without a token is `NoBearerToken`. */
export async function authenticateBearer(ctx: AppContext, token: string | undefined): Promise<BearerTokenInfo> {
  if (token === undefined) throw new NoBearerToken();
  return checkAccessToken(ctx, token);
}

async function checkAccessToken(ctx: AppContext, token: string): Promise<BearerTokenInfo> {
  const hash = hashIfWellFormed('access', token);
  const info = hash === null ? undefined : await findLiveBearerToken(ctx.db, hash, ctx.now());
  if (!info) throw new OAuthError('invalid_token', 'the access token is invalid, expired or revoked');
  if (info.resource_id !== BUILTIN_RESOURCE_ID) throw new OAuthError('invalid_token', 'the access token is for another resource server', 'audience mismatch');
  return info;
}

/** 403 `insufficient_scope`, naming the scope the request needs in its challenge (RFC 6750 §3). */
export class InsufficientScope extends OAuthError {
  readonly scope: string;
  constructor(scope: string) {
    super('insufficient_scope', `this request needs the "${scope}" scope`);
    this.scope = scope;
  }
}

/** `scopes`: the token's, as `splitScopes` gives them (the caller answers with them too). */
export function requireScope(scopes: readonly string[], scope: string): void {
  if (!scopes.includes(scope)) throw new InsufficientScope(scope);
}

/**
 * Which of these access tokens (by hash) are still live: one query for the tokens behind
 * every open WebSocket, so that a revocation the fan-out missed still closes them.
 */
export function liveAccessTokens(ctx: AppContext, hashes: readonly string[]): Promise<Set<string>> {
  return liveAccessTokenHashes(ctx.db, hashes, ctx.now());
}
