/**
 * Signing keys' life cycle (SPEC §3, §4.9): the decisions that make, activate, retire and
 * remove keys; identity/keys.ts is the ring each process signs and verifies with.
 *
 * Per algorithm (ES256, RS256): the first start makes one `active` key. When the active key
 * has signed for SIGNING_KEY_ROTATION_DAYS, a `next` key is published in the JWKS and starts
 * signing PUBLICATION_LEAD_MS later (six times the JWKS max-age, so every cache has it by
 * then); the old key is then `retiring`, published until the longest lifetime of anything it
 * signed has passed, and removed. `rotateKeys` publishes a next key on demand (or, `now`,
 * makes it active at once); `revokeKey` deletes a key at once — a token whose `kid` is unknown
 * does not verify, which is what revoked means — and makes a new active key if it was the
 * active one.
 *
 * Every decision runs in one transaction that serialises with every other process's
 * (store/signing-keys.ts `withKeysLocked`) and re-reads the keys inside it, so instances that
 * start or rotate at once end with one active key per algorithm (the database refuses two
 * anyway). Once committed, it reloads this process's ring and tells the others through the
 * fan-out (on SQLite too: the command line and the workers pass the word through the
 * database, events/fan-out.ts).
 *
 * Private keys: stored as JWK, sealed under KEYS_SECRET when it is set (protocol/seal.ts). They
 * are never logged, printed or audited: the audit trail and the CLI name keys by kid and algorithm only.
 */
import { calculateJwkThumbprint, exportJWK, generateKeyPair, type JWK } from 'jose';
import type { Kysely } from 'kysely';
import { madeBy, type Actor, type Audit } from '../audit.ts';
import { ACCESS_TOKEN_TTL_RANGE, type Config } from '../config.ts';
import type { AppContext } from '../context.ts';
import type { FanOut } from '../events/fan-out.ts';
import { InputError, cut } from '../input-error.ts';
import type { Store } from '../store/database.ts';
import type { Database, SigningAlg, SigningKeyRow } from '../store/schema.ts';
import { seal } from '../protocol/seal.ts';
import { deleteSigningKey, insertSigningKey, listSigningKeys, setSigningKeyState, withKeysLocked } from '../store/signing-keys.ts';

export const SIGNING_ALGS: readonly SigningAlg[] = ['ES256', 'RS256'];
export type { SigningAlg };
export type KeyState = SigningKeyRow['state'];

/** The JWKS's `Cache-Control: max-age`, in seconds. */
export const JWKS_MAX_AGE = 600;
/** How long a next key is published before it signs: six times the JWKS max-age (SPEC §4.9). */
export const PUBLICATION_LEAD_MS = 6 * JWKS_MAX_AGE * 1000;
/**
 * Added to a retiring key's tail: an instance that has not re-read the keys yet signs with the
 * old key until its ring re-reads them (identity/keys.ts REFRESH_INTERVAL_MS) after another activated its successor, and clocks differ.
 */
const RETIREMENT_MARGIN_MS = 10 * 60_000;

/** A key as `keys list` and the admin page show it: no private material. */
export interface KeyView {
  readonly kid: string;
  readonly alg: SigningAlg;
  readonly state: KeyState;
  readonly createdAt: number;
  readonly activatesAt: number;
  readonly retiresAt: number | null;
}

/** A change of the keys, as audited (kid and algorithm only). */
interface KeyChange {
  readonly type: 'key_created' | 'key_activated' | 'key_removed' | 'key_revoked';
  readonly kid: string;
  readonly alg: SigningAlg;
}

/** A kid that names no key (`keys revoke`). */
export class KeyInputError extends InputError {
  override name = 'KeyInputError';
}

/** How long a key that stopped signing stays published: until everything it signed has expired. */
export function retirementTailMs(config: Config): number {
  return Math.max(ACCESS_TOKEN_TTL_RANGE.jwt[1], config.jwtAccessTokenTtl, config.idTokenTtl) * 1000 + RETIREMENT_MARGIN_MS;
}

// ---------------------------------------------------------------------------------------------
// Private keys at rest

