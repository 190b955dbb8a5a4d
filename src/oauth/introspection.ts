/**
 * Token introspection for resource servers, which authenticate as confidential clients.
 * Who may learn about a token (SPEC §4.4): a client about the tokens issued to itself, a
 * resource server's own client about the access tokens for that resource server, and any
 * confidential client about access tokens of the built-in resource (the service's own API
 * servers). A live token the caller may know about is described; anything else —
 * unknown, malformed, expired, revoked, rotated, of a disabled user, another client's refresh
 * token — is just `{"active": false}`, with no hint of which (RFC 7662 §2.2).
 *
 * @see RFC 7662 §2.1 (request), §2.2 (response), §4 (security considerations)
 */
import { accountUri } from '../config.ts';
import { findLiveAccessToken, findLiveRefreshToken, type AccessTokenInfo } from '../store/tokens.ts';
import type { Client } from '../store/schema.ts';
import { hashIfWellFormed } from '../tokens.ts';
import { loginClaims, loginOf } from '../login.ts';
import { readJwtAccessToken, type Actor } from '../identity/jwt-access-tokens.ts';
import { isConfidential } from './assertions/client-keys.ts';
import { InvalidClient } from './client-auth.ts';
import { BUILTIN_RESOURCE_ID, builtinResourceUri } from './resources.ts';
import type { AppContext } from '../context.ts';
import { readParams, type RawParams } from '../protocol/params.ts';

export interface Introspection {
  active: boolean;
  scope?: string;
  client_id?: string;
  username?: string;
  sub?: string;
  /** `DPoP` for a DPoP-bound access token (RFC 9449 §6.2). */
  token_type?: 'Bearer' | 'DPoP' | 'refresh_token';
  exp?: number;
  iat?: number;
  iss?: string;
  /** The resource server the token is for (RFC 8707, RFC 7662 §2.2). */
  aud?: string;
  /** A JWT access token's own id (RFC 9068). */
  jti?: string;
  /** When the person logged in, epoch seconds, and how (RFC 8176): for a person's token (SPEC §4.12). */
  auth_time?: number;
  amr?: string[];
  /** The thumbprint of the key a DPoP-bound token is bound to (RFC 9449 §6.2). */
  cnf?: { jkt: string };
  /** Who acts for the person, in a token made by an exchange (RFC 8693 §4.1, SPEC §4.15). */
  act?: Actor;
}

/**
 * `POST /oauth/introspect`. Only confidential clients may ask: anyone else gets
 * `invalid_client`, so the endpoint cannot be used to probe tokens anonymously (RFC 7662 §4).
 * The Basic challenge is sent even to a caller that sent no credentials: the endpoint
 * requires them (RFC 7235 §3.1).
 */
export async function introspect(raw: RawParams, client: Client | null, ctx: AppContext): Promise<Introspection> {
  if (client === null) throw new InvalidClient('authenticate as a confidential client to introspect tokens', true);
  if (!isConfidential(client)) throw new InvalidClient('only confidential clients may introspect tokens', true);
  const params = readParams(raw, ['token'], ['token_type_hint']);
  const now = ctx.now();
  const lookups = {
    access_token: async () => {
      const found = await findPresentedAccessToken(ctx, params.token, now);
      const info = found?.info;
      // Anyone else learns exactly what an unknown token would tell them (SPEC §4.4).
      const mayLearn = info && (info.client_id === client.id || info.resource_id === BUILTIN_RESOURCE_ID || info.resource_client_id === client.id);
      return mayLearn ? { ...describe(info, info.dpop_jkt === null ? 'Bearer' : 'DPoP', ctx), ...(found.jti === null ? {} : { jti: found.jti }) } : null;
    },
    refresh_token: async () => {
      const hash = hashIfWellFormed('refresh', params.token);
      const info = hash === null ? undefined : await findLiveRefreshToken(ctx.db, hash, now);
      // A refresh token is a credential of its own client alone: to any other client it is
      // described exactly as an unknown token would be (SPEC §4.4).
      return info && info.client_id === client.id ? describe(info, 'refresh_token', ctx) : null;
    },
  };
  // The hint only orders the lookups; an unknown or wrong hint still finds the token (RFC 7662 §2.1).
  const order = params.token_type_hint === 'refresh_token' ? [lookups.refresh_token, lookups.access_token] : [lookups.access_token, lookups.refresh_token];
  for (const lookup of order) {
    const found = await lookup();
    if (found) return found;
  }
  return { active: false };
}

/**
 * A live access token as someone presents it, opaque or a JWT this server signed (found by its
 * `jti`), with the JWT's `jti`; undefined when it is unknown, malformed, expired or revoked.
 * Introspection's lookup, and a token exchange's (SPEC §4.15).
 */
export async function findPresentedAccessToken(
  ctx: AppContext,
  token: string,
  now: number,
): Promise<{ info: AccessTokenInfo; jti: string | null } | undefined> {
  const jwt = await readJwtAccessToken(ctx, token, { acceptExpired: false });
  const hash = jwt === null ? hashIfWellFormed('access', token) : jwt.hash;
  const info = hash === null ? undefined : await findLiveAccessToken(ctx.db, hash, now);
  return info && { info, jti: jwt?.jti ?? null };
}

function describe(info: AccessTokenInfo, tokenType: NonNullable<Introspection['token_type']>, ctx: AppContext): Introspection {
  return {
    active: true,
    scope: info.scopes,
    client_id: info.client_id,
    // The user's id on the API (SPEC §3); a client_credentials token acts as its client.
    ...(info.username === null ? { sub: info.client_id } : { username: info.username, sub: accountUri(info.username, ctx.config) }),
    token_type: tokenType,
    exp: Math.floor(info.expires_at / 1000),
    iat: Math.floor(info.created_at / 1000),
    iss: ctx.config.publicUrl,
    aud: info.resource_uri ?? builtinResourceUri(ctx),
    ...loginClaims(loginOf(info)),
    ...(info.dpop_jkt === null ? {} : { cnf: { jkt: info.dpop_jkt } }),
    ...(info.act === null ? {} : { act: JSON.parse(info.act) as Actor }),
  };
}
