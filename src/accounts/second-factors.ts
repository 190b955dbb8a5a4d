/**
 * Second factors after a password (SPEC §4.12): the authenticator app (TOTP, RFC 6238 through
 * `otpauth`: SHA-1, 6 digits, 30 s, ±1 step), recovery codes, the REQUIRE_SECOND_FACTOR
 * policy, and the reset. A code completes the second step of a login (second-step.ts) as
 * every factor does: its single-use write — the time step accepted, the recovery code
 * used, the set-up confirmed — is its proof, committed with the step's consumption, so it
 * completes once; then a session starts, with amr `pwd otp mfa`. A wrong code leaves the
 * pending login (a typo does not cost the password again) but counts as a login failure.
 *
 * Throttling: a code is reserved on the per-account and per-address login counters before it
 * is checked, like a password (accounts/login.ts), so concurrent guesses cannot outrun the
 * limit; the right one clears the account's failures. The right password before it gives its
 * attempt back without clearing them: knowing the password must not reset the count of
 * wrong codes.
 */
import { randomInt } from 'node:crypto';
import { Secret, TOTP } from 'otpauth';
import { madeBy, type Actor } from '../audit.ts';
import type { Config } from '../config.ts';
import type { AppContext } from '../context.ts';
import { open, seal } from '../protocol/seal.ts';
import type { User } from '../store/schema.ts';
import { isMultiFactor, mustHaveSecondFactor, OTP_FACTOR_AMR } from '../login.ts';
import {
  acceptStep,
  allOrNothing,
  confirmApp,
  countRecoveryCodes,
  deleteAllFactors,
  deleteApp,
  findApp,
  putUnconfirmedApp,
  replaceRecoveryCodes,
  usersWithPasskeys,
  usersWithApp,
  useRecoveryCode,
  type StoredApp,
  type ThenInTransaction,
} from '../store/second-factors.ts';
import { hashToken } from '../tokens.ts';
import { loginAccountKey, Throttled } from '../throttle.ts';
import { includesSecondFactor, provingNewFactor, secondFactorsOf, type RecentLogin } from './recent-login.ts';
import { completeSecondStep, stepStillOpen, type FactorProof, type PendingLogin, type SecondStep } from './second-step.ts';
import { endOtherSessions, endUserSessions } from './sessions.ts';
/** How long a set-up shown with its QR code waits for its confirming code. */
export const APP_SETUP_TTL_MS = 30 * 60 * 1000;
/** What may be typed into a code field; longer is refused before anything else. */
export const MAX_CODE_LENGTH = 64;

const TOTP_PARAMETERS = { algorithm: 'SHA1', digits: 6, period: 30 } as const;
/** Accepted: the current step and one on either side (RFC 6238 §5.2). */
const TOTP_WINDOW = 1;

/** Recovery codes: ten of ten letters and digits (about 50 bits each), read without dashes, spaces or case. */
export const RECOVERY_CODE_COUNT = 10;
const RECOVERY_ALPHABET = 'abcdefghjkmnpqrstuvwxyz23456789';
const RECOVERY_LENGTH = 10;

/** Whether the person has a second factor: a passkey or an authenticator app (recovery codes alone are not one). */
export async function hasSecondFactor(ctx: AppContext, userId: string): Promise<boolean> {
  return includesSecondFactor(await secondFactorsOf(ctx, userId));
}

/** Of these people, the second factors each has ('passkey', 'authenticator app'; none: absent): for the admin list. */
export async function factorNamesOf(ctx: AppContext, userIds: readonly string[]): Promise<Map<string, string[]>> {
  const [withPasskeys, withApps] = await Promise.all([usersWithPasskeys(ctx.db, userIds), usersWithApp(ctx.db, userIds)]);
  const factors = new Map<string, string[]>();
  for (const id of userIds) {
    const names = [...(withPasskeys.has(id) ? ['passkey'] : []), ...(withApps.has(id) ? ['authenticator app'] : [])];
    if (names.length > 0) factors.set(id, names);
  }
  return factors;
}

// The secret at rest: sealed under KEYS_SECRET when it is set (protocol/seal.ts), owned by the
// person, so one row's ciphertext cannot pass for another's.

async function sealAppSecret(base32: string, userId: string, keysSecret: string | null): Promise<{ secret: string; encrypted: number }> {
  const sealed = await seal('authenticator_apps', userId, base32, keysSecret);
  return { secret: sealed.value, encrypted: sealed.encrypted };
}

function openAppSecret(row: StoredApp, userId: string, keysSecret: string | null): Promise<string> {
  return open('authenticator_apps', userId, { value: row.secret, encrypted: row.encrypted }, keysSecret);
}