/** The private JWK as a row stores it, sealed under KEYS_SECRET when it is set (protocol/seal.ts). */
async function sealPrivateJwk(privateJwk: JWK, kid: string, secret: string | null): Promise<{ private_jwk: string; encrypted: number }> {
  const sealed = await seal('signing_keys', kid, JSON.stringify(privateJwk), secret);
  return { private_jwk: sealed.value, encrypted: sealed.encrypted };
}

/** The public parameters of a key type, the only ones a published JWK carries. */
const PUBLIC_PARAMETERS: Record<string, readonly string[]> = { EC: ['kty', 'crv', 'x', 'y'], RSA: ['kty', 'n', 'e'] };

async function makeKey(alg: SigningAlg, secret: string | null) {
  const { publicKey, privateKey } = await generateKeyPair(alg, { extractable: true, modulusLength: 2048 });
  const exported = await exportJWK(publicKey);
  const kid = await calculateJwkThumbprint(exported);
  const publicJwk = {
    ...Object.fromEntries(PUBLIC_PARAMETERS[exported.kty!]!.map((name) => [name, (exported as Record<string, unknown>)[name]])),
    kid,
    alg,
    use: 'sig',
  };
  return { kid, public_jwk: JSON.stringify(publicJwk), ...(await sealPrivateJwk(await exportJWK(privateKey), kid, secret)) };
}

// ---------------------------------------------------------------------------------------------
// Decisions

/** A ring to reload once a decision has committed. */
interface Reloading {
  reload(): Promise<void>;
}

/** What a decision needs: AppContext has it all; openContext builds it before the context exists. */
export interface KeyDeps {
  readonly config: Config;
  readonly store: Store;
  readonly now: () => number;
  readonly audit: Audit;
  readonly services: { readonly bus: FanOut };
}

/** The keys as a decision sees them, inside its transaction, and the changes it makes, for the audit. */
class KeyDecision {
  readonly changes: KeyChange[] = [];
  readonly trx: Kysely<Database>;
  readonly rows: SigningKeyRow[];
  readonly at: number;
  readonly config: Config;
  constructor(trx: Kysely<Database>, rows: SigningKeyRow[], at: number, config: Config) {
    this.trx = trx;
    this.rows = rows;
    this.at = at;
    this.config = config;
  }

  find(state: KeyState, alg: SigningAlg): SigningKeyRow | undefined {
    return this.rows.find((row) => row.state === state && row.alg === alg);
  }

  /** A new key of `alg`: `active` at once, or `next`, signing from `activatesAt`. */
  async create(alg: SigningAlg, state: 'active' | 'next', activatesAt = this.at): Promise<void> {
    if (state === 'active') await this.#retireActive(alg);
    const key = await makeKey(alg, this.config.keys.secret);
    await insertSigningKey(this.trx, { ...key, alg, state, created_at: this.at, activates_at: activatesAt, retires_at: null });
    this.changes.push({ type: 'key_created', kid: key.kid, alg });
  }

  /** The next key signs from now on; the active one retires. */
  async activate(next: SigningKeyRow): Promise<void> {
    await this.#retireActive(next.alg);
    await setSigningKeyState(this.trx, next.kid, { state: 'active', activates_at: this.at });
    this.changes.push({ type: 'key_activated', kid: next.kid, alg: next.alg });
  }

  async remove(row: SigningKeyRow, type: 'key_removed' | 'key_revoked'): Promise<void> {
    await deleteSigningKey(this.trx, row.kid);
    this.changes.push({ type, kid: row.kid, alg: row.alg });
  }

  // Before the new active key is written: the database holds one active key per algorithm.
  async #retireActive(alg: SigningAlg): Promise<void> {
    const active = this.find('active', alg);
    if (active) await setSigningKeyState(this.trx, active.kid, { state: 'retiring', retires_at: this.at + retirementTailMs(this.config) });
  }
}

/**
 * Runs `decide` with the keys re-read under the keys' lock, then — once it has committed —
 * audits its changes, reloads this process's ring and tells the other instances.
 */
