/**
 * What the jwt-bearer grant's profiles share (SPEC §4.11): the grant type, reading an
 * assertion before anything is verified, and what a verified assertion says. The assertion's
 * `iss` picks the profile: a jwt-bearer client's ID (h's publisher grant tokens,
 * publisher.ts), or a trusted issuer's URL (ID-JAG, id-jag.ts; workload identity,
 * workload.ts). Nothing here logs or audits the assertion itself: only its issuer, subject
 * and `jti` (shortened) ever leave this module family.
 */
import { createHash } from 'node:crypto';
import { decodeJwt, decodeProtectedHeader, type JWTPayload, type ProtectedHeaderParameters } from 'jose';
import { cut } from '../../input-error.ts';
import type { Client, TrustedIssuer, User } from '../../store/schema.ts';
import { OAuthError, invalidGrant, invalidRequest } from '../../protocol/errors.ts';

/** The ID-JAG profile's name in `authorization_grant_profiles_supported`. */
export const ID_JAG_PROFILE = 'urn:ietf:params:oauth:grant-profile:id-jag';
/** The most characters of an issuer, subject or jti the audit trail keeps: they come from outside. */
const AUDITED_LENGTH = 200;

/** An assertion decoded, not verified: what picks the profile. */
export interface ReadAssertion {
  readonly jws: string;
  readonly header: ProtectedHeaderParameters;
  readonly claims: JWTPayload;
}

/**
 * Decodes the assertion without trusting it. Anything that is not a compact JWS with a JSON
 * header and claims is h's "Invalid JWT grant token format." (invalid_request).
 */
export function readAssertion(jws: string): ReadAssertion {
  try {
    if (jws.split('.').length !== 3) throw new Error('not a compact JWS');
    return { jws, header: decodeProtectedHeader(jws), claims: decodeJwt(jws) };
  } catch {
    throw invalidRequest('Invalid JWT grant token format.', 'assertion is not a JWT');
  }
}

export type ProfileName = 'publisher' | 'id-jag' | 'workload';

/** What a verified assertion grants, for the grant's `issue`. */
export interface VerifiedAssertion {
  readonly profile: ProfileName;
  /** Its `iss`. */
  readonly issuer: string;
  /** The client the tokens are issued to. */
  readonly client: Client;
  /** The person they speak for; null for a workload (the client acting as itself). */
  readonly user: User | null;
  /** Its `sub`, for the audit trail. */
  readonly subject: string;
  readonly jti: string | null;
  /** What single use is recorded under: the `jti`, or the assertion's hash when it has none; null: not single use (a workload's token without `jti`). */
  readonly replayId: string | null;
  /** Until when (epoch ms) a replay is refused. */
  readonly replayUntil: number;
  /** The trusted issuer, for ID-JAGs and workloads. */
  readonly trusted: TrustedIssuer | null;
  /** The assertion's `scope` claim, split (ID-JAG); null when it has none. */
  readonly assertedScopes: readonly string[] | null;
  /** The assertion's `resource` claim (ID-JAG); null when it has none. */
  readonly assertedResource: string | null;
}

/**
 * The assertion's hash: what a grant token without `jti` is recorded under. Of its signing
 * input (header and claims) only: the signature's base64url has spellings that decode alike
 * (the last character's unused bits), so hashing it would let a replay pass as new. An HS256
 * signature is a function of the signing input, so nothing else identifies the token.
 */
export function assertionHash(jws: string): string {
  return createHash('sha256')
    .update(jws.slice(0, jws.lastIndexOf('.')))
    .digest('base64url');
}

/** A claim as the audit trail may keep it: a short string, or null. */
export function audited(value: unknown): string | null {
  if (typeof value !== 'string' && typeof value !== 'number') return null;
  return cut(String(value), AUDITED_LENGTH);
}

/** A refusal that names the check: invalid_grant unless said otherwise. */
export function refused(description: string, detail?: string): OAuthError {
  return invalidGrant(description, detail);
}

/** The `aud` claim as a list (RFC 7519 §4.1.3: a string or an array of strings); null when absent or malformed. */
export function audiences(claims: JWTPayload): string[] | null {
  const aud = claims.aud;
  if (typeof aud === 'string') return [aud];
  if (Array.isArray(aud) && aud.every((a) => typeof a === 'string')) return aud;
  return null;
}

/** A NumericDate claim (RFC 7519 §2): a finite number, or undefined when absent; null when present but not a number. */
export function numericDate(claims: JWTPayload, name: 'exp' | 'nbf' | 'iat'): number | undefined | null {
  const value = (claims as Record<string, unknown>)[name];
  if (value === undefined) return undefined;
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}
