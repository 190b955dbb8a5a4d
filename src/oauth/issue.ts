/** Minting the tokens of a token response. @see RFC 6749 §5.1 */
import type { IssuedTokens } from '../store/tokens.ts';
import { mintToken } from '../tokens.ts';
import type { AppContext } from '../context.ts';
import { accessTokenTtl, mayAskAnyScope, type TokenSettings } from './resources.ts';
import { joinScopes, splitScopes } from './scopes.ts';

export interface TokenResponse {
  token_type: 'Bearer';
  access_token: string;
  expires_in: number;
  refresh_token?: string;
  scope: string;
}

export interface MintedTokenResponse {
  /** The hashes and expiry times the store keeps. */
  stored: IssuedTokens;
  /** The tokens themselves, for the client, once. */
  response: TokenResponse;
}

/**
 * New tokens for one token response: an access token for `resource`, made as it says (its
 * lifetime: `accessTokenTtl`), and a refresh token when `withRefresh`. Every grant mints its
 * access tokens here.
 */
export function mintTokenResponse(ctx: AppContext, resource: TokenSettings, scopes: readonly string[], withRefresh: boolean): MintedTokenResponse {
  const now = ctx.now();
  const lifetime = accessTokenTtl(resource, ctx.config);
  const access = mintToken('access');
  const refresh = withRefresh ? mintToken('refresh') : null;
  const scope = joinScopes(scopes);
  const stored: IssuedTokens = {
    accessHash: access.hash,
    accessExpiresAt: now + lifetime * 1000,
    refreshHash: refresh?.hash ?? null,
    refreshExpiresAt: now + ctx.config.refreshTokenTtl * 1000,
    scopes: scope,
  };
  const response: TokenResponse = {
    token_type: 'Bearer',
    access_token: access.token,
    expires_in: lifetime,
    ...(refresh ? { refresh_token: refresh.token } : {}),
    scope,
  };
  return { stored, response };
}

/** Whole seconds left until `expiresAt`, never negative: `expires_in` is an integer. */
export function secondsUntil(expiresAt: number, now: number): number {
  return Math.max(0, Math.floor((expiresAt - now) / 1000));
}

/**
 * The scopes of a code or grant that its client may still have (SPEC §4.2): those an
 * administrator has taken from the client since are dropped from the new tokens. A client
 * that may ask for any scope keeps them all: a scope deleted since has revoked the grants and
 * voided the codes that held it (store/resources.ts).
 */
export function scopesStillAllowed(scopes: readonly string[], client: { scopes: string; kind?: string }): string[] {
  if (mayAskAnyScope(client)) return [...scopes];
  const allowed = splitScopes(client.scopes);
  return scopes.filter((scope) => allowed.includes(scope));
}