async function changeKeys<T>(deps: KeyDeps, ring: Reloading | null, actor: Actor | null, decide: (decision: KeyDecision) => Promise<T>): Promise<T> {
  const { result, changes } = await withKeysLocked(deps.store, async (trx) => {
    const decision = new KeyDecision(trx, await listSigningKeys(trx), deps.now(), deps.config);
    const result = await decide(decision);
    return { result, changes: decision.changes };
  });
  if (changes.length > 0) {
    for (const change of changes) await deps.audit({ type: change.type, ...(actor ? madeBy(actor) : {}), detail: { kid: change.kid, alg: change.alg } });
    await ring?.reload();
    await deps.services.bus.publishChange('keys');
  }
  return result;
}

/** Whether the scheduled step has something to do: the same test outside the lock (cheap, every minute) and inside it. */
function scheduledWork(rows: readonly SigningKeyRow[], at: number, config: Config): boolean {
  const rotateAfter = config.keys.rotationDays * 86_400_000;
  return (
    rows.some((row) => row.state === 'retiring' && row.retires_at !== null && row.retires_at <= at) ||
    SIGNING_ALGS.some((alg) => {
      const active = rows.find((row) => row.state === 'active' && row.alg === alg);
      const next = rows.find((row) => row.state === 'next' && row.alg === alg);
      if (next) return next.activates_at <= at;
      return !active || (rotateAfter > 0 && active.activates_at + rotateAfter <= at);
    })
  );
}

/** The scheduled step: first keys, a due next key, a due activation, the removal of retired keys. */
async function runSchedule(decision: KeyDecision): Promise<void> {
  const { at, config } = decision;
  for (const row of decision.rows) if (row.state === 'retiring' && row.retires_at !== null && row.retires_at <= at) await decision.remove(row, 'key_removed');
  for (const alg of SIGNING_ALGS) {
    const active = decision.find('active', alg);
    const next = decision.find('next', alg);
    if (next && next.activates_at <= at) await decision.activate(next);
    else if (!active) await decision.create(alg, 'active');
    else if (!next && config.keys.rotationDays > 0 && active.activates_at + config.keys.rotationDays * 86_400_000 <= at)
      await decision.create(alg, 'next', at + PUBLICATION_LEAD_MS);
  }
}

/** Runs the scheduled step if something is due (first start included); the lock is taken only then. */
export async function settle(deps: KeyDeps, ring: Reloading | null): Promise<void> {
  if (!scheduledWork(await listSigningKeys(deps.store.db), deps.now(), deps.config)) return;
  await changeKeys(deps, ring, null, async (decision) => {
    if (scheduledWork(decision.rows, decision.at, decision.config)) await runSchedule(decision);
  });
}

const view = (row: SigningKeyRow): KeyView => ({
  kid: row.kid,
  alg: row.alg,
  state: row.state,
  createdAt: row.created_at,
  activatesAt: row.activates_at,
  retiresAt: row.retires_at,
});

/** Every key, by algorithm, then in the order they sign. */
export async function listKeys(ctx: AppContext): Promise<KeyView[]> {
  return (await listSigningKeys(ctx.db)).map(view);
}

/**
 * `keys rotate`: a next key per algorithm that signs after the publication lead (an algorithm
 * that has one already keeps it); `now`: a new key per algorithm that signs at once — the
 * active one retires, and a next key not yet signing is withdrawn.
 */
export async function rotateKeys(ctx: AppContext, options: { now: boolean }, actor: Actor): Promise<KeyView[]> {
  await changeKeys(ctx, ctx.keys, actor, async (decision) => {
    for (const alg of SIGNING_ALGS) {
      const next = decision.find('next', alg);
      if (options.now) {
        if (next) await decision.remove(next, 'key_removed');
        await decision.create(alg, 'active');
      } else if (!next) await decision.create(alg, 'next', decision.at + PUBLICATION_LEAD_MS);
    }
  });
  return listKeys(ctx);
}

/** `keys revoke <kid>`: the key is deleted at once; if it was signing, a new key of its algorithm signs from now on. */
export async function revokeKey(ctx: AppContext, kid: string, actor: Actor): Promise<KeyView> {
  return changeKeys(ctx, ctx.keys, actor, async (decision) => {
    const row = decision.rows.find((candidate) => candidate.kid === kid);
    if (!row) throw new KeyInputError('kid', `no signing key has the kid "${cut(kid, 100)}"`);
    await decision.remove(row, 'key_revoked');
    if (row.state === 'active') await decision.create(row.alg, 'active');
    return view(row);
  });
}
