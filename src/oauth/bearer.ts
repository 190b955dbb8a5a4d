/**
 * Access token checks for the resource side: bearer tokens, and DPoP-bound ones presented with
 * a proof of their key. @see RFC 6750 §2.1, §3.1; RFC 9449 §7
 */
import { liveAccessTokenHashes } from '../store/liveness.ts';
import type { BearerTokenInfo } from '../store/tokens.ts';
import { hashIfWellFormed } from '../tokens.ts';
import type { AppContext } from '../context.ts';
import { OAuthError } from '../protocol/errors.ts';
import { DpopRefusal, proofOf, verifyProof, type DpopHeader } from './dpop.ts';
import { BUILTIN_RESOURCE_ID } from './resources.ts';

export type { BearerTokenInfo };

/** The token of an `Authorization: Bearer …` header, or undefined. */
export function bearerToken(authorization: string | undefined): string | undefined {
  const match = authorization === undefined ? null : /^Bearer +([\x21-\x7e]+) *$/i.exec(authorization);
  return match?.[1];
}

/** What a proof sent with a DPoP-bound token must be for: the request's `DPoP` headers, its method and its URLs. */
export interface ProofRequest {
  proofs: DpopHeader;
  method: string;
  urls: readonly string[];
}

/** An access token as a request presents it; `proof` when it came as `Authorization: DPoP` (RFC 9449 §7.1). */
export interface PresentedToken {
  token: string;
  proof?: ProofRequest;
}

/** The access token of an `Authorization: Bearer …` or `Authorization: DPoP …` header, or undefined. */
export function presentedToken(authorization: string | undefined, proof: ProofRequest): PresentedToken | undefined {
  const match = authorization === undefined ? null : /^(Bearer|DPoP) +([\x21-\x7e]+) *$/i.exec(authorization);
  if (match === null) return undefined;
  const token = match[2]!;
  return match[1]!.toLowerCase() === 'dpop' ? { token, proof } : { token };
}

/**
 * The live access token's grant and user, for the service's own API (`/api/profile`, `/ws`):
 * `invalid_token` for a missing, unknown, expired or revoked token, and for a token meant for
 * another resource server (SPEC §4.4: its audience is not this API).
 */
export async function authenticateAccessToken(ctx: AppContext, presented: PresentedToken | undefined): Promise<BearerTokenInfo> {
  if (presented === undefined) throw new OAuthError('invalid_token', 'an access token is required');
  return checkAccessToken(ctx, presented);
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
export async function authenticateBearer(ctx: AppContext, presented: PresentedToken | undefined): Promise<BearerTokenInfo> {
  if (presented === undefined) throw new NoBearerToken();
  return checkAccessToken(ctx, presented);
}

/**
 * The token's check, and its binding's: a DPoP-bound token only as `Authorization: DPoP` with a
 * proof by its key for this request (RFC 9449 §7.1) — a copied token, sent as `Bearer` or with a
 * proof by another key, is refused — and an unbound one only as `Bearer`. A token presented as
 * DPoP is refused with a `DPoP` challenge (http/errors.ts).
 */
async function checkAccessToken(ctx: AppContext, presented: PresentedToken): Promise<BearerTokenInfo> {
  const { token, proof } = presented;
  const invalid = (description: string, detail?: string) =>
    proof === undefined ? new OAuthError('invalid_token', description, detail) : new DpopRefusal('invalid_token', description, 'resource', detail);
  const hash = hashIfWellFormed('access', token);
  const info = hash === null ? undefined : await ctx.bearerTokens.find(hash, ctx.now());
  if (!info) throw invalid('the access token is invalid, expired or revoked');
  if (info.resource_id !== BUILTIN_RESOURCE_ID) throw invalid('the access token is for another resource server', 'audience mismatch');
  if (proof === undefined) {
    if (info.dpop_jkt !== null) {
      throw new DpopRefusal(
        'invalid_token',
        'this access token is bound to a key: send it as "Authorization: DPoP" with a DPoP proof',
        'resource',
        'bound token as Bearer',
      );
    }
    return info;
  }
  if (info.dpop_jkt === null) throw invalid('this access token is not bound to a key: send it as "Authorization: Bearer"');
  const sent = proofOf(proof.proofs, 'resource');
  if (sent === undefined) throw new DpopRefusal('invalid_dpop_proof', 'send a DPoP proof with "Authorization: DPoP"', 'resource');
  const { jkt } = await verifyProof(ctx, sent, { method: proof.method, urls: proof.urls, accessToken: token }, 'resource');
  if (jkt !== info.dpop_jkt) throw new DpopRefusal('invalid_dpop_proof', 'the DPoP proof is signed by another key than the token is bound to', 'resource');
  return info;
}

/**
 * 403 `insufficient_scope`, naming the scope the request needs in its challenge (RFC 6750 §3),
 * under the scheme the token was presented with (a DPoP-bound one's: `DPoP`, RFC 9449 §7.1).
 */
export class InsufficientScope extends OAuthError {
  readonly scope: string;
  readonly scheme: 'Bearer' | 'DPoP';
  constructor(scope: string, token: Pick<BearerTokenInfo, 'dpop_jkt'>) {
    super('insufficient_scope', `this request needs the "${scope}" scope`);
    this.scope = scope;
    this.scheme = token.dpop_jkt === null ? 'Bearer' : 'DPoP';
  }
}

/** `scopes`: the token's, as `splitScopes` gives them (the caller answers with them too). */
export function requireScope(token: Pick<BearerTokenInfo, 'dpop_jkt'>, scopes: readonly string[], scope: string): void {
  if (!scopes.includes(scope)) throw new InsufficientScope(scope, token);
}

/**
 * Which of these access tokens (by hash) are still live: one query for the tokens behind
 * every open WebSocket, so that a revocation the fan-out missed still closes them.
 */
export function liveAccessTokens(ctx: AppContext, hashes: readonly string[]): Promise<Set<string>> {
  return liveAccessTokenHashes(ctx.db, hashes, ctx.now());
}
