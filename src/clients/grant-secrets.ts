/**
 * The secrets of jwt-bearer (publisher) clients, kept readable (SPEC §4.11). A publisher's
 * server signs its grant tokens with HS256 under its client secret, as h has it; verifying an
 * HMAC needs the secret itself, not the SHA-256 hash every other client secret is kept as.
 * So this one secret is also stored sealed: a compact JWE (`dir` + A256GCM) under a key
 * derived from KEYS_SECRET with HKDF-SHA256 — for this use only, not the signing keys' key —
 * whose protected header names the client, so one client's ciphertext cannot pass for
 * another's. Without KEYS_SECRET it is stored as is (the same rule as signing keys, SPEC §1).
 * Never logged, printed after creation or audited.
 */
import { hkdfSync } from 'node:crypto';
import { CompactEncrypt, compactDecrypt } from 'jose';
import type { Kysely } from 'kysely';
import type { Database } from '../store/schema.ts';
import { findClientGrantSecret, putClientGrantSecret } from '../store/trusted-issuers.ts';

const ENCRYPTION_KEY_INFO = 'gatehouse: jwt-bearer client secrets at rest (A256GCM)';

function encryptionKey(keysSecret: string): Uint8Array {
  // No salt: KEYS_SECRET is random already (32 characters or more); the info binds the key to this use.
  return new Uint8Array(hkdfSync('sha256', keysSecret, new Uint8Array(0), ENCRYPTION_KEY_INFO, 32));
}

/** Stores the client's secret, sealed under KEYS_SECRET when it is set. */
export async function storeGrantSecret(db: Kysely<Database>, clientId: string, secret: string, keysSecret: string | null): Promise<void> {
  if (keysSecret === null) return putClientGrantSecret(db, { client_id: clientId, secret, encrypted: 0 });
  const jwe = await new CompactEncrypt(new TextEncoder().encode(secret))
    .setProtectedHeader({ alg: 'dir', enc: 'A256GCM', kid: clientId })
    .encrypt(encryptionKey(keysSecret));
  return putClientGrantSecret(db, { client_id: clientId, secret: jwe, encrypted: 1 });
}

/** The client's secret; null when none is stored or it cannot be opened (a KEYS_SECRET that is not the one it was sealed under). */
export async function readGrantSecret(db: Kysely<Database>, clientId: string, keysSecret: string | null): Promise<string | null> {
  const row = await findClientGrantSecret(db, clientId);
  if (!row) return null;
  if (row.encrypted !== 1) return row.secret;
  if (keysSecret === null) return null;
  try {
    const { plaintext, protectedHeader } = await compactDecrypt(row.secret, encryptionKey(keysSecret), {
      keyManagementAlgorithms: ['dir'],
      contentEncryptionAlgorithms: ['A256GCM'],
    });
    return protectedHeader.kid === clientId ? new TextDecoder().decode(plaintext) : null;
  } catch {
    return null;
  }
}
