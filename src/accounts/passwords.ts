/**
 * Password hashing with scrypt (node:crypto, no native add-on). Stored as
 * `scrypt$N$r$p$salt$hash` so parameters can be raised later and old hashes still verify.
 * Passwords are NFKC-normalized first, so the same password typed on different keyboards
 * verifies. At most a few hashes run at once (HASHING), whoever asks for them.
 */
import { hash, randomBytes, scrypt as scryptCallback, timingSafeEqual, type ScryptOptions } from 'node:crypto';
import { Throttled } from '../throttle.ts';

// N=2^15, r=8, p=1 (32 MiB, tens of milliseconds): OWASP's scrypt minimum is N=2^17 with
// p=1 or N=2^15 with higher p; we take N=2^15, p=2 to keep one login under ~100 ms on 2 cores.
const PARAMS = { N: 2 ** 15, r: 8, p: 2 } as const;
const KEY_LENGTH = 32;
const MAX_MEMORY = 64 * 1024 * 1024;

export const MIN_PASSWORD_LENGTH = 8;
export const MAX_PASSWORD_LENGTH = 1024;

/**
 * How many password hashes run at once, and how many more may wait. scrypt runs on libuv's
 * thread pool (4 threads by default): more at once would only queue file and DNS work behind
 * them, and an unbounded queue would make every login wait behind a flood of guesses.
 * Beyond the queue, a hash is refused at once (503 with Retry-After).
 */
const HASHING = { concurrent: 4, queued: 32, retryAfterMs: 1000 } as const;
let hashing = 0;
const waiting: Array<() => void> = [];

async function withHashingSlot<T>(work: () => Promise<T>): Promise<T> {
  if (hashing < HASHING.concurrent) hashing++;
  else if (waiting.length < HASHING.queued) await new Promise<void>((resolve) => waiting.push(resolve));
  else throw new Throttled(HASHING.retryAfterMs, 503);
  try {
    return await work();
  } finally {
    // The slot passes straight to the next in line, if any.
    const next = waiting.shift();
    if (next) next();
    else hashing--;
  }
}

function scrypt(password: string, salt: Buffer, options: ScryptOptions): Promise<Buffer> {
  return withHashingSlot(
    () =>
      new Promise((resolve, reject) =>
        scryptCallback(password.normalize('NFKC'), salt, KEY_LENGTH, { ...options, maxmem: MAX_MEMORY }, (error, key) =>
          error ? reject(error) : resolve(key),
        ),
      ),
  );
}

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const key = await scrypt(password, salt, PARAMS);
  return ['scrypt', PARAMS.N, PARAMS.r, PARAMS.p, salt.toString('base64url'), key.toString('base64url')].join('$');
}

export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const [scheme, n, r, p, salt, key] = stored.split('$');
  if (scheme !== 'scrypt' || !salt || !key || password.length > MAX_PASSWORD_LENGTH) return false;
  const expected = Buffer.from(key, 'base64url');
  const actual = await scrypt(password, Buffer.from(salt, 'base64url'), { N: Number(n), r: Number(r), p: Number(p) });
  return actual.length === expected.length && timingSafeEqual(actual, expected);
}

/**
 * A stored hash that no password matches (its key is random, not derived from anything):
 * verifying against it costs what a real check costs.
 */
export const DECOY_HASH = ['scrypt', PARAMS.N, PARAMS.r, PARAMS.p, randomBytes(16).toString('base64url'), randomBytes(KEY_LENGTH).toString('base64url')].join(
  '$',
);

/** The stored hash of a person who has no password (created at a login through a connection, SPEC §4.13): no password matches it. */
export const NO_PASSWORD = '';

/** How many of the most common passwords are refused (SPEC §4.16). */
export const COMMON_PASSWORDS = 10_000;

let common: Promise<ReadonlySet<string>> | undefined;

/**
 * The 10 000 most common passwords, most common first in zxcvbn's list (from leaked password
 * sets), which the package ships: loaded on first use, so that commands that set no password
 * do not pay for it.
 */
function commonPasswords(): Promise<ReadonlySet<string>> {
  common ??= import('@zxcvbn-ts/language-common').then(({ dictionary }) => new Set(dictionary['passwords-common'].slice(0, COMMON_PASSWORDS)));
  return common;
}

/**
 * Why `password` is not acceptable, or null: too short, too long, or one of the most common
 * passwords — compared as typed on any keyboard and in any case (the list is lower case),
 * since `Password1` is guessed as soon as `password1`.
 */
export async function passwordProblem(password: string): Promise<string | null> {
  if (password.length < MIN_PASSWORD_LENGTH) return `must be at least ${MIN_PASSWORD_LENGTH} characters`;
  if (password.length > MAX_PASSWORD_LENGTH) return `must be at most ${MAX_PASSWORD_LENGTH} characters`;
  if ((await commonPasswords()).has(password.normalize('NFKC').toLowerCase())) return 'is one of the most common passwords: choose another';
  return null;
}

/**
 * What a password reset link remembers of the password it replaces (SPEC §4.16): a digest of
 * its stored hash, so the link stops working once the password changes, without a second
 * copy of the hash.
 */
export function passwordFingerprint(storedHash: string): string {
  return hash('sha256', storedHash, 'base64url');
}
