/** Minting the tokens of a token response. @see RFC 6749 §5.1 */
import { accountUri } from '../config.ts';
import type { AppContext } from '../context.ts';
import type { Login } from '../login.ts';
import type { IssuedTokens } from '../store/tokens.ts';
import { mintToken } from '../tokens.ts';
import { OPENID_SCOPE, identityClaims, mintIdToken } from '../identity/id-tokens.ts';
import { signJwtAccessToken, type Actor, type JwtAccessTokenClaims } from '../identity/jwt-access-tokens.ts';
import { OAuthError, invalidGrant } from '../protocol/errors.ts';
import type { DpopProof } from './dpop.ts';
import { accessTokenTtl, mayAskAnyScope, type TokenAudience } from './resources.ts';
import { joinScopes, splitScopes } from './scopes.ts';

/** What the token endpoint answers: tokens Gatehouse made, or what a token exchange hands over (an ID-JAG, a provider's token). */
export type TokenResponse = AccessTokenResponse | ExchangedResponse;

export interface AccessTokenResponse {
  /** `DPoP` when the access token is bound to a key (RFC 9449 §5). */
  token_type: 'Bearer' | 'DPoP';
  access_token: string;
  expires_in: number;
  refresh_token?: string;
  scope: string;
  /** When the scopes hold `openid` (SPEC §4.2, §4.10). */
  id_token?: string;
  /** A token exchange's (RFC 8693 §2.2.1): what `access_token` is. */
  issued_token_type?: string;
}

/** A token exchange's answer of a token Gatehouse did not make for itself (RFC 8693 §2.2.1, SPEC §4.15): an ID-JAG, a provider's access token. */
export interface ExchangedResponse {
  /** `N_A` for an ID-JAG, which is no access token; a provider's token is `Bearer`. */
  token_type: 'N_A' | 'Bearer';
  /** The ID-JAG or the provider's token, in the field RFC 8693 names so. */
  access_token: string;
  issued_token_type: string;
  /** Absent when the provider did not say when its token expires. */
  expires_in?: number;
  scope?: string;
  /** Never: an exchange gives no refresh token (SPEC §4.15). */
  refresh_token?: never;
}

export interface MintedTokenResponse {
  /** The hashes and expiry times the store keeps. */
  stored: IssuedTokens;
  /** The tokens themselves, for the client, once. */
  response: AccessTokenResponse;
}

/** Whom an access token speaks for: a person through a client, or a client acting as itself (`userId` and `username` null). */
export interface TokenSubject {
  clientId: string;
  userId: string | null;
  username: string | null;
  /** The login that approved the grant; null for a client acting as itself (and for grants older than its record). */
  login: Login | null;
}

/**
 * The keys a token response's tokens are bound to (DPoP, RFC 9449), by thumbprint: the access
 * token's, and the refresh token's — a public client's only (§5: a confidential client's
 * refresh token is bound by its authentication). Null: a bearer token.
 */
export interface KeyBinding {
  access: string | null;
  refresh: string | null;
}

/** What the proof of a request that starts a grant binds: the access token, and a public client's refresh token. */
export function proofBinding(proof: DpopProof | null, confidential: boolean): KeyBinding {
  const jkt = proof?.jkt ?? null;
  return { access: jkt, refresh: confidential ? null : jkt };
}

/** How a token response is made besides its audience, subject and scopes. */
export interface TokenOptions {
  /** With a refresh token. */
  withRefresh: boolean;
  /** The authentication request's `nonce`, for the ID token of a code exchange (SPEC §4.10). */
  nonce?: string | null;
  binding: KeyBinding;
  /** A token exchange's (SPEC §4.15): who acts for the person, and when the subject token ends (epoch ms), which the new token must not outlive. */
  exchange?: { act: Actor; notAfter: number };
}

/** `invalid_dpop_proof`: tokens that must be bound, asked for without a proof. */
export function proofRequired(whose: string): OAuthError {
  return new OAuthError('invalid_dpop_proof', `${whose} requires DPoP: send a DPoP proof with the token request`);
}

