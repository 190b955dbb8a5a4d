/**
 * The key ring (SPEC §4.9): this process's signing keys — what signs, what verifies, what the
 * JWKS publishes. Their life cycle is decided in identity/key-schedule.ts; the ring loads the
 * keys at start, re-reads them when the fan-out says they changed and every
 * REFRESH_INTERVAL_MS (for a message lost on the way), and runs the scheduled step on the
 * same timer; any instance may. Private keys are opened once, when first loaded, and never
 * leave the process.
 */
import { SignJWT, errors, importJWK, jwtVerify, type CryptoKey, type JWK, type JWTPayload } from 'jose';
import type { SigningKeys } from '../context.ts';
import type { SigningAlg, SigningKeyRow } from '../store/schema.ts';
import { open } from '../protocol/seal.ts';
import { listSigningKeys } from '../store/signing-keys.ts';
import { SIGNING_ALGS, settle, type KeyDeps, type KeyState } from './key-schedule.ts';

/**
 * How often each process re-reads the keys and runs the scheduled step. The fan-out tells every
 * process of a change at once; this re-read is for a message lost on the way (Redis reconnecting).
 */
export const REFRESH_INTERVAL_MS = 60_000;
/** The stored private JWK; a ConfigError naming KEYS_SECRET when it cannot be read. */
async function openPrivateJwk(row: SigningKeyRow, secret: string | null): Promise<JWK> {
  return JSON.parse(await open('signing_keys', row.kid, { value: row.private_jwk, encrypted: row.encrypted }, secret)) as JWK;
}

interface LoadedKey {
  readonly kid: string;
  readonly alg: SigningAlg;
  readonly state: KeyState;
  readonly publicJwk: JWK;
  readonly verifyKey: CryptoKey;
  /** Only for the active key of its algorithm. */
  readonly signKey: CryptoKey | null;
}

export interface KeyRingLogger {
  info(object: object, message: string): void;
  error(object: object, message: string): void;
}

/**
 * This process's keys: what signs, what verifies, what the JWKS publishes. Loaded at start,
 * re-read every REFRESH_INTERVAL_MS and whenever the fan-out says the keys changed.
 */
export class KeyRing implements SigningKeys {
  readonly #deps: KeyDeps;
  #keys = new Map<string, LoadedKey>();
  #jwks: { readonly keys: readonly JWK[] } = { keys: [] };
  #timer: NodeJS.Timeout | null = null;
  #loading: Promise<void> | null = null;

  private constructor(deps: KeyDeps) {
    this.#deps = deps;
  }

  /**
   * Makes the first keys if there are none and loads them; a KEYS_SECRET that does not decrypt
   * them is a ConfigError naming it. From then on, re-reads them on a timer (which does not keep the process alive) and on the fan-out's word.
   */
  static async open(deps: KeyDeps, log: KeyRingLogger): Promise<KeyRing> {
    const ring = new KeyRing(deps);
    await settle(deps, null);
    await ring.reload();
    deps.services.bus.subscribeChanges(
      'keys',
      () => void ring.reload().catch((error: Error) => log.error({ err: error.message }, 'could not reload the signing keys')),
    );
    ring.#timer = setInterval(
      () => void ring.refresh().catch((error: Error) => log.error({ err: error.message }, 'signing key upkeep failed')),
      REFRESH_INTERVAL_MS,
    );
    ring.#timer.unref();
    return ring;
  }

  /** Runs the scheduled step (rotation, activation, removal) if something is due, then re-reads the keys: what the timer does. */
  async refresh(): Promise<void> {
    await settle(this.#deps, this);
    await this.reload();
  }

  /** Re-reads the keys. Concurrent calls share one read that starts after the latest call. */
  async reload(): Promise<void> {
    const previous = this.#loading;
    const loading = (async () => {
      await previous?.catch(() => {});
      await this.#load();
    })();
    this.#loading = loading;
    try {
      await loading;
    } finally {
      if (this.#loading === loading) this.#loading = null;
    }
  }

  async #load(): Promise<void> {
    const rows = await listSigningKeys(this.#deps.store.db);
    const keys = new Map<string, LoadedKey>();
    for (const row of rows) {
      const known = this.#keys.get(row.kid);
      const needsSigner = row.state === 'active';
      if (known && known.state === row.state && (known.signKey !== null) === needsSigner) {
        keys.set(row.kid, known);
        continue;
      }
      // Every key's private half is opened once, the first time it is loaded: a wrong KEYS_SECRET shows at start.
      const privateJwk = await openPrivateJwk(row, this.#deps.config.keys.secret);
      const publicJwk = JSON.parse(row.public_jwk) as JWK;
      keys.set(row.kid, {
        kid: row.kid,
        alg: row.alg,
        state: row.state,
        publicJwk,
        verifyKey: known?.verifyKey ?? ((await importJWK(publicJwk, row.alg)) as CryptoKey),
        signKey: needsSigner ? ((await importJWK(privateJwk, row.alg, { extractable: false })) as CryptoKey) : null,
      });
    }
    this.#keys = keys;
    this.#jwks = Object.freeze({ keys: Object.freeze([...keys.values()].map((key) => key.publicJwk)) });
  }

  /** The public JWK of every next, active and retiring key: the JWKS document. */
  jwks(): { readonly keys: readonly JWK[] } {
    return this.#jwks;
  }

  /** A compact JWS of `claims` (given whole: iss, exp… are the caller's), signed by the active key of `alg`, its kid in the header. */
  async signJwt(alg: SigningAlg, header: { readonly typ: string }, claims: JWTPayload): Promise<string> {
    const key = [...this.#keys.values()].find((candidate) => candidate.alg === alg && candidate.signKey !== null);
    if (!key) throw new Error(`no active ${alg} signing key is loaded`);
    return new SignJWT(claims).setProtectedHeader({ alg, kid: key.kid, typ: header.typ }).sign(key.signKey!);
  }

  /**
   * The claims of a JWT this server signed with one of its published keys, chosen by the
   * header's kid alone (never a key or key URL the token carries), of one of `algorithms`,
   * with the `typ` given, not expired (unless `ignoreExpiry`: an `id_token_hint` is read past
   * its `exp`, OIDC Core §3.1.2.1); null for anything else (a revoked key's tokens included).
   */
  async verifyJwt(
    token: string,
    options: { readonly typ: string; readonly algorithms?: readonly SigningAlg[]; readonly ignoreExpiry?: boolean },
  ): Promise<JWTPayload | null> {
    try {
      const { payload } = await jwtVerify(
        token,
        (header) => {
          const key = header.kid === undefined ? undefined : this.#keys.get(header.kid);
          if (!key || key.alg !== header.alg) throw new errors.JWKSNoMatchingKey();
          return key.verifyKey;
        },
        {
          typ: options.typ,
          algorithms: [...(options.algorithms ?? SIGNING_ALGS)],
          requiredClaims: ['exp'],
          currentDate: new Date(this.#deps.now()),
          // jose compares exp and nbf with the current time give or take this tolerance, which
          // must be a finite number: the largest one ignores both.
          ...(options.ignoreExpiry ? { clockTolerance: Number.MAX_SAFE_INTEGER } : {}),
        },
      );
      return payload;
    } catch (error) {
      if (error instanceof errors.JOSEError) return null;
      throw error;
    }
  }

  /** Stops the timer. */
  close(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
  }
}
