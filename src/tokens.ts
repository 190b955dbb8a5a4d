/**
 * Every secret Gatehouse hands out — tokens, codes, client secrets, session ids — is made
 * and hashed here, and nowhere else.
 *
 * A token is a kind prefix (so a leaked one is recognisable and a misplaced one is refused
 * early) followed by 32 bytes from the CSPRNG, base64url: 256 bits of entropy, far beyond
 * guessing. Only SHA-256 of the whole token is stored. Looking a row up by that hash keeps
 * the database's non-constant-time index comparison away from the secret itself: timing
 * can reveal at most a prefix of a hash, which does not help forge a token. A fast hash is
 * right here because the input has full entropy; passwords get scrypt instead.
 */
import { createCipheriv, createDecipheriv, createHash, createSecretKey, hkdfSync, randomBytes, timingSafeEqual, type KeyObject } from 'node:crypto';

export const TOKEN_PREFIX = {
  access: 'gat_',
  refresh: 'grt_',
  code: 'gac_',
  session: 'gss_',
  clientSecret: 'gcs_',
  setup: 'gsu_',
} as const;
export type TokenKind = keyof typeof TOKEN_PREFIX;

const SECRET_BYTES = 32;
const SECRET_LENGTH = 43; // base64url of 32 bytes, unpadded

export interface MintedToken {
  /** The value given to its holder once; never stored or logged. */
  readonly token: string;
  /** What the database keeps. */
  readonly hash: string;
}

export function mintToken(kind: TokenKind): MintedToken {
  const token = TOKEN_PREFIX[kind] + randomBytes(SECRET_BYTES).toString('base64url');
  return { token, hash: hashToken(token) };
}

export function hashToken(token: string): string {
  return createHash('sha256').update(token).digest('base64url');
}

/** The hash of `token` when it is shaped like a token of `kind`, else null (no lookup needed). */
export function hashIfWellFormed(kind: TokenKind, token: string): string | null {
  const prefix = TOKEN_PREFIX[kind];
  if (token.length !== prefix.length + SECRET_LENGTH || !token.startsWith(prefix)) return null;
  return hashToken(token);
}

export function constantTimeEqual(a: string, b: string): boolean {
  const left = Buffer.from(a);
  const right = Buffer.from(b);
  return left.length === right.length && timingSafeEqual(left, right);
}

/**
 * Seals a successor token pair under a key derived from the predecessor refresh token, so
 * that the grace window can hand the same pair out again while the database alone (which
 * holds only the predecessor's SHA-256) cannot reproduce it. HKDF and SHA-256 are separate
 * functions of the token: knowing the stored hash does not give the key.
 */
export function sealWithToken(token: string, plaintext: string): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', boxKey(token), iv);
  const body = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
  return Buffer.concat([iv, cipher.getAuthTag(), body]).toString('base64url');
}

/** Opens what `sealWithToken` sealed with the same token; null if it does not open. */
export function openWithToken(token: string, sealed: string): string | null {
  try {
    const raw = Buffer.from(sealed, 'base64url');
    const decipher = createDecipheriv('aes-256-gcm', boxKey(token), raw.subarray(0, 12));
    decipher.setAuthTag(raw.subarray(12, 28));
    return Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]).toString('utf8');
  } catch {
    return null;
  }
}

/** A KeyObject, not a Buffer: Node's cipher setup takes a much slower path for Buffer keys. */
function boxKey(token: string): KeyObject {
  return createSecretKey(Buffer.from(hkdfSync('sha256', token, Buffer.alloc(0), 'gatehouse refresh successor v1', 32)));
}
