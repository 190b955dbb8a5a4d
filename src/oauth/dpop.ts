/**
 * DPoP proofs (RFC 9449, SPEC §4.14): the one check of a `DPoP` header, at the token endpoint
 * and on the resource side. A proof is a JWT the client signs with a key of its own and sends
 * with each request; a token issued with one is bound to that key's RFC 7638 thumbprint
 * (`jkt`), so a copy of the token is useless to whoever lacks the private key.
 *
 * Apart from protocol/received-jwt.ts on purpose: that verifier never takes a key from the
 * token's header, and a proof's key is exactly that — the `jwk` header, which jose's
 * `EmbeddedJWK` imports only when it is a public key. What proves possession is the signature
 * over this request (`htm`, `htu`, and on the resource side `ath`), made recently (`iat`), once
 * (`jti`, accepted once across every instance through the store the assertions use).
 *
 * @see RFC 9449 §4.3 (checking a proof), §7 (resource side), §11.1 (replay)
 */
import { createHash, createHmac, hkdfSync } from 'node:crypto';
import type { Config } from '../config.ts';
import { constantTimeEqual } from '../tokens.ts';
import { EmbeddedJWK, calculateJwkThumbprint, decodeProtectedHeader, errors, jwtVerify, type CryptoKey, type JWTPayload, type JWTVerifyGetKey } from 'jose';
import { LRUCache } from 'lru-cache';
import { OAuthError } from '../protocol/errors.ts';
import { consumeAssertion, type ReplayStore } from './assertions/replay.ts';

/** The proof algorithms accepted (metadata `dpop_signing_alg_values_supported`). */
export const DPOP_ALGORITHMS = ['ES256', 'RS256', 'PS256', 'EdDSA'] as const;

/** How far a proof's `iat` may be from now, either way; its `jti` is remembered as long. */
const PROOF_WINDOW_SECONDS = 60;

/** A proof longer than this is refused unread: an RSA key of 8,192 bits and the claims fit well within it. */
const MAX_PROOF_LENGTH = 4096;

/** How long one server nonce is handed out (DPOP_NONCES); the one before it is still accepted, so a nonce lives 5 to 10 minutes. */
const NONCE_PERIOD_MS = 300_000;

/** What checking a proof needs: the store its `jti` is consumed in, the clock, and the settings (DPOP_NONCES, KEYS_SECRET). */
export interface ProofChecker extends ReplayStore {
  readonly config: Pick<Config, 'dpopNonces' | 'keys'>;
}

/**
 * The keys of proofs seen lately, by their protected header as sent. A client signs every proof
 * with one key, and its proofs' headers are then the same bytes: the key's import and its
 * thumbprint (jose's, through WebCrypto: 56 and 46 µs of a 430 µs check, bench/dpop-proof.ts)
 * are made once for it. The same header always names the same key, so a hit can only be the key
 * jose's `EmbeddedJWK` made from it; a flood of distinct headers only costs what no cache would.
 */
const PROOF_KEYS = new LRUCache<string, { key: CryptoKey; jkt: string }>({ max: 1000 });

/** A verified proof: the thumbprint of the key that signed it. */
export interface DpopProof {
  jkt: string;
}

/** The request a proof must be for. */
export interface ProofTarget {
  method: string;
  /** The URLs the request may name in `htu`, as `proofUrl` gives them: a WebSocket's under both its schemes. */
  urls: readonly string[];
  /** On the resource side, the access token presented with it: the proof's `ath` must be its hash. */
  accessToken?: string;
}

/** Where a refusal is answered: the token endpoint (400, RFC 9449 §5) or a resource (401 with a `DPoP` challenge, §7.1). */
export type ProofSide = 'token' | 'resource';

/**
 * A refusal that concerns DPoP. On the resource side it answers 401 with
 * `WWW-Authenticate: DPoP` (http/errors.ts), naming `invalid_token` or `invalid_dpop_proof`.
 */
export class DpopRefusal extends OAuthError {
  override name = 'DpopRefusal';
  readonly side: ProofSide;
  /** `use_dpop_nonce`: the nonce to use, sent as `DPoP-Nonce` (RFC 9449 §8). */
  readonly nonce: string | undefined;
  constructor(error: 'invalid_dpop_proof' | 'invalid_token' | 'use_dpop_nonce', description: string, side: ProofSide, detail?: string, nonce?: string) {
    super(error, description, detail, side === 'resource' ? 401 : 400);
    this.side = side;
    this.nonce = nonce;
  }
}

