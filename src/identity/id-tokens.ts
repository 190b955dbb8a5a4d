/**
 * OpenID Connect ID tokens (SPEC §4.10): the identity claims a person's scopes release (in
 * ID tokens and at userinfo alike), minting an ID token, and reading one back as an
 * `id_token_hint` (authorization requests and RP-initiated logout alike).
 */
import { createHash } from 'node:crypto';
import { accountUri } from '../config.ts';
import type { AppContext } from '../context.ts';
import { userGroups } from '../store/groups.ts';
import { loginClaims, type Login } from '../login.ts';
import type { SigningAlg } from '../store/schema.ts';
import { findUserById } from '../store/users.ts';

/** The `typ` of an ID token's header (SPEC §4.10). */
export const ID_TOKEN_TYPE = 'JWT';

/** The algorithm of a client's ID tokens unless it asks for another (OIDC Core §3.1.3.7; SPEC §4.10). */
export const DEFAULT_ID_TOKEN_ALG: SigningAlg = 'RS256';

/** The scope that makes a request an OpenID Connect one, and a grant's tokens come with an ID token. */
export const OPENID_SCOPE = 'openid';

/** What the identity scopes release about a person (SPEC §4.10); `sub` always. */
export interface IdentityClaims {
  sub: string;
  preferred_username?: string;
  name?: string;
  email?: string;
  email_verified?: boolean;
  groups?: string[];
}

/**
 * The identity claims of the user for these granted scopes: `profile` → `preferred_username`
 * and `name` (when set), `email` → `email` and `email_verified`, `groups` → `groups` (`[]`
 * when none). The one source of them for ID tokens and userinfo; null when the user is gone.
 */
export async function identityClaims(ctx: AppContext, userId: string, scopes: readonly string[]): Promise<IdentityClaims | null> {
  const user = await findUserById(ctx.db, userId);
  if (!user) return null;
  return {
    sub: accountUri(user.username, ctx.config),
    ...(scopes.includes('profile') ? { preferred_username: user.username, ...(user.display_name ? { name: user.display_name } : {}) } : {}),
    // A person with no address (created through a provider that gave none) has no email claims.
    ...(scopes.includes('email') && user.email !== '' ? { email: user.email, email_verified: user.email_verified === 1 } : {}),
    ...(scopes.includes('groups') ? { groups: await userGroups(ctx.db, user.id) } : {}),
  };
}

/** What an ID token is about, besides the access token it comes with. */
export interface IdTokenSubject {
  clientId: string;
  /** The client's `id_token_signed_response_alg`. */
  alg: SigningAlg;
  /** The person's identity claims (`identityClaims`). */
  identity: IdentityClaims;
  /** The login that approved the grant; null only for grants older than its record. */
  login: Login | null;
  /** The authentication request's, on the code exchange only. */
  nonce: string | null;
}

/**
 * An ID token (OIDC Core §2, §3.1.3.6): signed by the active key of the client's algorithm,
 * `at_hash` binding it to the access token it is issued with.
 */
export async function mintIdToken(ctx: AppContext, subject: IdTokenSubject, accessToken: string, now: number): Promise<string> {
  const iat = Math.floor(now / 1000);
  const { login } = subject;
  const claims = {
    iss: ctx.config.publicUrl,
    ...subject.identity,
    aud: subject.clientId,
    azp: subject.clientId,
    iat,
    exp: iat + ctx.config.idTokenTtl,
    ...loginClaims(login),
    ...(login?.sid ? { sid: login.sid } : {}),
    ...(subject.nonce === null ? {} : { nonce: subject.nonce }),
    at_hash: accessTokenHash(accessToken),
  };
  return ctx.keys.signJwt(subject.alg, { typ: ID_TOKEN_TYPE }, claims);
}

/**
 * `at_hash` (OIDC Core §3.1.3.6): the left half of the hash of the access token's ASCII
 * octets, base64url — SHA-256 for both algorithms Gatehouse signs with (ES256, RS256).
 */
function accessTokenHash(accessToken: string): string {
  const digest = createHash('sha256').update(accessToken, 'ascii').digest();
  return digest.subarray(0, digest.length / 2).toString('base64url');
}

/** What an `id_token_hint` says: whom it was issued to, for which client, in which session. */
export interface IdTokenHint {
  /** The userid (`acct:` URI). */
  sub: string;
  /** The client ID it was issued to (its `aud`). */
  clientId: string;
  /** The login session it was issued in, when it names one. */
  sid: string | null;
}

/**
 * An ID token this server issued, read as a hint: signature checked against the published
 * keys (a revoked key's tokens are refused), issuer ours, expiry ignored; null for anything
 * else, a token signed by someone else included.
 */
export function readIdTokenHint(ctx: AppContext, token: string): Promise<IdTokenHint | null> {
  return readIdToken(ctx, token, { acceptExpired: true });
}

/** As `readIdTokenHint`, and expired ones are null unless `acceptExpired`: a token exchange's subject (SPEC §4.15) must be current. */
export async function readIdToken(ctx: AppContext, token: string, options: { readonly acceptExpired: boolean }): Promise<IdTokenHint | null> {
  const claims = await ctx.keys.verifyJwt(token, { typ: ID_TOKEN_TYPE, ignoreExpiry: options.acceptExpired });
  if (claims === null || claims.iss !== ctx.config.publicUrl || typeof claims.sub !== 'string') return null;
  const aud = Array.isArray(claims.aud) ? (claims.aud.length === 1 ? claims.aud[0] : undefined) : claims.aud;
  if (typeof aud !== 'string') return null;
  return { sub: claims.sub, clientId: aud, sid: typeof claims.sid === 'string' ? claims.sid : null };
}
