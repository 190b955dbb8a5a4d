/**
 * First-run setup (SPEC §1): while no enabled administrator exists, `gatehouse serve`
 * prints a one-time link that lets the person who started the server create the first
 * administrator in the browser. `gatehouse user create <name> --email <e> --admin` does
 * the same from the command line.
 *
 * The link carries a setup token (256 bits from the CSPRNG, see tokens.ts) in its query
 * string, which the request log never records; the database keeps only its SHA-256. It
 * expires after SETUP_LINK_TTL, works once, and stops working as soon as any administrator
 * exists, so a link left in a terminal's scrollback is worth nothing later.
 */
import type { AppContext } from '../context.ts';
import { deleteSetupTokens, insertSetupToken, isLiveSetupToken, useSetupToken } from '../store/setup-tokens.ts';
import { countAdmins } from '../store/users.ts';
import { hashIfWellFormed, mintToken } from '../tokens.ts';
import { createAccount, type User } from './users.ts';
import { mustHaveSecondFactor, PASSWORD_LOGIN_AMR } from '../login.ts';
import { startPendingLogin } from './second-step.ts';
import { startSession } from './sessions.ts';

/** Seconds a setup link stays valid. */
export const SETUP_LINK_TTL = 3600;

/** Thrown when the link is unknown, expired, already used, or an administrator exists. */
export class SetupLinkInvalid extends Error {
  override name = 'SetupLinkInvalid';
}

/** A new setup link when there is no enabled administrator; null when there is one. */
export async function firstRunSetupLink(ctx: Pick<AppContext, 'config' | 'db' | 'now'>): Promise<string | null> {
  if ((await countAdmins(ctx.db)) > 0) return null;
  const setup = mintToken('setup');
  const now = ctx.now();
  await insertSetupToken(ctx.db, { hash: setup.hash, now, expiresAt: now + SETUP_LINK_TTL * 1000 });
  return `${ctx.config.publicUrl}/setup?${new URLSearchParams({ token: setup.token })}`;
}

/** Throws SetupLinkInvalid unless `token` opens the setup page now. */
export async function checkSetupToken(ctx: AppContext, token: string | undefined): Promise<void> {
  const hash = token === undefined ? null : hashIfWellFormed('setup', token);
  if (hash === null || !(await isLiveSetupToken(ctx.db, hash, ctx.now())) || (await countAdmins(ctx.db)) > 0) {
    throw new SetupLinkInvalid('This setup link has expired or has already been used.');
  }
}

/**
 * Creates the first administrator and uses the link up, in one transaction: invalid input
 * (an AccountError) leaves the link usable, and of two concurrent submissions only one
 * creates an account. `address` is the request's, for the audit trail.
 */
export async function createFirstAdministrator(
  ctx: AppContext,
  token: string | undefined,
  account: { username: string; email: string; password: string },
  address: string,
): Promise<User> {
  await checkSetupToken(ctx, token);
  const hash = hashIfWellFormed('setup', token!)!;
  const now = ctx.now();
  const setup = await useSetupToken(ctx.db, hash, now, (trx) => createAccount(trx, { ...account, isAdmin: true }, now));
  if (!setup.used) throw new SetupLinkInvalid('This setup link has expired or has already been used.');
  await deleteSetupTokens(ctx.db); // any other links printed meanwhile are void too
  await ctx.audit({ type: 'user_created', userId: setup.created.id, address, detail: { admin: true, setup_link: true } });
  return setup.created;
}

/**
 * The login the first administrator's password starts, as any password login would: a session,
 * or — when REQUIRE_SECOND_FACTOR covers them (`admins`, `all`) — a pending login whose second
 * step is the set-up of a factor, so that no password-only session of theirs exists.
 */
export async function firstAdministratorLogin(
  ctx: AppContext,
  user: User,
  previousSession: string | undefined,
  address: string,
): Promise<{ session: string; pending?: undefined } | { pending: string }> {
  if (mustHaveSecondFactor(ctx.config, user)) return { pending: await startPendingLogin(ctx, user.id) };
  return { session: await startSession(ctx, user.id, previousSession, PASSWORD_LOGIN_AMR, null, address) };
}
