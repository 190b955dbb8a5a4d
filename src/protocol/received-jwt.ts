/**
 * The one verifier for JWTs others sign (SPEC §4.11): `private_key_jwt` client assertions,
 * ID-JAGs, workloads' tokens, and the signature step of h's publisher grant tokens. jose's
 * `jwtVerify` does the work; this module fixes what every caller shares — one leeway, the
 * algorithm list checked before any key is looked at, keys only from the caller (never from
 * the token's header: no `jwk`, `jku`, `x5u`, `x5c`), `none` never — and adds the rules
 * jose has no option for (`iat` not in the future, an exact single audience, a maximum
 * lifetime, a maximum time to expiry).
 *
 * The checks, in this order (the first that fails is the one reported):
 *   1. `algorithm`  the header's `alg` is one of the policy's (jose, before the key is chosen);
 *   2. `signature`  by the key, or the key the key set's `kid`/`alg` selects (no key: the same);
 *   3. `format`     the payload is a JSON object (or the JWS is malformed: jose reports that first);
 *   4. `typ`        the header's `typ` (media type rules: case-insensitive, `application/` optional);
 *   5. `missing`    each required claim is present (`claim` names it);
 *   6. `iss`, `sub` equal the policy's; `aud` holds one of the policy's audiences;
 *   7. `malformed`  `iat`, `nbf`, `exp` are numbers when present (`claim` names it);
 *   8. `iat`        not in the future;
 *   9. `nbf`        not in the future;  10. `exp`  not past;
 *  11. `aud`        with `exactAudience`, exactly the one audience (a string, or an array of one);
 *  12. `lifetime`   `exp − iat` at most `maxLifetimeSeconds` (`iat` then required);
 *  13. `expires-in` `exp` at most `maxExpiresInSeconds` from now.
 * Every comparison with the clock (8, 9, 10, 13) allows RECEIVED_JWT_LEEWAY_SECONDS of skew,
 * and only that; the lifetime compares two of the token's own times, so it allows none.
 *
 * Refusals are ReceivedJwtRefused, naming the check; each profile turns it into its own
 * answer (its texts are its callers' contract). Errors that are not jose's — a key set that
 * could not be fetched — pass through unchanged, for the caller to name.
 */
import { errors, jwtVerify, type JWK, type JWTHeaderParameters, type JWTPayload, type JWTVerifyGetKey, type JWTVerifyOptions } from 'jose';
import type { KeyObject, webcrypto } from 'node:crypto';

/** The clock skew allowed on `exp`, `nbf`, `iat` and the lifetime rules of every JWT others sign (h's own: SPEC §4.11). */
export const RECEIVED_JWT_LEEWAY_SECONDS = 10;

/** What a received JWT must satisfy. */
export interface ReceivedJwtPolicy {
  /** The only algorithms accepted; never `none`, and never an HS* one with a key set (a public key is no HMAC secret). */
  readonly algorithms: readonly string[];
  /** The header's `typ`, when the profile fixes one. */
  readonly typ?: string;
  readonly issuer?: string;
  readonly subject?: string;
  /** `aud` (a string or an array of strings) must hold one of these. */
  readonly audience?: readonly string[];
  /** `aud` must be exactly the one audience given (SPEC: "equals … exactly"): not an array naming others too. */
  readonly exactAudience?: boolean;
  /** Claims that must be present (`exp`, `jti`, …). */
  readonly requiredClaims?: readonly string[];
  /** `exp − iat` at most this; `iat` is then required. */
  readonly maxLifetimeSeconds?: number;
  /** `exp` at most this far from now. */
  readonly maxExpiresInSeconds?: number;
  /** Epoch ms: the time the rules are checked at. */
  readonly now: number;
}

export type ReceivedJwtCheck =
  'algorithm' | 'signature' | 'format' | 'typ' | 'missing' | 'iss' | 'sub' | 'aud' | 'malformed' | 'iat' | 'nbf' | 'exp' | 'lifetime' | 'expires-in';

/** Why a received JWT was refused: `check` names the rule, `claim` the claim for `missing` and `malformed`; `reason` is for the log only. */
export class ReceivedJwtRefused extends Error {
  override name = 'ReceivedJwtRefused';
  readonly check: ReceivedJwtCheck;
  readonly claim: string | undefined;
  readonly reason: string;
  constructor(check: ReceivedJwtCheck, reason: string, claim?: string) {
    super(`${check}: ${reason}`);
    this.check = check;
    this.claim = claim;
    this.reason = reason;
  }
}

/** A key the caller chose: the client's secret (publisher grant tokens), a public key, or a key set's resolution. */
export type ReceivedJwtKey = Uint8Array | KeyObject | webcrypto.CryptoKey | JWK | JWTVerifyGetKey;

