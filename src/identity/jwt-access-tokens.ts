/**
 * JWT access tokens (RFC 9068, SPEC §4.9): minted for a resource server whose token format is
 * `jwt`, and read back when one comes to introspection or revocation.
 *
 * A JWT's `jti` is stored hashed where an opaque token's hash would be, so every lookup of an
 * access token — introspection, revocation — reaches the JWT's row by the hash of its `jti`, and
 * revoking the grant reaches the JWT like any access token. Offline verifiers cannot know of a
 * revocation, which is why a JWT's lifetime is short (ACCESS_TOKEN_TTL_RANGE).
 */
import type { AppContext } from '../context.ts';
import { loginClaims, type Login } from '../login.ts';
import { hashIfWellFormed, mintToken } from '../tokens.ts';
import type { SigningAlg } from './key-schedule.ts';

/** The `typ` of a JWT access token's header (RFC 9068 §2.1). */
export const JWT_ACCESS_TOKEN_TYPE = 'at+jwt';

/** What a JWT access token says, given whole by the grant that mints it. */
export interface JwtAccessTokenClaims {
  /** The userid, or for a client acting as itself its client ID. */
  readonly sub: string;
  /** The resource server's URI. */
  readonly aud: string;
  readonly clientId: string;
  readonly scope: string;
  /** The login that approved the grant (`auth_time`, `amr`); null for a client acting as itself. */
  readonly login: Login | null;
  /** The thumbprint of the key the token is bound to (`cnf.jkt`, RFC 9449 §6.1); null for a bearer token. */
  readonly jkt: string | null;
  /** Who acts for the person (RFC 8693 §4.1 `act`): a token exchange's; null otherwise. */
  readonly act: Actor | null;
}

/** RFC 8693 §4.1 `act`: the party acting for the person, and whoever it acts after (a token exchanged again). */
export interface Actor {
  readonly sub: string;
  readonly act?: Actor;
}

/**
 * A JWT access token (RFC 9068 §2.2) signed by the active key of `alg`: who it speaks for, for
 * which resource server, and nothing about the person beyond their userid; `jti` is 256 random
 * bits after the time it was made (tokens.ts `TIME_KEYED`). `hash` is what the store keeps: the
 * hash of its `jti`.
 */
export async function signJwtAccessToken(
  ctx: AppContext,
  alg: SigningAlg,
  what: JwtAccessTokenClaims,
  now: number,
  lifetime: number,
): Promise<{ token: string; hash: string }> {
  const { token: jti, hash } = mintToken('jwtId');
  const iat = Math.floor(now / 1000);
  const claims = {
    iss: ctx.config.publicUrl,
    sub: what.sub,
    aud: what.aud,
    client_id: what.clientId,
    scope: what.scope,
    jti,
    iat,
    exp: iat + lifetime,
    ...loginClaims(what.login),
    ...(what.jkt === null ? {} : { cnf: { jkt: what.jkt } }),
    ...(what.act === null ? {} : { act: what.act }),
  };
  return { token: await ctx.keys.signJwt(alg, { typ: JWT_ACCESS_TOKEN_TYPE }, claims), hash };
}

/**
 * The `jti` of a JWT access token this server signed, with a key it still publishes (any state:
 * a revoked key's tokens are unknown), and the hash its row is stored under; null for anything
 * else, opaque tokens included. Introspection describes only unexpired JWTs; revocation takes
 * an expired one too (`acceptExpired`), as it does an expired opaque token, since the grant's
 * refresh token may live on (SPEC §4.3).
 */
export async function readJwtAccessToken(
  ctx: AppContext,
  token: string,
  options: { readonly acceptExpired: boolean },
): Promise<{ jti: string; hash: string } | null> {
  if (token.split('.').length !== 3) return null;
  const claims = await ctx.keys.verifyJwt(token, { typ: JWT_ACCESS_TOKEN_TYPE, ignoreExpiry: options.acceptExpired });
  if (claims === null || claims.iss !== ctx.config.publicUrl || typeof claims.jti !== 'string') return null;
  const hash = hashIfWellFormed('jwtId', claims.jti);
  return hash === null ? null : { jti: claims.jti, hash };
}