/**
 * The nonce of the current period (DPOP_NONCES), or null when nonces are off: the period and an
 * HMAC of it under KEYS_SECRET, so that every instance makes and accepts the same ones without
 * sharing anything but the setting (RFC 9449 §8).
 */
export function currentNonce(checker: Pick<ProofChecker, 'config' | 'now'>): string | null {
  const { config } = checker;
  if (!config.dpopNonces || config.keys.secret === null) return null;
  return nonceOf(config.keys.secret, Math.floor(checker.now() / NONCE_PERIOD_MS));
}

/** The nonce key: derived from KEYS_SECRET for this use alone (as every key under it is), once per secret. */
const nonceKeys = new Map<string, Buffer>();
function nonceKey(secret: string): Buffer {
  let key = nonceKeys.get(secret);
  if (key === undefined) nonceKeys.set(secret, (key = Buffer.from(hkdfSync('sha256', secret, '', 'gatehouse DPoP nonces', 32))));
  return key;
}

function nonceOf(secret: string, period: number): string {
  return `${period.toString(36)}.${createHmac('sha256', nonceKey(secret)).update(String(period)).digest('base64url')}`;
}

/** Whether `nonce` is this period's or the last one's. */
function nonceAccepted(secret: string, nonce: unknown, now: number): boolean {
  if (typeof nonce !== 'string' || nonce.length > 64) return false;
  const period = Math.floor(now / NONCE_PERIOD_MS);
  return [period, period - 1].some((p) => constantTimeEqual(nonce, nonceOf(secret, p)));
}

/** The challenge a resource answers a DPoP refusal with (RFC 9449 §7.1). */
export function dpopChallenge(error: OAuthError): string {
  return `DPoP algs="${DPOP_ALGORITHMS.join(' ')}", error="${error.error}", error_description="${error.errorDescription}"`;
}

/** The `DPoP` request header as Node gives it: several are joined with commas, which no JWT holds. */
export type DpopHeader = string | string[] | undefined;

/** The one proof of a request: none is undefined; several (or a list in one) are refused (RFC 9449 §4.3). */
export function proofOf(header: DpopHeader, side: ProofSide): string | undefined {
  if (header === undefined) return undefined;
  if (typeof header !== 'string' || header.includes(',')) throw new DpopRefusal('invalid_dpop_proof', 'send exactly one DPoP proof', side);
  return header;
}

/**
 * The proof sent with a POST to this server's endpoint at `path` (the token endpoint, PAR),
 * verified and its `jti` consumed; null when none was sent.
 */
export async function endpointProof(
  checker: ProofChecker & { config: Pick<Config, 'publicUrl'> },
  header: DpopHeader,
  path: string,
): Promise<DpopProof | null> {
  const proof = proofOf(header, 'token');
  if (proof === undefined) return null;
  return verifyProof(checker, proof, { method: 'POST', urls: [proofUrl(`${checker.config.publicUrl}${path}`)] }, 'token');
}

/**
 * Checks a proof for `target` and consumes its `jti`: the key's thumbprint, or `DpopRefusal`.
 * Every check comes before the `jti` is recorded, so a refused proof is not used up.
 */