function totp(base32: string, user: Pick<User, 'username'>, config: Pick<Config, 'publicUrl'>): TOTP {
  return new TOTP({ issuer: `Gatehouse (${new URL(config.publicUrl).host})`, label: user.username, secret: Secret.fromBase32(base32), ...TOTP_PARAMETERS });
}

/** The time step a 6-digit code belongs to within the window, or null when it is none of them. */
function stepOf(code: string, base32: string, now: number): number | null {
  const delta = TOTP.validate({ token: code, secret: Secret.fromBase32(base32), timestamp: now, window: TOTP_WINDOW, ...TOTP_PARAMETERS });
  return delta === null ? null : TOTP.counter({ period: TOTP_PARAMETERS.period, timestamp: now }) + delta;
}

// What was typed

export type TypedCode = { kind: 'totp'; code: string } | { kind: 'recovery'; hash: string } | { kind: 'malformed'; problem: string };

/** Reads a code field: an app's 6 digits, or a recovery code (case, spaces and dashes ignored). */
export function readCode(typed: string): TypedCode {
  if (typed.length > MAX_CODE_LENGTH)
    return { kind: 'malformed', problem: 'That is too long for a code. Enter the 6 digits your app shows, or one recovery code.' };
  const compact = typed.replace(/[\s-]/g, '').toLowerCase();
  if (/^\d{6}$/.test(compact)) return { kind: 'totp', code: compact };
  if (compact.length === RECOVERY_LENGTH && [...compact].every((c) => RECOVERY_ALPHABET.includes(c))) {
    return { kind: 'recovery', hash: hashRecoveryCode(compact) };
  }
  if (compact === '') return { kind: 'malformed', problem: 'Enter the 6-digit code your authenticator app shows, or one of your recovery codes.' };
  return { kind: 'malformed', problem: 'That is not a code: an app code is 6 digits, a recovery code 10 letters and digits.' };
}

/** Domain-separated from token hashes. */
function hashRecoveryCode(compact: string): string {
  return hashToken(`recovery-code:${compact}`);
}

function mintRecoveryCode(): { display: string; hash: string } {
  const compact = Array.from({ length: RECOVERY_LENGTH }, () => RECOVERY_ALPHABET[randomInt(RECOVERY_ALPHABET.length)]).join('');
  return { display: `${compact.slice(0, 5)}-${compact.slice(5)}`, hash: hashRecoveryCode(compact) };
}

export type CodeResult =
  | { ok: true; session: string }
  | { ok: false; reason: 'malformed'; problem: string }
  | { ok: false; reason: 'wrong_code' | 'expired' }
  | { ok: false; reason: 'throttled' | 'busy'; retryAfter: number };

/**
 * The second step: an app code or a recovery code from the person at `step`. Counted on the
 * login throttle before it is checked; accepted once (the same code again fails, also when
 * submitted twice at once); completes the pending login once. Returns the new session's token.
 */
export async function submitCode(ctx: AppContext, step: SecondStep, typed: string, address: string, previousSession: string | undefined): Promise<CodeResult> {
  const code = readCode(typed);
  if (code.kind === 'malformed') return { ok: false, reason: 'malformed', problem: code.problem };
  const { throttle } = ctx.services;
  const account = loginAccountKey(step.user.id, '');
  try {
    await throttle.reserveLogin(account, address);
  } catch (error) {
    if (!(error instanceof Throttled)) throw error;
    return { ok: false, reason: error.status === 503 ? 'busy' : 'throttled', retryAfter: error.retryAfter };
  }
  const proof = await codeProof(ctx, step.user.id, code, address);
  const done = proof === null ? null : await completeSecondStep(ctx, step, proof, { address, previousSession });
  if (done?.ok) {
    await throttle.loginSucceeded(account, address);
    return { ok: true, session: done.session };
  }
  // A step that ended meanwhile (expired, or completed by a concurrent code) is not a wrong code.
  if (done?.reason === 'ended' || !(await stepStillOpen(ctx, step))) {
    await throttle.releaseLogin(account, address);
    return { ok: false, reason: 'expired' };
  }
  const reason = done !== null && code.kind === 'totp' ? 'code_reused' : 'wrong_code';
  await ctx.audit({ type: 'login_failed', userId: step.user.id, address, detail: { reason } });
  return { ok: false, reason: 'wrong_code' };
}

