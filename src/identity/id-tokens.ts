/**
 * OpenID Connect ID tokens (SPEC §4.10): what identifies one, and reading one back as an
 * `id_token_hint` (authorization requests and RP-initiated logout alike).
 */
import type { AppContext } from '../context.ts';

/** The `typ` of an ID token's header (SPEC §4.10). */
export const ID_TOKEN_TYPE = 'JWT';

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
export async function readIdTokenHint(ctx: AppContext, token: string): Promise<IdTokenHint | null> {
  const claims = await ctx.keys.verifyJwt(token, { typ: ID_TOKEN_TYPE, ignoreExpiry: true });
  if (claims === null || claims.iss !== ctx.config.publicUrl || typeof claims.sub !== 'string') return null;
  const aud = Array.isArray(claims.aud) ? (claims.aud.length === 1 ? claims.aud[0] : undefined) : claims.aud;
  if (typeof aud !== 'string') return null;
  return { sub: claims.sub, clientId: aud, sid: typeof claims.sid === 'string' ? claims.sid : null };
}
