/**
 * What the unit tests at paths mirroring src/ share: a real AppContext over an in-memory
 * SQLite database with a clock the test moves, people made the way the fixtures make them,
 * and an authenticator app set up through the exported second-factor functions.
 */
import { totpCode as appCode } from '../../support/second-factors.ts';
import { createAccount } from '../../../src/accounts/users.ts';
import { findPending, startPendingLogin } from '../../../src/accounts/second-step.ts';
import { beginAppSetup, confirmAppSetup } from '../../../src/accounts/second-factors.ts';
import { loadConfig } from '../../../src/config.ts';
import type { OpenContext } from '../../../src/context.ts';
import { openContext } from '../../../src/open-context.ts';
import { migrate, openStore, type Store } from '../../../src/store/database.ts';
import type { User } from '../../../src/store/schema.ts';

export const PUBLIC_URL = 'https://auth.example';
export const ADDRESS = '192.0.2.1';
/** A fixed start, in the middle of a TOTP step (30 s): 2026-01-01T00:00:10Z. */
export const START = Date.UTC(2026, 0, 1, 0, 0, 10);

export interface TestContext {
  readonly ctx: OpenContext;
  readonly store: Store;
  /** Epoch milliseconds: what `ctx.now()` answers; move it to move time. */
  readonly clock: { now: number };
  close(): Promise<void>;
}

const silent = { info() {}, warn() {}, error() {} };

/** A context as `gatehouse serve` opens it (keys made at first start included), on `sqlite::memory:`, at START. */
export async function memoryContext(env: Record<string, string> = {}): Promise<TestContext> {
  const config = loadConfig({ DATABASE_URL: 'sqlite::memory:', PUBLIC_URL, ...env });
  const store = openStore(config.database);
  await migrate(store);
  const clock = { now: START };
  const ctx = await openContext(config, store, silent, { now: () => clock.now });
  return {
    ctx,
    store,
    clock,
    async close() {
      await ctx.close();
      await store.close();
    },
  };
}

/** A person with a password, an e-mail address `<username>@example.com` (verified or not). */
export function person(ctx: OpenContext, username: string, emailVerified = false): Promise<User> {
  return createAccount(
    ctx.db,
    { username, email: `${username}@example.com`, password: 'correct horse battery staple', isAdmin: false, emailVerified },
    ctx.now(),
  );
}

/** The code an app with this secret (base32, spaces ignored) shows at `at`. */
export function totpCode(secret: string, at: number): string {
  return appCode(secret.replace(/\s/g, ''), at);
}

/**
 * Sets up an authenticator app for `user` at a pending login's second step, confirmed with
 * the current step's code; returns the secret and the session that login started.
 */
export async function setUpApp(ctx: OpenContext, user: User): Promise<{ secret: string; session: string }> {
  const pending = await findPending(ctx, await startPendingLogin(ctx, user.id));
  const setup = await beginAppSetup(ctx, user);
  if (!pending || !setup) throw new Error('could not start an app set-up');
  const confirmed = await confirmAppSetup(ctx, { user, pending }, totpCode(setup.secret, ctx.now()), ADDRESS, undefined);
  if (!confirmed.ok) throw new Error(`the app set-up was refused: ${confirmed.reason}`);
  return { secret: setup.secret.replace(/\s/g, ''), session: confirmed.session };
}
