/**
 * The second step of a login (SPEC §4.12), one contract for every factor: which step a person
 * is at, and completing it.
 *
 * The half-done login. A right password for a person who has a second factor (or must set
 * one up) opens no session: it makes a *pending login*, a row keyed by the SHA-256 of a
 * random token that travels in its own cookie (src/http/second-factor.ts), holding who and
 * what they have proven so far ('pwd'), for PENDING_LOGIN_TTL_MS. Nothing but the second-step
 * pages reads it, so nothing else works until the step is done. A signed-in person asked for
 * a second factor later (step-up) has no pending row: the session is who they are, and
 * completing the step replaces it with a new one.
 *
 * Completing it (completeSecondStep). Every factor — an app code, a recovery code, a passkey,
 * an app confirmed at the step — brings its own single-use write: a time step accepted, a
 * recovery code used, a passkey's sign count moved on, a set-up confirmed. That write and the
 * consumption of the step (the pending login's row, or the stepped-up session's) run in one
 * transaction, so of any number of concurrent completions exactly one commits; then the login
 * has proven what it had and what the factor adds (amrUnion), a session starts and
 * `login_succeeded` is recorded — in this one place, for every factor.
 */
import type { AppContext } from '../context.ts';
import { amrUnion, PASSWORD_LOGIN_AMR } from '../login.ts';
import type { PendingAuditEvent } from '../audit.ts';
import type { User } from '../store/schema.ts';
import { allOrNothing, consumePendingLogin, findPendingLogin, insertPendingLogin, type ThenInTransaction } from '../store/second-factors.ts';
import { consumeSession, sessionConnectionId } from '../store/sessions.ts';
import { hashIfWellFormed, mintToken } from '../tokens.ts';
import { endSession, startSession } from './sessions.ts';
import { connectionEnabled } from '../store/connections.ts';

/** How long a pending login waits for its second step. */
export const PENDING_LOGIN_TTL_MS = 10 * 60 * 1000;

/** A login waiting for its second step: who, and what they proved so far. */
export interface PendingLogin {
  user: User;
  amr: string;
  /** The upstream connection the first step came through; null for a password. */
  connectionId: string | null;
  idHash: string;
}

/**
 * Opens a pending login after a first step — a right password, or (`through` a connection) a
 * login at an upstream provider with its `amr` — and returns its token (for the cookie).
 */
export async function startPendingLogin(ctx: AppContext, userId: string, through?: { amr: string; connectionId: string }): Promise<string> {
  const pending = mintToken('pendingLogin');
  const now = ctx.now();
  await insertPendingLogin(ctx.db, {
    idHash: pending.hash,
    userId,
    amr: through?.amr ?? PASSWORD_LOGIN_AMR,
    connectionId: through?.connectionId ?? null,
    now,
    expiresAt: now + PENDING_LOGIN_TTL_MS,
  });
  return pending.token;
}

/** The live pending login of the token; null when unknown, expired, completed or its user disabled. */
export async function findPending(ctx: AppContext, token: string | undefined): Promise<PendingLogin | null> {
  const idHash = token === undefined ? null : hashIfWellFormed('pendingLogin', token);
  if (idHash === null) return null;
  const found = await findPendingLogin(ctx.db, idHash, ctx.now());
  if (!found) return null;
  const { pending_amr: amr, pending_connection_id: connectionId, ...user } = found;
  return { user, amr, connectionId, idHash };
}

/** Whether the step can still be completed (a pending login: not expired nor completed meanwhile; a session: yes, as far as is known). */
export async function stepStillOpen(ctx: AppContext, step: SecondStep): Promise<boolean> {
  return step.pending === undefined || (await findPendingLogin(ctx.db, step.pending.idHash, ctx.now())) !== undefined;
}

/**
 * Who is at a second step: a pending login (after a password), or a signed-in session asked
 * for a second factor it has not proven (step-up; `session` is its token).
 */
export type SecondStep =
  | { user: User; pending: PendingLogin; session?: undefined }
  | { user: User; pending?: undefined; /** Its token. */ session: string; /** How it logged in. */ amr: string };

/** How the login at the step has logged in so far. */
export function amrSoFar(step: SecondStep): string {
  return step.pending ? step.pending.amr : step.amr;
}

/** A factor's proof at the second step: its single-use write, and what it adds to the login. */
export interface FactorProof {
  /** RFC 8176 values the factor proves (added to the login's own: amrUnion). */
  amr: string;
  /** The factor's single-use write, in the transaction that completes the step: false when it was used meanwhile. */
  use: ThenInTransaction;
  /** Its audit events, committed with it. */
  audit: PendingAuditEvent[];
  /** What `login_succeeded` records besides the `amr` (a passkey: `method`). */
  detail?: { method: 'passkey' };
}

export type Completion =
  | { ok: true; /** The new session's token. */ session: string; amr: string }
  /** `used`: the factor's write found its row taken (a code used, a passkey's count moved on); `ended`: the step was completed or expired meanwhile. */
  | { ok: false; reason: 'used' | 'ended' };

/**
 * Completes the second step with the factor's proof: the factor's write and the step's
 * consumption commit together or not at all (exactly once under concurrency); then a session
 * starts — the one the request came with, and a stepped-up one, end — with the login's `amr`
 * and the factor's, and `login_succeeded` is recorded. Throttling and the factor's checks
 * are the caller's, before.
 */
export async function completeSecondStep(
  ctx: AppContext,
  step: SecondStep,
  proof: FactorProof,
  p: { address: string; /** The session the request came with, if any: it ends. */ previousSession: string | undefined },
): Promise<Completion> {
  const userId = step.user.id;
  const now = ctx.now();
  const stepUp = step.session === undefined ? null : hashIfWellFormed('session', step.session);
  if (step.session !== undefined && stepUp === null) return { ok: false, reason: 'ended' };
  // The login goes on coming through the connection it came through (disabling that ends it).
  const through = step.pending ? step.pending.connectionId : await sessionConnectionId(ctx.db, stepUp!);
  const consume: ThenInTransaction = step.pending
    ? (trx) => consumePendingLogin(trx, step.pending.idHash, now)
    : (trx) => consumeSession(trx, { idHash: stepUp!, userId, now, address: p.address });
  const refused = await allOrNothing(
    ctx.db,
    { factor: proof.use, step: consume },
    proof.audit.map((event) => event.row),
  );
  if (refused !== null) return { ok: false, reason: refused === 'factor' ? 'used' : 'ended' };
  for (const event of proof.audit) event.committed();
  // The stepped-up session ended in the transaction: the clients that got ID tokens in it are told.
  if (stepUp !== null) ctx.backchannelLogouts.wake();
  const amr = amrUnion(amrSoFar(step), proof.amr);
  const session = await startSession(ctx, userId, step.pending ? p.previousSession : undefined, amr, through, p.address);
  // A connection disabled while the step was completed ends this session too (SPEC §4.13).
  if (through !== null && !(await connectionEnabled(ctx.db, through))) {
    await endSession(ctx, session, p.address);
    return { ok: false, reason: 'ended' };
  }
  await ctx.audit({ type: 'login_succeeded', userId, address: p.address, detail: { ...proof.detail, amr } });
  return { ok: true, session, amr };
}
