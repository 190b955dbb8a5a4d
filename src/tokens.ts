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
 *
 * The tokens written most — access and refresh tokens, codes, and a JWT access token's
 * `jti` — also carry the millisecond they were made, in 12 hex digits between the prefix
 * and the secret, and their stored hash starts with those digits (`TIME_KEYED`). The key
 * of their rows is then ordered by time, so consecutive writes land in the same B-tree
 * leaf — the rightmost — and a group commit writes that leaf once for all of them, where a
 * random key writes a leaf of its own per row (docs/performance.md). The time is no secret
 * (a JWT says it in `iat` anyway) and decides nothing: the rest of the key is the token's
 * hash, as before, so a token with a made-up time finds no row.
 */
import { createCipheriv, createDecipheriv, createSecretKey, hash, hkdfSync, randomFillSync, randomInt, timingSafeEqual, type KeyObject } from 'node:crypto';

export const TOKEN_PREFIX = {
  access: 'gat_',
  refresh: 'grt_',
  code: 'gac_',
  deviceCode: 'gdc_',
  session: 'gss_',
  clientSecret: 'gcs_',
  setup: 'gsu_',
  pendingLogin: 'gpl_',
  /** The random value a browser holds in its WebAuthn binding cookie (accounts/passkeys.ts). */
  webauthnBinding: 'gwb_',
  /** The random value a browser holds while it logs in at an upstream provider (accounts/connections/upstream.ts). */
  upstreamBinding: 'gub_',
  /** An identity waiting to be linked to the account that has its email (accounts/connections/federated-login.ts). */
  pendingIdentity: 'gpi_',
  /** A password reset link's token (accounts/account-mail.ts). */
  passwordReset: 'gpr_',
  /** An email verification link's token (accounts/account-mail.ts). */
  emailVerification: 'gev_',
  /** A JWT access token's `jti` (identity/jwt-access-tokens.ts): a claim, never presented alone, so no prefix. */
  jwtId: '',
} as const;
export type TokenKind = keyof typeof TOKEN_PREFIX;

const SECRET_BYTES = 32;
const SECRET_LENGTH = 43; // base64url of 32 bytes, unpadded

/** The kinds whose rows are keyed by time first (see above). */
const TIME_KEYED: ReadonlySet<TokenKind> = new Set<TokenKind>(['access', 'refresh', 'code', 'jwtId']);
const TIME_LENGTH = 12; // hex digits of the Unix time in milliseconds: 48 bits, as in a UUIDv7
const TIME_DIGITS = /^[0-9a-f]{12}$/;

const POOL_BYTES = 4096;
const pool = Buffer.alloc(POOL_BYTES);
let drawn = POOL_BYTES;

/**
 * `size` bytes from the CSPRNG, drawn from a pool that is filled 4 KiB at a time. A call
 * into OpenSSL costs about the same whatever its size — 5 µs on the bench machine, a system
 * call among it (OpenSSL's check that the process has not forked) — and a token write draws
 * three or four times; Node's `randomUUID` keeps such a pool for the same reason. What is
 * drawn is copied out and wiped from the pool, which so never holds a value already handed
 * out. A Node process never forks (cluster workers are new processes, each with its own pool).
 */
export function drawRandomBytes(size: number): Buffer {
  if (!Number.isSafeInteger(size) || size < 1 || size > POOL_BYTES) throw new RangeError(`from 1 to ${POOL_BYTES} random bytes at a time, not ${size}`);
  if (drawn + size > POOL_BYTES) {
    randomFillSync(pool);
    drawn = 0;
  }
  const drawing = pool.subarray(drawn, drawn + size);
  drawn += size;
  // A buffer of its own, not a slice of Node's shared pool of small buffers, which other code reads.
  const bytes = Buffer.allocUnsafeSlow(size);
  drawing.copy(bytes);
  drawing.fill(0);
  return bytes;
}

