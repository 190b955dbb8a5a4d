/**
 * Secrets Gatehouse must read back, kept at rest under KEYS_SECRET (SPEC §1): private signing
 * keys, publishers' grant secrets (an HMAC is verified with the secret itself, not a hash),
 * authenticator app secrets and the client secrets upstream providers gave Gatehouse. One sealer for all of them, so that one rule decides how they are
 * stored and when one cannot be read.
 *
 * Sealed: a compact JWE, `dir` + A256GCM, under a key derived from KEYS_SECRET with
 * HKDF-SHA256 — a key per kind (its own `info`), so a ciphertext of one kind opens under no
 * other kind's key — whose protected header names the row's owner (`kid`), so one row's
 * ciphertext cannot pass for another's. Without KEYS_SECRET a secret is stored as it is
 * (`encrypted` 0); the next start with KEYS_SECRET seals it.
 */
import { hkdfSync } from 'node:crypto';
import { CompactEncrypt, compactDecrypt } from 'jose';
import { ConfigError } from '../config.ts';

/**
 * Each kind's HKDF `info` (fixed forever: changing one makes its rows unreadable) and the name
 * start-up messages and errors use for it.
 */
export const SEALED_KINDS = {
  signing_keys: { info: 'gatehouse: signing keys at rest (A256GCM)', name: 'signing keys' },
  client_grant_secrets: { info: 'gatehouse: jwt-bearer client secrets at rest (A256GCM)', name: "publishers' grant secrets" },
  authenticator_apps: { info: 'gatehouse totp secret v1', name: 'authenticator app secrets' },
  connections: { info: 'gatehouse: upstream connections client secrets at rest (A256GCM)', name: "upstream connections' client secrets" },
} as const;

export type SealedKind = keyof typeof SEALED_KINDS;

/**
 * Secrets that are only ever stored sealed — never without KEYS_SECRET, so start-up finds none
 * of them to seal: people's provider tokens a connection keeps (SPEC §4.15). Their `info` is
 * fixed forever too.
 */
const ALWAYS_SEALED = {
  provider_tokens: { info: 'gatehouse: kept provider tokens at rest (A256GCM)', name: "people's provider tokens" },
} as const;

/** Every kind of sealed secret. */
type Sealable = SealedKind | keyof typeof ALWAYS_SEALED;
const KINDS: Record<Sealable, { info: string; name: string }> = { ...SEALED_KINDS, ...ALWAYS_SEALED };

/** A secret as a row stores it. */
export interface StoredSecret {
  readonly value: string;
  /** 1: `value` is a JWE under KEYS_SECRET; 0: the secret itself. */
  readonly encrypted: number;
}

function encryptionKey(kind: Sealable, keysSecret: string): Uint8Array {
  // No salt: KEYS_SECRET is random already (32 characters or more); the info binds the key to one kind.
  return new Uint8Array(hkdfSync('sha256', keysSecret, new Uint8Array(0), KINDS[kind].info, 32));
}

/** `plaintext` as its row will store it: sealed under KEYS_SECRET when it is set, as it is otherwise. */
export async function seal(kind: Sealable, owner: string, plaintext: string, keysSecret: string | null): Promise<StoredSecret> {
  if (keysSecret === null) {
    if (kind in ALWAYS_SEALED) throw new Error(`${KINDS[kind].name} are stored only sealed: KEYS_SECRET is not set`);
    return { value: plaintext, encrypted: 0 };
  }
  const jwe = await new CompactEncrypt(new TextEncoder().encode(plaintext))
    .setProtectedHeader({ alg: 'dir', enc: 'A256GCM', kid: owner })
    .encrypt(encryptionKey(kind, keysSecret));
  return { value: jwe, encrypted: 1 };
}

/**
 * The secret a row stores. The one failure rule: a sealed secret that KEYS_SECRET does not
 * open — none set, another one, or another row's ciphertext — is a ConfigError naming
 * KEYS_SECRET and the kind. Start-up opens every signing key, so a wrong KEYS_SECRET stops it
 * before any request could meet one.
 */
export async function open(kind: Sealable, owner: string, stored: StoredSecret, keysSecret: string | null): Promise<string> {
  if (stored.encrypted !== 1) return stored.value;
  const name = KINDS[kind].name;
  if (keysSecret === null)
    throw new ConfigError(`KEYS_SECRET is not set, but the ${name} in the database are encrypted: set the KEYS_SECRET they were stored with`);
  try {
    const { plaintext, protectedHeader } = await compactDecrypt(stored.value, encryptionKey(kind, keysSecret), {
      keyManagementAlgorithms: ['dir'],
      contentEncryptionAlgorithms: ['A256GCM'],
    });
    if (protectedHeader.kid !== owner) throw new Error('another row’s ciphertext');
    return new TextDecoder().decode(plaintext);
  } catch {
    throw new ConfigError(`KEYS_SECRET does not decrypt the ${name} in the database: every instance needs the KEYS_SECRET they were stored with`);
  }
}