/** What a right code proves at the second step (its single-use write); null for a wrong one. */
async function codeProof(ctx: AppContext, userId: string, code: Exclude<TypedCode, { kind: 'malformed' }>, address: string): Promise<FactorProof | null> {
  const used = (factor: 'app' | 'recovery_code') => [ctx.audit.pending({ type: 'second_factor_used', userId, address, detail: { factor } })];
  if (code.kind === 'recovery') {
    return { amr: OTP_FACTOR_AMR, use: (trx) => useRecoveryCode(trx, { userId, codeHash: code.hash }), audit: used('recovery_code') };
  }
  const app = await findApp(ctx.db, userId, ctx.now());
  const timeStep = app?.confirmed_at != null ? stepOf(code.code, await openAppSecret(app, userId, ctx.config.keys.secret), ctx.now()) : null;
  if (timeStep === null) return null;
  return { amr: OTP_FACTOR_AMR, use: (trx) => acceptStep(trx, { userId, step: timeStep }), audit: used('app') };
}

// The authenticator app

export interface AppSetup {
  /** The secret in base32, to type in by hand. */
  secret: string;
  /** The otpauth:// URI the QR code holds. */
  uri: string;
  /** The QR code, an SVG document (drawn by `qrcode`). */
  qrSvg: string;
}

/**
 * Starts setting up an app: a new secret, stored unconfirmed until a code from it comes back.
 * Null when the person has a confirmed app already: a second one is refused (remove it first).
 */
export async function beginAppSetup(ctx: AppContext, user: User): Promise<AppSetup | null> {
  const now = ctx.now();
  const existing = await findApp(ctx.db, user.id, now);
  if (existing?.confirmed_at != null) return null;
  const secret = new Secret({ size: 20 }).base32;
  const sealed = await sealAppSecret(secret, user.id, ctx.config.keys.secret);
  if (!(await putUnconfirmedApp(ctx.db, { userId: user.id, ...sealed, now, expiresAt: now + APP_SETUP_TTL_MS }))) return null;
  return appSetup(ctx, user, secret);
}

/** The set-up in progress, shown again (after a wrong code); null when there is none. */
export async function currentAppSetup(ctx: AppContext, user: User): Promise<AppSetup | null> {
  const existing = await findApp(ctx.db, user.id, ctx.now());
  if (!existing || existing.confirmed_at !== null) return null;
  return appSetup(ctx, user, await openAppSecret(existing, user.id, ctx.config.keys.secret));
}

async function appSetup(ctx: AppContext, user: User, secret: string): Promise<AppSetup> {
  const uri = totp(secret, user, ctx.config).toString();
  // Loaded when a QR code is drawn: a process that draws none never pays for it.
  const { default: QRCode } = await import('qrcode');
  const qrSvg = await QRCode.toString(uri, { type: 'svg', errorCorrectionLevel: 'M', margin: 2 });
  return { secret: secret.replace(/(.{4})(?=.)/g, '$1 '), uri, qrSvg };
}

/**
 * Where an app's set-up is confirmed: at a pending login's second step (a person without a
 * second factor yet), or in a session (its token) whose login is recent — a change to the
 * person's factors, from the security page or as step-up.
 */
export type SetUpAt = { user: User; pending: PendingLogin; session?: undefined } | { user: User; pending?: undefined; session: string; recent: RecentLogin };

export type ConfirmResult =
  | { ok: true; /** The session that replaces the one the person came with (or their pending login). */ session: string }
  | { ok: false; reason: 'malformed'; problem: string }
  | { ok: false; reason: 'wrong_code' | 'exists' | 'no_setup' };

/**
 * Confirms the set-up with a current code from the app: the app is the person's from then
 * on, the login (pending, or the session at `step`) counts as one with a second factor, and
 * the person's other sessions end. A wrong code changes nothing.
 */