export interface MintedToken {
  /** The value given to its holder once; never stored or logged. */
  readonly token: string;
  /** What the database keeps: the token's SHA-256, after its time for the `TIME_KEYED` kinds. */
  readonly hash: string;
}

/**
 * A new token of `kind`. The time in a time-keyed token is the machine's clock, not the
 * request's (`ctx.now()`): it only says where in the index the row goes, which follows the
 * order in which rows are really written.
 */
export function mintToken(kind: TokenKind): MintedToken {
  const secret = drawRandomBytes(SECRET_BYTES).toString('base64url');
  if (!TIME_KEYED.has(kind)) {
    const token = TOKEN_PREFIX[kind] + secret;
    return { token, hash: hashToken(token) };
  }
  const time = Date.now().toString(16).padStart(TIME_LENGTH, '0');
  const token = TOKEN_PREFIX[kind] + time + secret;
  return { token, hash: time + hashToken(token) };
}

export function hashToken(token: string): string {
  return hash('sha256', token, 'base64url'); // one call: cheaper than a Hash object for a short input
}

/** The stored hash of `token` when it is shaped like a token of `kind`, else null (no lookup needed). */
export function hashIfWellFormed(kind: TokenKind, token: string): string | null {
  const prefix = TOKEN_PREFIX[kind];
  if (!token.startsWith(prefix)) return null;
  const length = token.length - prefix.length;
  // Made before tokens carried their time (issue 35): their rows are keyed by the plain
  // hash. The last of them is gone once the longest-lived, a refresh token, has expired
  // (docs/operations.md §5 has the query that tells); then this shape goes from the time-keyed kinds.
  if (length === SECRET_LENGTH) return hashToken(token);
  if (length !== TIME_LENGTH + SECRET_LENGTH || !TIME_KEYED.has(kind)) return null;
  const time = token.slice(prefix.length, prefix.length + TIME_LENGTH);
  return TIME_DIGITS.test(time) ? time + hashToken(token) : null;
}

/**
 * The alphabet of user codes (RFC 8628 §6.1): 20 consonants, no vowels (no words spelled
 * by accident) and none of the letters easily misread for digits.
 */
export const USER_CODE_ALPHABET = 'BCDFGHJKLMNPQRSTVWXZ';
const USER_CODE_LENGTH = 8;

export interface MintedUserCode {
  /** As shown to the person: `XXXX-XXXX`. */
  readonly display: string;
  readonly hash: string;
}

/**
 * A user code: 8 letters, 20^8 (about 2^34.6) possibilities. Short enough to type from a
 * TV screen, so it is never a secret on its own: it lives `DEVICE_CODE_TTL`, is good for one
 * decision, and guessing it is throttled (oauth/device.ts).
 */
export function mintUserCode(): MintedUserCode {
  const letters = Array.from({ length: USER_CODE_LENGTH }, () => USER_CODE_ALPHABET[randomInt(USER_CODE_ALPHABET.length)]).join('');
  return { display: `${letters.slice(0, 4)}-${letters.slice(4)}`, hash: hashUserCode(letters) };
}

/**
 * The hash of a user code as typed — case-insensitive, dashes and spaces ignored — or null
 * when what was typed cannot be a user code. The canonical form is also what the person is
 * shown back (`XXXX-XXXX`).
 */
export function readUserCode(typed: string): { display: string; hash: string } | null {
  const letters = typed.replace(/[\s-]/g, '').toUpperCase();
  if (letters.length !== USER_CODE_LENGTH || [...letters].some((c) => !USER_CODE_ALPHABET.includes(c))) return null;
  return { display: `${letters.slice(0, 4)}-${letters.slice(4)}`, hash: hashUserCode(letters) };
}

/** Domain-separated from the token hashes: a user code can never collide with a token's hash. */
function hashUserCode(letters: string): string {
  return hashToken(`user-code:${letters}`);
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
  const iv = drawRandomBytes(12);
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