export async function verifyProof(store: ProofChecker, proof: string, target: ProofTarget, side: ProofSide): Promise<DpopProof> {
  const refuse = (description: string, detail?: string) => new DpopRefusal('invalid_dpop_proof', description, side, detail);
  if (proof.length > MAX_PROOF_LENGTH) throw refuse('the DPoP proof is too long');
  let header;
  try {
    header = decodeProtectedHeader(proof);
  } catch {
    throw refuse('the DPoP proof is not a JWT');
  }
  // jose refuses one too, after importing it: said apart, since sending it is the client's own undoing.
  if (typeof header.jwk === 'object' && header.jwk !== null && 'd' in header.jwk)
    throw refuse('the DPoP proof\'s "jwk" must be a public key, never a private one');
  const encodedHeader = proof.slice(0, proof.indexOf('.'));
  const seen = PROOF_KEYS.get(encodedHeader);
  let key = seen?.key;
  const keyOf: JWTVerifyGetKey = async (protectedHeader, token) => (key ??= await EmbeddedJWK(protectedHeader, token));
  let verified;
  try {
    verified = await jwtVerify(proof, keyOf, { typ: 'dpop+jwt', algorithms: [...DPOP_ALGORITHMS], requiredClaims: ['jti', 'htm', 'htu', 'iat'] });
  } catch (error) {
    throw refuse(joseRefusal(error));
  }
  const { payload, protectedHeader } = verified;
  const jkt = seen?.jkt ?? (await calculateJwkThumbprint(protectedHeader.jwk!));
  if (seen === undefined) PROOF_KEYS.set(encodedHeader, { key: key!, jkt });
  checkClaims(payload, target, store.now(), refuse);
  const nonce = currentNonce(store);
  // Last before the jti is consumed: the client retries with the nonce, and a new proof.
  if (nonce !== null && !nonceAccepted(store.config.keys.secret!, payload.nonce, store.now())) {
    throw new DpopRefusal('use_dpop_nonce', 'the DPoP proof must carry the nonce this server gave in the "DPoP-Nonce" header', side, undefined, nonce);
  }
  const fresh = await consumeAssertion(store, {
    // No client ID or issuer URL holds a space: proofs never share a key with other assertions.
    issuer: `DPoP ${jkt}`,
    id: payload.jti!,
    // A millisecond past the last one the proof is accepted at: a stored entry is taken over only once it has expired.
    expiresAt: ((payload.iat as number) + PROOF_WINDOW_SECONDS) * 1000 + 1,
  });
  if (!fresh) throw refuse('the DPoP proof has been used before: make a new one for each request', 'DPoP proof replayed');
  return { jkt };
}

function checkClaims(payload: JWTPayload, target: ProofTarget, now: number, refuse: (description: string) => OAuthError): void {
  const { jti, htm, htu, iat } = payload as { jti: unknown; htm: unknown; htu: unknown; iat: unknown };
  if (typeof jti !== 'string' || jti === '' || jti.length > 256) throw refuse('the DPoP proof\'s "jti" must be a string of at most 256 characters');
  if (htm !== target.method) throw refuse(`the DPoP proof's "htm" must be "${target.method}"`);
  if (typeof htu !== 'string' || !target.urls.includes(proofUrl(htu))) throw refuse(`the DPoP proof's "htu" must be ${target.urls[0]}`);
  if (typeof iat !== 'number' || Math.abs(now / 1000 - iat) > PROOF_WINDOW_SECONDS) {
    throw refuse(`the DPoP proof's "iat" must be within ${PROOF_WINDOW_SECONDS} seconds of the server's time`);
  }
  if (target.accessToken !== undefined && payload.ath !== accessTokenHash(target.accessToken)) {
    throw refuse('the DPoP proof\'s "ath" must be the hash of the access token it is sent with');
  }
}

/**
 * A URL as `htu` is compared (RFC 9449 §4.3): normalized by the URL parser (scheme and host
 * case, default port, dot segments), without query or fragment; '' when it is no URL.
 */
export function proofUrl(url: string): string {
  try {
    const parsed = new URL(url);
    return `${parsed.origin}${parsed.pathname}`;
  } catch {
    return '';
  }
}

/** `ath`: the base64url SHA-256 of the access token (RFC 9449 §4.2). */
export function accessTokenHash(token: string): string {
  return createHash('sha256').update(token).digest('base64url');
}

/** What a client reads of jose's refusal: which rule, never the proof's content. */
function joseRefusal(error: unknown): string {
  if (error instanceof errors.JOSEAlgNotAllowed) return `the DPoP proof must be signed with one of ${DPOP_ALGORITHMS.join(', ')}`;
  if (error instanceof errors.JWSSignatureVerificationFailed) return 'the DPoP proof\'s signature does not match its "jwk"';
  if (error instanceof errors.JWTClaimValidationFailed) {
    return error.claim === 'typ' ? 'the DPoP proof\'s "typ" must be "dpop+jwt"' : `the DPoP proof lacks the "${error.claim}" claim`;
  }
  if (error instanceof errors.JWSInvalid) return 'the DPoP proof must carry the public key it is signed with in "jwk"';
  return 'the DPoP proof is malformed';
}