export interface ReceivedJwt {
  readonly header: JWTHeaderParameters;
  readonly payload: JWTPayload;
}

/** Verifies `jws` with `key` under `policy`; throws ReceivedJwtRefused (or what the key set threw). */
export async function verifyReceivedJwt(jws: string, key: ReceivedJwtKey, policy: ReceivedJwtPolicy): Promise<ReceivedJwt> {
  const { algorithms } = policy;
  // Programming errors, not refusals: a policy that would let `none` in, or a public key serve as an HMAC secret.
  if (algorithms.length === 0 || algorithms.includes('none')) throw new TypeError('a received JWT policy must name its algorithms, never none');
  if (typeof key === 'function' && algorithms.some((alg) => alg.startsWith('HS'))) throw new TypeError('HS* is never verified with a key set');
  const requiredClaims = [...(policy.requiredClaims ?? [])];
  if (policy.maxLifetimeSeconds !== undefined) requiredClaims.push('iat', 'exp');
  if (policy.maxExpiresInSeconds !== undefined) requiredClaims.push('exp');
  const options: JWTVerifyOptions = {
    algorithms: [...algorithms],
    typ: policy.typ,
    issuer: policy.issuer,
    subject: policy.subject,
    audience: policy.audience === undefined ? undefined : [...policy.audience],
    requiredClaims,
    clockTolerance: RECEIVED_JWT_LEEWAY_SECONDS,
    currentDate: new Date(policy.now),
  };
  // In whole seconds, as jose compares `nbf` and `exp`.
  const now = Math.floor(policy.now / 1000);
  let verified: ReceivedJwt;
  try {
    const { payload, protectedHeader } = typeof key === 'function' ? await jwtVerify(jws, key, options) : await jwtVerify(jws, key, options);
    verified = { header: protectedHeader, payload };
  } catch (error) {
    // An `iat` in the future comes before `nbf` and `exp` (h's order): jose has no such rule, so its time refusal waits for it.
    const timeCheck = error instanceof errors.JWTExpired || (error instanceof errors.JWTClaimValidationFailed && error.claim === 'nbf');
    if (timeCheck && issuedInFuture(error.payload, now)) throw new ReceivedJwtRefused('iat', 'iat is in the future');
    throw refusal(error);
  }
  const { payload } = verified;
  if (issuedInFuture(payload, now)) throw new ReceivedJwtRefused('iat', 'iat is in the future');
  if (policy.exactAudience) {
    const aud = Array.isArray(payload.aud) && payload.aud.length === 1 ? payload.aud[0] : payload.aud;
    if (policy.audience?.length !== 1 || aud !== policy.audience[0]) throw new ReceivedJwtRefused('aud', 'aud is not exactly the one audience');
  }
  const exp = payload.exp;
  if (policy.maxLifetimeSeconds !== undefined && exp! - payload.iat! > policy.maxLifetimeSeconds) {
    throw new ReceivedJwtRefused('lifetime', `exp − iat is over ${policy.maxLifetimeSeconds} s`);
  }
  if (policy.maxExpiresInSeconds !== undefined && exp! > now + policy.maxExpiresInSeconds + RECEIVED_JWT_LEEWAY_SECONDS) {
    throw new ReceivedJwtRefused('expires-in', `exp is more than ${policy.maxExpiresInSeconds} s away`);
  }
  return verified;
}

function issuedInFuture(payload: JWTPayload, now: number): boolean {
  return typeof payload.iat === 'number' && payload.iat > now + RECEIVED_JWT_LEEWAY_SECONDS;
}

/** jose's refusal as the check it failed; anything else (a key set that could not be had) as it is. */
function refusal(error: unknown): unknown {
  if (error instanceof errors.JOSEAlgNotAllowed) return new ReceivedJwtRefused('algorithm', error.message);
  if (error instanceof errors.JWTExpired) return new ReceivedJwtRefused('exp', error.message);
  if (error instanceof errors.JWTClaimValidationFailed) {
    if (error.reason === 'missing') return new ReceivedJwtRefused('missing', error.message, error.claim);
    if (error.reason === 'invalid') return new ReceivedJwtRefused('malformed', error.message, error.claim);
    const claim = error.claim as ReceivedJwtCheck;
    return new ReceivedJwtRefused(['typ', 'iss', 'sub', 'aud', 'nbf'].includes(claim) ? claim : 'format', error.message, error.claim);
  }
  if (error instanceof errors.JWTInvalid || error instanceof errors.JWSInvalid) return new ReceivedJwtRefused('format', error.message);
  // A bad signature, no key for the header's kid and alg, or a key that does not fit the algorithm.
  if (error instanceof errors.JOSEError) return new ReceivedJwtRefused('signature', `${error.code}: ${error.message}`);
  return error;
}
