/**
 * The keys a `private_key_jwt` client registers (SPEC §4.11): an inline JWK Set or a
 * `jwks_uri`, judged the same way for an administrator's client (`--jwks-file`, `--jwks-uri`,
 * the admin form) and for a client ID metadata document (`jwks`, `jwks_uri`).
 */
import { importJWK, type JWK } from 'jose';
import type { Client } from '../../store/schema.ts';
import { ASSERTION_ALGS } from './remote-keys.ts';

/** Members that only a private (or symmetric) key has: RFC 7518 §6.2.2, §6.3.2, §6.4; RFC 8037 §2. */
const PRIVATE_MEMBERS = ['d', 'p', 'q', 'dp', 'dq', 'qi', 'oth', 'k'] as const;
/** A JWK Set larger than this (as JSON) is refused: a handful of public keys is a few KiB. */
export const MAX_JWKS_BYTES = 16 * 1024;
export const MAX_JWKS_KEYS = 20;
const MAX_URL_LENGTH = 2000;

/** The key types the accepted algorithms use: RSA (RS256, PS256), EC P-256 (ES256), OKP Ed25519 (EdDSA). */
function keyTypeProblem(key: Record<string, unknown>): string | null {
  if (key.kty === 'RSA') return null;
  if (key.kty === 'EC') return key.crv === 'P-256' ? null : 'is an EC key on a curve other than P-256';
  if (key.kty === 'OKP') return key.crv === 'Ed25519' ? null : 'is an OKP key other than Ed25519';
  return `has a kty other than RSA, EC or OKP`;
}

/**
 * Why `value` (parsed JSON) cannot be a client's JWK Set, naming the first bad key; null
 * when it can: `{"keys": […]}` with 1–20 public keys of the accepted types (no private
 * members), each with an `alg` (when present) among RS256, PS256, ES256, EdDSA, not marked
 * for encryption only, and importable by jose.
 */
export async function jwksProblem(value: unknown): Promise<string | null> {
  const shape = jwksShapeProblem(value);
  if (shape !== null) return shape;
  for (const [index, key] of (value as { keys: Array<Record<string, unknown>> }).keys.entries()) {
    const alg = typeof key.alg === 'string' ? key.alg : key.kty === 'RSA' ? 'RS256' : key.kty === 'EC' ? 'ES256' : 'EdDSA';
    try {
      await importJWK(key as JWK, alg);
    } catch {
      return `key ${index + 1} is not a usable public key`;
    }
  }
  return null;
}

/** jwksProblem without importing the keys (synchronous: a metadata document's validation); a key jose cannot import then matches no JWS. */
export function jwksShapeProblem(value: unknown): string | null {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return 'is not a JWK Set (a JSON object with "keys")';
  const keys = (value as { keys?: unknown }).keys;
  if (!Array.isArray(keys) || keys.length === 0) return 'has no "keys" (a non-empty array)';
  if (keys.length > MAX_JWKS_KEYS) return `has more than ${MAX_JWKS_KEYS} keys`;
  if (JSON.stringify(value).length > MAX_JWKS_BYTES) return `is larger than ${MAX_JWKS_BYTES} bytes`;
  for (const [index, key] of keys.entries()) {
    const name = `key ${index + 1}`;
    if (typeof key !== 'object' || key === null || Array.isArray(key)) return `${name} is not a JSON object`;
    const jwk = key as Record<string, unknown>;
    const privateMember = PRIVATE_MEMBERS.find((member) => member in jwk);
    if (privateMember !== undefined) return `${name} has the private member "${privateMember}": register public keys only`;
    const typeProblem = keyTypeProblem(jwk);
    if (typeProblem !== null) return `${name} ${typeProblem}`;
    if (jwk.alg !== undefined && !(ASSERTION_ALGS as readonly unknown[]).includes(jwk.alg)) return `${name} has an alg other than ${ASSERTION_ALGS.join(', ')}`;
    if (jwk.use !== undefined && jwk.use !== 'sig') return `${name} is not for signatures (use)`;
    if (jwk.kid !== undefined && typeof jwk.kid !== 'string') return `${name} has a kid that is not a string`;
  }
  return null;
}

/** Why `uri` cannot be a client's `jwks_uri`, or null: an https URL (no fragment, no credentials), as every key set is fetched through the guarded fetch. */
export function jwksUriProblem(uri: string): string | null {
  if (uri.length > MAX_URL_LENGTH || !URL.canParse(uri)) return 'is not a URL';
  const url = new URL(uri);
  if (url.protocol !== 'https:') return 'is not an https URL';
  if (url.hash !== '' || uri.includes('#')) return 'has a fragment';
  if (url.username !== '' || url.password !== '') return 'has a user name or password';
  return null;
}

/** How a client authenticates at the endpoints (SPEC §3 `token_endpoint_auth_method`). */
export type ClientAuthMethod = 'none' | 'client_secret_basic' | 'private_key_jwt';

export function authMethodOf(client: Pick<Client, 'secret_hash' | 'jwks' | 'jwks_uri'>): ClientAuthMethod {
  if (client.secret_hash !== null) return 'client_secret_basic';
  return client.jwks !== null || client.jwks_uri !== null ? 'private_key_jwt' : 'none';
}

/** Whether the client must authenticate: it has a secret or registered keys. */
export function isConfidential(client: Pick<Client, 'secret_hash' | 'jwks' | 'jwks_uri'>): boolean {
  return authMethodOf(client) !== 'none';
}