export async function confirmAppSetup(
  ctx: AppContext,
  step: SetUpAt,
  typed: string,
  address: string,
  previousSession: string | undefined,
): Promise<ConfirmResult> {
  const code = readCode(typed);
  if (code.kind === 'malformed') return { ok: false, reason: 'malformed', problem: code.problem };
  if (code.kind !== 'totp') return { ok: false, reason: 'malformed', problem: 'Enter the 6-digit code your authenticator app shows for Gatehouse.' };
  const { user } = step;
  // At a login's second step (a pending login, or a session without a second factor) the set-up
  // is for a person who has none yet: one with a passkey proves it, or a password alone would
  // enrol an attacker's app and complete the login with it.
  if ((step.session === undefined || !isMultiFactor(step.recent.login.amr)) && (await hasSecondFactor(ctx, user.id))) return { ok: false, reason: 'exists' };
  const now = ctx.now();
  const app = await findApp(ctx.db, user.id, now);
  if (!app) return { ok: false, reason: 'no_setup' };
  if (app.confirmed_at !== null) return { ok: false, reason: 'exists' };
  const timeStep = stepOf(code.code, await openAppSecret(app, user.id, ctx.config.keys.secret), now);
  if (timeStep === null) return { ok: false, reason: 'wrong_code' };
  const confirm: ThenInTransaction = (trx) => confirmApp(trx, { userId: user.id, secret: app.secret, step: timeStep, now });
  const added = (upgraded: boolean) =>
    ctx.audit.pending({ type: 'second_factor_added', userId: user.id, address, detail: { factor: 'app', ...(upgraded && { session_upgraded: true }) } });
  const notConfirmed = async (): Promise<ConfirmResult> => {
    const again = await findApp(ctx.db, user.id, ctx.now());
    return { ok: false, reason: again?.confirmed_at != null ? 'exists' : 'no_setup' };
  };
  if (step.session === undefined) {
    // At a login's second step, the confirmed app is the factor that completes it.
    const done = await completeSecondStep(ctx, step, { amr: OTP_FACTOR_AMR, use: confirm, audit: [added(false)] }, { address, previousSession });
    if (!done.ok) return notConfirmed();
    // The login counts as one with the app from now on; the person's other sessions (and half-done logins) end.
    await endOtherSessions(ctx, user.id, done.session, address, { andPendingLogins: true });
    return { ok: true, session: done.session };
  }
  // From a session, confirming the app counts as using it: a login without a second factor becomes
  // one with the app, in the transaction that confirms it (accounts/recent-login.ts).
  const proof = provingNewFactor(ctx, step.recent, step.session, OTP_FACTOR_AMR);
  const event = added(proof !== null);
  if ((await allOrNothing(ctx.db, { confirm, session: proof?.record ?? (async () => true) }, [event.row])) !== null) return notConfirmed();
  event.committed();
  // The session stays (it proved a second factor already) or was replaced; the person's others end.
  const session = proof?.session ?? step.session;
  await endOtherSessions(ctx, user.id, session, address);
  return { ok: true, session };
}

export type RemoveResult = { ok: true } | { ok: false; reason: 'none' | 'required' };

/**
 * Removes the person's app; their other sessions end. Removing it is refused when it is their
 * last second factor and REQUIRE_SECOND_FACTOR requires one; with it go their recovery
 * codes when nothing else is left (recovery codes alone are not a second factor).
 */
export async function removeApp(ctx: AppContext, recent: RecentLogin, session: string | undefined, address: string): Promise<RemoveResult> {
  const { user } = recent;
  const keep = mustHaveSecondFactor(ctx.config, user);
  const removed = ctx.audit.pending({ type: 'second_factor_removed', userId: user.id, address, detail: { factor: 'app' } });
  if (!(await deleteApp(ctx.db, user.id, [removed.row], keep))) {
    return { ok: false, reason: keep && (await findApp(ctx.db, user.id, ctx.now()))?.confirmed_at != null ? 'required' : 'none' };
  }
  removed.committed();
  await endOtherSessions(ctx, user.id, session, address);
  return { ok: true };
}

/**
 * Ten new recovery codes, shown once; the old ones are void from the same commit. Null when
 * the person has no second factor to recover (recovery codes alone are not one).
 */
export async function generateRecoveryCodes(ctx: AppContext, recent: RecentLogin, session: string | undefined, address: string): Promise<string[] | null> {
  const { user } = recent;
  if (!(await hasSecondFactor(ctx, user.id))) return null;
  const codes = Array.from({ length: RECOVERY_CODE_COUNT }, mintRecoveryCode);
  const generated = ctx.audit.pending({ type: 'recovery_codes_generated', userId: user.id, address, detail: { count: codes.length } });
  await replaceRecoveryCodes(
    ctx.db,
    user.id,
    codes.map((c) => c.hash),
    ctx.now(),
    [generated.row],
  );
  generated.committed();
  await endOtherSessions(ctx, user.id, session, address);
  return codes.map((c) => c.display);
}

/** What the security page shows of the person's app and recovery codes. */
export async function factorSummary(ctx: AppContext, userId: string): Promise<{ app: { confirmedAt: number } | null; recoveryCodesLeft: number }> {
  const app = await findApp(ctx.db, userId, ctx.now());
  return {
    app: app?.confirmed_at != null ? { confirmedAt: app.confirmed_at } : null,
    recoveryCodesLeft: await countRecoveryCodes(ctx.db, userId),
  };
}

/**
 * `gatehouse user reset-second-factor`: removes every second factor of the person (passkeys,
 * app, recovery codes; their pending logins too) and ends their sessions (with back-channel
 * logout); audited.
 */
export async function resetSecondFactor(ctx: AppContext, user: User, actor: Actor): Promise<{ passkeys: number; apps: number; recoveryCodes: number }> {
  const event = ctx.audit.pending({ type: 'second_factor_reset', ...madeBy(actor), userId: user.id });
  const removed = await deleteAllFactors(ctx.db, user.id, [event.row]);
  event.committed();
  await endUserSessions(ctx, user.id, actor.address);
  return removed;
}
