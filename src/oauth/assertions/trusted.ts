/**
 * What the profiles of trusted issuers share (SPEC §4.11): their signature, checked with the
 * issuer's published keys (remote-keys.ts: its `jwks_uri`, or discovered; the guarded fetch),
 * with asymmetric algorithms only — so neither `alg: none` nor an HMAC keyed with the
 * issuer's public key (key confusion) gets as far as a key — and the time rules.
 */
import { compactVerify } from 'jose';
import type { AppContext } from '../../context.ts';
import type { TrustedIssuer } from '../../store/schema.ts';
import { ASSERTION_ALGS, RemoteKeysUnavailable } from './remote-keys.ts';
import { numericDate, refused, type ReadAssertion } from './profiles.ts';

/** Clock skew allowed on each time claim of a trusted issuer's assertion. */
export const ISSUER_LEEWAY_SECONDS = 30;

/** Checks the assertion's signature with the issuer's keys; an unreachable or hostile key set refuses it. */
export async function verifyIssuerSignature(read: ReadAssertion, trusted: TrustedIssuer, ctx: AppContext): Promise<void> {
  const alg = read.header.alg;
  if (typeof alg !== 'string' || !(ASSERTION_ALGS as readonly string[]).includes(alg)) {
    throw refused(`the assertion's algorithm must be one of ${ASSERTION_ALGS.join(', ')}`, `alg ${String(alg).slice(0, 20)} from a trusted issuer`);
  }
  try {
    const keys = await ctx.remoteKeys.issuerKeySet(trusted.issuer, trusted.jwks_uri, { allowPrivateAddress: trusted.allow_private_address === 1 });
    await compactVerify(read.jws, keys.getKey, { algorithms: [...ASSERTION_ALGS] });
  } catch (error) {
    if (error instanceof RemoteKeysUnavailable) throw refused("the issuer's keys could not be obtained", error.reason);
    throw refused("the assertion's signature is invalid", error instanceof Error ? error.name : undefined);
  }
}

/** The time rules every trusted issuer's assertion follows: `exp` required and not past, `iat` and `nbf` (when sent) not in the future. Returns `exp`. */
export function checkTimes(read: ReadAssertion, ctx: AppContext): { exp: number; iat: number | undefined } {
  const now = ctx.now() / 1000;
  const exp = numericDate(read.claims, 'exp');
  const iat = numericDate(read.claims, 'iat');
  const nbf = numericDate(read.claims, 'nbf');
  if (exp === undefined) throw refused('the assertion has no expiry (exp)');
  if (exp === null || iat === null || nbf === null) throw refused('the assertion has a time claim (exp, iat, nbf) that is not a number');
  if (exp <= now - ISSUER_LEEWAY_SECONDS) throw refused('the assertion has expired');
  if (iat !== undefined && iat > now + ISSUER_LEEWAY_SECONDS) throw refused('the assertion was issued in the future (iat)');
  if (nbf !== undefined && nbf > now + ISSUER_LEEWAY_SECONDS) throw refused('the assertion is not yet valid (nbf)');
  return { exp, iat };
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
