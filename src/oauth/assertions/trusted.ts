/**
 * What the profiles of trusted issuers share (SPEC §4.11): their verification, by the one
 * verifier of received JWTs (protocol/received-jwt.ts) with the issuer's published keys
 * (remote-keys.ts: its `jwks_uri`, or discovered; the guarded fetch) and asymmetric
 * algorithms only — so neither `alg: none` nor an HMAC keyed with the issuer's public key
 * (key confusion) gets as far as a key — and the refusal each failed check is answered with.
 */
import type { JWTPayload } from 'jose';
import type { AppContext } from '../../context.ts';
import { ReceivedJwtRefused, verifyReceivedJwt, type ReceivedJwtCheck, type ReceivedJwtPolicy } from '../../protocol/received-jwt.ts';
import type { TrustedIssuer } from '../../store/schema.ts';
import { ASSERTION_ALGS, RemoteKeysUnavailable } from './remote-keys.ts';
import { refused, type ReadAssertion } from './profiles.ts';

/** What a profile asks of its issuers' assertions: the verifier's rules but the algorithms and the clock. */
export type IssuerPolicy = Omit<ReceivedJwtPolicy, 'algorithms' | 'now' | 'issuer'>;

/** The profile's own descriptions, where the check's default would not say what it wants. */
export type IssuerTexts = Partial<Record<ReceivedJwtCheck, string>>;

const DEFAULT_TEXTS: Record<ReceivedJwtCheck, string> = {
  algorithm: `the assertion's algorithm must be one of ${ASSERTION_ALGS.join(', ')}`,
  signature: "the assertion's signature is invalid",
  format: "the assertion's signature is invalid",
  typ: "the assertion's type (typ) is not the one this profile requires",
  missing: 'the assertion lacks a required claim',
  iss: "the assertion's issuer (iss) is not this issuer",
  sub: "the assertion's subject (sub) is not the one required",
  aud: "the assertion's audience (aud) is not this server",
  malformed: 'the assertion has a time claim (exp, iat, nbf) that is not a number',
  iat: 'the assertion was issued in the future (iat)',
  nbf: 'the assertion is not yet valid (nbf)',
  exp: 'the assertion has expired',
  lifetime: "the assertion's lifetime (exp - iat) is too long",
  'expires-in': 'the assertion expires too far in the future',
};

/** A missing claim's description: by the claim, or as the check on it would say. */
const MISSING: Record<string, string> = {
  exp: 'the assertion has no expiry (exp)',
  iat: 'the assertion has no issue time (iat)',
  jti: 'the assertion has no jti',
};

/**
 * Verifies the assertion with the issuer's keys under the profile's policy; returns its
 * verified claims. An unreachable or hostile key set refuses it.
 */
export async function verifyIssuerAssertion(
  read: ReadAssertion,
  trusted: TrustedIssuer,
  ctx: AppContext,
  policy: IssuerPolicy,
  texts: IssuerTexts = {},
): Promise<JWTPayload> {
  try {
    const keys = await ctx.remoteKeys.issuerKeySet(trusted.issuer, trusted.jwks_uri, { allowPrivateAddress: trusted.allow_private_address === 1 });
    return (await verifyReceivedJwt(read.jws, keys.getKey, { ...policy, algorithms: ASSERTION_ALGS, issuer: trusted.issuer, now: ctx.now() })).payload;
  } catch (error) {
    if (error instanceof RemoteKeysUnavailable) throw refused("the issuer's keys could not be obtained", error.reason);
    // Anything else (a key in the issuer's set that does not import): no key verified it.
    if (!(error instanceof ReceivedJwtRefused)) throw refused(DEFAULT_TEXTS.signature, error instanceof Error ? error.name : undefined);
    const { check, claim } = error;
    const text = (name: ReceivedJwtCheck) => texts[name] ?? DEFAULT_TEXTS[name];
    if (check === 'missing') {
      const description = claim === 'aud' || claim === 'sub' ? text(claim) : (MISSING[claim ?? ''] ?? `the assertion has no ${claim}`);
      throw refused(description, error.reason);
    }
    const detail = check === 'algorithm' ? `alg ${String(read.header.alg).slice(0, 20)} from a trusted issuer` : error.reason;
    throw refused(text(check), detail);
  }
}

/** A string claim, or undefined when absent or not a non-empty string. */
export function stringClaim(claims: Record<string, unknown>, name: string): string | undefined {
  const value = claims[name];
  return typeof value === 'string' && value !== '' ? value : undefined;
}

/** Whether a string from outside may be looked up: no control characters (PostgreSQL refuses NUL), not huge. */
export function isLookupSafe(value: string): boolean {
  // eslint-disable-next-line no-control-regex
  return value.length <= 2000 && !/[\u0000-\u001f\u007f]/.test(value);
}