/** Throws `proofRequired` when the resource server takes only DPoP-bound tokens and the request proved no key (`jkt` null). */
export function requireProofFor(audience: Pick<TokenAudience, 'require_dpop'>, jkt: string | null): void {
  if (audience.require_dpop === 1 && jkt === null) throw proofRequired('the resource server');
}

/**
 * New tokens for one token response: an access token for `audience`, made as its resource
 * server says — opaque, or a JWT signed with the active key of its algorithm (RFC 9068) —
 * for its lifetime (`accessTokenTtl`), a refresh token (always opaque) when `withRefresh`,
 * and a person's ID token when the scopes hold `openid` (SPEC §4.10: `nonce` only on the code
 * exchange). Every grant mints its tokens here, so every grant that may carry `openid` —
 * code, device code, refresh — answers with an ID token.
 * JWT access tokens are made and read in identity/jwt-access-tokens.ts.
 */
export async function mintTokenResponse(
  ctx: AppContext,
  audience: TokenAudience,
  subject: TokenSubject,
  scopes: readonly string[],
  { withRefresh, nonce = null, binding, exchange }: TokenOptions,
): Promise<MintedTokenResponse> {
  requireProofFor(audience, binding.access);
  const now = ctx.now();
  const ttl = accessTokenTtl(audience, ctx.config);
  const lifetime = exchange === undefined ? ttl : Math.min(ttl, secondsUntil(exchange.notAfter, now));
  const scope = joinScopes(scopes);
  const act = exchange?.act ?? null;
  const access =
    audience.token_format === 'jwt'
      ? await signJwtAccessToken(ctx, audience.signing_alg, jwtClaims(ctx, audience, subject, scope, binding.access, act), now, lifetime)
      : mintToken('access');
  const refresh = withRefresh ? mintToken('refresh') : null;
  const stored: IssuedTokens = {
    accessHash: access.hash,
    accessExpiresAt: now + lifetime * 1000,
    refreshHash: refresh?.hash ?? null,
    refreshExpiresAt: now + ctx.config.refreshTokenTtl * 1000,
    scopes: scope,
    binding,
    act: act === null ? null : JSON.stringify(act),
  };
  // An exchange answers with the one token it was asked for (RFC 8693 §2.2.1).
  const { userId } = subject;
  const withIdToken = scopes.includes(OPENID_SCOPE) && exchange === undefined;
  const idToken = withIdToken && userId !== null ? await personsIdToken(ctx, subject, userId, scopes, nonce, access.token, now) : null;
  const response: AccessTokenResponse = {
    token_type: binding.access === null ? 'Bearer' : 'DPoP',
    access_token: access.token,
    expires_in: lifetime,
    ...(refresh ? { refresh_token: refresh.token } : {}),
    scope,
    ...(idToken === null ? {} : { id_token: idToken }),
  };
  return { stored, response };
}

/** The ID token of a person's token response, signed as their client asks. */
async function personsIdToken(
  ctx: AppContext,
  subject: TokenSubject,
  userId: string,
  scopes: readonly string[],
  nonce: string | null,
  accessToken: string,
  now: number,
): Promise<string> {
  const [client, identity] = await Promise.all([ctx.clients.find(subject.clientId), identityClaims(ctx, userId, scopes)]);
  // Deleted while the request ran: the write that follows would refuse it too.
  if (!client || !identity) throw invalidGrant('the grant is no longer valid', 'client deleted or user gone while the tokens were made');
  return mintIdToken(ctx, { clientId: client.id, alg: client.id_token_alg, identity, login: subject.login, nonce }, accessToken, now);
}

/** A JWT access token's claims: `sub` is the userid, or for a client acting as itself its client ID. */
function jwtClaims(
  ctx: AppContext,
  audience: TokenAudience,
  subject: TokenSubject,
  scope: string,
  jkt: string | null,
  act: Actor | null,
): JwtAccessTokenClaims {
  const sub = subject.username === null ? subject.clientId : accountUri(subject.username, ctx.config);
  return { sub, aud: audience.uri, clientId: subject.clientId, scope, login: subject.login, jkt, act };
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
