/**
 * Start-up's part in keeping secrets at rest sealed (protocol/seal.ts, SPEC §1): with
 * KEYS_SECRET, every secret stored before it was set is sealed under it, of every kind at
 * once; without it, the warning names every kind that stays in clear.
 */
import type { Kysely } from 'kysely';
import type { ContextLogger } from './context.ts';
import { SEALED_KINDS, seal, type SealedKind } from './protocol/seal.ts';
import type { Database } from './store/schema.ts';
import { listUnsealed, replaceUnsealed } from './store/sealed-secrets.ts';

const KINDS = Object.keys(SEALED_KINDS) as SealedKind[];

/**
 * Seals, under `keysSecret`, every secret of every kind stored as it is. Each row is replaced
 * only if it still holds what was read, so instances starting together seal each row once.
 */
export async function sealStoredSecrets(db: Kysely<Database>, keysSecret: string | null, log: ContextLogger): Promise<void> {
  if (keysSecret === null) return;
  const sealed: Partial<Record<SealedKind, number>> = {};
  for (const kind of KINDS) {
    for (const row of await listUnsealed(db, kind)) {
      if (await replaceUnsealed(db, kind, row, await seal(kind, row.owner, row.value, keysSecret))) sealed[kind] = (sealed[kind] ?? 0) + 1;
    }
  }
  if (Object.keys(sealed).length > 0)
    log.info({ event: 'secrets_encrypted', ...sealed }, `${namesOf(sealed)} stored unencrypted are now encrypted under KEYS_SECRET`);
}

/** Without KEYS_SECRET: one warning naming every kind of secret the database keeps in clear, and how many of each it holds now. */
export async function warnOfSecretsInClear(db: Kysely<Database>, log: ContextLogger): Promise<void> {
  const inClear = Object.fromEntries(await Promise.all(KINDS.map(async (kind) => [kind, (await listUnsealed(db, kind)).length] as const)));
  log.warn({ setting: 'KEYS_SECRET', ...inClear }, `KEYS_SECRET is not set: ${namesOf(inClear)} are stored in the database unencrypted`);
}

function namesOf(counts: Partial<Record<SealedKind, number>>): string {
  return KINDS.filter((kind) => counts[kind] !== undefined)
    .map((kind) => `${SEALED_KINDS[kind].name} (${counts[kind]})`)
    .join(', ');
}
