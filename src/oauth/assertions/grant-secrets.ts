/**
 * The secrets of jwt-bearer (publisher) clients, kept readable (SPEC §4.11). A publisher's
 * server signs its grant tokens with HS256 under its client secret, as h has it; verifying an
 * HMAC needs the secret itself, not the SHA-256 hash every other client secret is kept as.
 * So this one secret is also stored sealed under KEYS_SECRET when it is set (protocol/seal.ts),
 * owned by the client, so one client's ciphertext cannot pass for another's. Never logged,
 * printed after creation or audited.
 */
import type { Kysely } from 'kysely';
import { open, seal } from '../../protocol/seal.ts';
import type { Database } from '../../store/schema.ts';
import { findClientGrantSecret, putClientGrantSecret } from '../../store/trusted-issuers.ts';

/** Stores the client's secret, sealed under KEYS_SECRET when it is set. */
export async function storeGrantSecret(db: Kysely<Database>, clientId: string, secret: string, keysSecret: string | null): Promise<void> {
  const sealed = await seal('client_grant_secrets', clientId, secret, keysSecret);
  return putClientGrantSecret(db, { client_id: clientId, secret: sealed.value, encrypted: sealed.encrypted });
}

/** The client's secret; null when none is stored. One KEYS_SECRET does not open is a ConfigError naming it (protocol/seal.ts). */
export async function readGrantSecret(db: Kysely<Database>, clientId: string, keysSecret: string | null): Promise<string | null> {
  const row = await findClientGrantSecret(db, clientId);
  return row ? open('client_grant_secrets', clientId, { value: row.secret, encrypted: row.encrypted }, keysSecret) : null;
}
