/**
 * Passkeys (SPEC §4.12): WebAuthn credentials as a first factor that counts as two. Every
 * WebAuthn structure is parsed and checked by @simplewebauthn/server; this module decides
 * which challenge a response may answer, whose credential it is, and what is stored.
 *
 * Challenges. Each is 32 random bytes, stored only as its SHA-256, single use (the
 * statement that accepts it deletes it: store/passkeys.ts) and five minutes long. Before a
 * login there is no session to bind a challenge to, so every challenge is bound to the
 * browser that asked for it through a cookie of its own (`gatehouse_webauthn`, HttpOnly,
 * SameSite=Strict, 256 random bits, stored as its hash): a response carried to another
 * browser — phished, or replayed from a log — finds no challenge there. The CSRF secret
 * would have done too, but it is renewed at every login and logout, which would void a
 * challenge a second tab is answering; a cookie of its own keeps the two concerns apart. A
 * challenge to add a passkey is bound, besides, to the user whose session asked.
 *
 * The sign count is compared here, after the signature has been verified (the library's own
 * comparison would run before, and a forged response could then make a genuine
 * authenticator look cloned in the audit trail), and stored by a conditional update on the
 * count that was checked: two uses racing with one count cannot both be accepted.
 */
import { randomBytes } from 'node:crypto';
import type {
  AuthenticationResponseJSON,
  PublicKeyCredentialCreationOptionsJSON,
  PublicKeyCredentialRequestOptionsJSON,
  RegistrationResponseJSON,
} from '@simplewebauthn/server';
import type { AppContext } from '../context.ts';
import { OAuthError } from '../protocol/errors.ts';
import { holdsNul } from '../protocol/params.ts';
import {
  consumeChallenge,
  deletePasskey,
  findPasskey,
  insertChallenge,
  insertPasskey,
  listPasskeys,
  recordPasskeyUse,
  renamePasskey,
} from '../store/passkeys.ts';
import type { ChallengePurpose, PasskeyRow, User } from '../store/schema.ts';
import { findUserById } from '../store/users.ts';
import { loginAccountKey, Throttled } from '../throttle.ts';
import { hashIfWellFormed, hashToken, mintToken } from '../tokens.ts';
import type { PasskeyFailure, SessionLoginResult } from './login.ts';
import { NOT_RECENT, provingNewFactor, type RecentLogin } from './recent-login.ts';
import { completeSecondStep, type FactorProof, type SecondStep } from './second-step.ts';
import { endOtherSessions, startSession } from './sessions.ts';
import { mustHaveSecondFactor, PASSKEY_LOGIN_AMR } from '../login.ts';

/** How long a challenge may be answered. */
export const CHALLENGE_TTL_MS = 5 * 60 * 1000;
/** COSE algorithms (SPEC §4.12): ES256, EdDSA, RS256, in the order offered. */
export const PASSKEY_ALGORITHMS = [-7, -8, -257];
/** The longest name a person may give a passkey. */
export const PASSKEY_NAME_MAX = 64;
/** The longest response accepted: a real one is a few kilobytes; the body limit is 64 KiB anyway. */
const RESPONSE_MAX = 32 * 1024;

/** The value of the browser's binding cookie: its own if well-formed, else a new one to set. */
export function bindingFor(cookie: string | undefined): { token: string; fresh: boolean } {
  if (cookie !== undefined && hashIfWellFormed('webauthnBinding', cookie) !== null) return { token: cookie, fresh: false };
  return { token: mintToken('webauthnBinding').token, fresh: true };
}

function passkeyConfig(ctx: AppContext) {
  const webauthn = ctx.config.webauthn;
  if (webauthn === null) throw new OAuthError('invalid_request', 'Passkeys are not available on this server.', 'passkeys are off', 404);
  return webauthn;
}

async function newChallenge(ctx: AppContext, binding: string, purpose: ChallengePurpose, userId: string | null): Promise<Uint8Array<ArrayBuffer>> {
  const challenge = new Uint8Array(randomBytes(32));
  const now = ctx.now();
  const bindingHash = hashIfWellFormed('webauthnBinding', binding);
  if (bindingHash === null) throw new Error('a challenge needs a well-formed binding');
  await insertChallenge(ctx.db, {
    challengeHash: hashToken(Buffer.from(challenge).toString('base64url')),
    bindingHash,
    purpose,
    userId,
    now,
    expiresAt: now + CHALLENGE_TTL_MS,
  });
  return challenge;
}

/** A refusal of a WebAuthn response: one message for people, the reason for the log. */
function refused(description: string, detail: string, status = 400): OAuthError {
  return new OAuthError('invalid_request', description, detail, status);
}

/**
 * @simplewebauthn/server and its helpers, loaded at the first WebAuthn step: their CBOR and
 * ASN.1 parsers are the largest share of a process's start-up, and most processes — the
 * command line, a server nobody uses a passkey on yet — never run a ceremony.
 */
let library: Promise<{ server: typeof import('@simplewebauthn/server'); helpers: typeof import('@simplewebauthn/server/helpers') }> | undefined;
function webauthn() {
  library ??= Promise.all([import('@simplewebauthn/server'), import('@simplewebauthn/server/helpers')]).then(([server, helpers]) => ({ server, helpers }));
  return library;
}

/**
 * The response as the browser library sent it (JSON text in a form field), with the
 * challenge its client data names; undefined when it is not shaped like one. The form field
 * cannot hold NUL (params.ts), but its JSON can (`\u0000`), in the credential ID looked up
 * by a login: such a response is malformed, as anything holding NUL is (holdsNul).
 */
async function parseResponse<T extends RegistrationResponseJSON | AuthenticationResponseJSON>(
  text: string,
): Promise<{ response: T; challenge: string } | undefined> {
  if (text.length === 0 || text.length > RESPONSE_MAX) return undefined;
  const { isoBase64URL, decodeClientDataJSON } = (await webauthn()).helpers;
  try {
    const response = JSON.parse(text) as T;
    if (
      holdsNul(response) ||
      typeof response !== 'object' ||
      response === null ||
      typeof response.id !== 'string' ||
      typeof response.response !== 'object' ||
      response.response === null
    )
      return undefined;
    const clientData = (response.response as { clientDataJSON?: unknown }).clientDataJSON;
    if (typeof clientData !== 'string' || !isoBase64URL.isBase64URL(clientData)) return undefined;
    const challenge = decodeClientDataJSON(clientData).challenge;
    return typeof challenge === 'string' && challenge.length <= 128 ? { response, challenge } : undefined;
  } catch {
    return undefined;
  }
}

/** Takes the challenge a response names, if this browser was given it for this purpose. */
async function takeChallenge(ctx: AppContext, challenge: string, binding: string | undefined, purpose: ChallengePurpose) {
  const bindingHash = binding === undefined ? null : hashIfWellFormed('webauthnBinding', binding);
  if (bindingHash === null) return undefined;
  return consumeChallenge(ctx.db, { challengeHash: hashToken(challenge), bindingHash, purpose, now: ctx.now() });
}

// ---------------------------------------------------------------------------------------
// Adding, naming and removing passkeys (the person's own page: src/http/account-security.ts)

export interface PasskeyView {
  id: string;
  name: string;
  createdAt: number;
  lastUsedAt: number | null;
}

export async function passkeysOf(ctx: AppContext, userId: string): Promise<PasskeyView[]> {
  return (await listPasskeys(ctx.db, userId)).map((row) => ({ id: row.id, name: row.name, createdAt: row.created_at, lastUsedAt: row.last_used_at }));
}

/** A passkey's name as typed: trimmed, one line, not empty, at most PASSKEY_NAME_MAX characters. */
export function passkeyName(typed: string): string {
  const name = typed.replace(/\s+/g, ' ').trim();
  if (name === '') throw new OAuthError('invalid_request', 'Give the passkey a name, such as the device it is on.');
  if ([...name].length > PASSKEY_NAME_MAX) throw new OAuthError('invalid_request', `A passkey's name is at most ${PASSKEY_NAME_MAX} characters.`);
  if (/[\p{Cc}\p{Cf}]/u.test(name)) throw new OAuthError('invalid_request', "A passkey's name cannot contain control characters.");
  return name;
}

/** What the browser needs to make a passkey for the person (navigator.credentials.create). */
export async function registrationOptions(ctx: AppContext, recent: RecentLogin, binding: string): Promise<PublicKeyCredentialCreationOptionsJSON> {
  const { user } = recent;
  const { rpId } = passkeyConfig(ctx);
  const existing = await listPasskeys(ctx.db, user.id);
  const challenge = await newChallenge(ctx, binding, 'register', user.id);
  return (await webauthn()).server.generateRegistrationOptions({
    rpName: 'Gatehouse',
    rpID: rpId,
    userName: user.username,
    // The user handle: the account's id, a random UUID — no personal data (WebAuthn L2 §14.6.1).
    userID: new TextEncoder().encode(user.id),
    userDisplayName: user.display_name ?? user.username,
    challenge,
    timeout: CHALLENGE_TTL_MS,
    attestationType: 'none',
    excludeCredentials: existing.map((row) => ({ id: row.id, transports: transportsOf(row) })),
    authenticatorSelection: { residentKey: 'required', requireResidentKey: true, userVerification: 'required' },
    supportedAlgorithmIDs: PASSKEY_ALGORITHMS,
  });
}

function transportsOf(row: PasskeyRow): string[] {
  try {
    const transports = JSON.parse(row.transports) as unknown;
    return Array.isArray(transports) ? transports.filter((t): t is string => typeof t === 'string') : [];
  } catch {
    return [];
  }
}

/**
 * Verifies the browser's answer to a registration challenge and stores the passkey, for a
 * person whose login is recent (recent-login.ts). A registration with user
 * verification proves the passkey as a login with it would: with it, a session that had proved
 * no second factor is replaced, in the same transaction, by one that has (provingNewFactor);
 * `session` is then its token (null: the session stays).
 */
export async function addPasskey(
  ctx: AppContext,
  p: { recent: RecentLogin; session: string | undefined; binding: string | undefined; response: string; name: string; address: string },
): Promise<{ added: PasskeyView; session: string | null }> {
  const { user } = p.recent;
  const { rpId, origin } = passkeyConfig(ctx);
  const name = passkeyName(p.name);
  const parsed = await parseResponse<RegistrationResponseJSON>(p.response);
  if (parsed === undefined) throw refused('The passkey could not be read. Try again.', 'malformed registration response');
  const challenge = await takeChallenge(ctx, parsed.challenge, p.binding, 'register');
  if (challenge === undefined || challenge.userId !== user.id) {
    throw refused(
      'This passkey request has expired or was not made here. Try again.',
      'registration challenge unknown, used, expired, or of another browser or user',
    );
  }
  let verified;
  try {
    verified = await (
      await webauthn()
    ).server.verifyRegistrationResponse({
      response: parsed.response,
      expectedChallenge: parsed.challenge,
      expectedOrigin: origin,
      expectedRPID: rpId,
      requireUserVerification: true,
      supportedAlgorithmIDs: PASSKEY_ALGORITHMS,
    });
  } catch (error) {
    throw refused('The passkey could not be verified. Try again.', `registration refused: ${(error as Error).message}`);
  }
  if (!verified.verified) throw refused('The passkey could not be verified. Try again.', 'registration not verified');
  const { credential } = verified.registrationInfo;
  const now = ctx.now();
  const proof = provingNewFactor(ctx, p.recent, p.session, PASSKEY_LOGIN_AMR);
  const audit = ctx.audit.pending({
    // A factor added, as the authenticator app's is (second-factors.ts): one type for every factor.
    type: 'second_factor_added',
    userId: user.id,
    address: p.address,
    // The session counts as a login with the passkey from now on: the trail says so.
    detail: { factor: 'passkey', name, credential: credential.id.slice(0, 16), ...(proof && { session_upgraded: true }) },
  });
  const stored = await insertPasskey(
    ctx.db,
    {
      id: credential.id,
      userId: user.id,
      publicKey: (await webauthn()).helpers.isoBase64URL.fromBuffer(credential.publicKey),
      signCount: credential.counter,
      transports: JSON.stringify(credential.transports ?? []),
      name,
      now,
    },
    audit.row,
    proof?.record,
  );
  if (stored === 'duplicate') throw refused('This passkey is already registered.', 'credential id already stored', 409);
  if (stored === 'refused') throw new OAuthError('access_denied', NOT_RECENT, 'session ended or went stale while adding a passkey', 403);
  audit.committed();
  return { added: { id: credential.id, name, createdAt: now, lastUsedAt: null }, session: proof?.session ?? null };
}

export async function renameUserPasskey(ctx: AppContext, p: { recent: RecentLogin; id: string; name: string; address: string }): Promise<boolean> {
  const name = passkeyName(p.name);
  const { user } = p.recent;
  const audit = ctx.audit.pending({ type: 'passkey_renamed', userId: user.id, address: p.address, detail: { name, credential: p.id.slice(0, 16) } });
  const renamed = await renamePasskey(ctx.db, { userId: user.id, id: p.id, name }, audit.row);
  if (renamed) audit.committed();
  return renamed;
}

/**
 * Removes one of the person's passkeys and ends their other sessions (whoever holds one may
 * be why the passkey is removed). Refused when REQUIRE_SECOND_FACTOR requires the person to
 * keep a second factor and this is their last. Returns false when there was nothing to remove.
 */
export async function removeUserPasskey(
  ctx: AppContext,
  p: { recent: RecentLogin; id: string; session: string | undefined; address: string },
): Promise<boolean> {
  const { user } = p.recent;
  const passkey = await findPasskey(ctx.db, p.id);
  if (passkey === undefined || passkey.user_id !== user.id) return false;
  const keep = mustHaveSecondFactor(ctx.config, user);
  const audit = ctx.audit.pending({
    type: 'second_factor_removed',
    userId: user.id,
    address: p.address,
    detail: { factor: 'passkey', name: passkey.name, credential: p.id.slice(0, 16) },
  });
  if (!(await deletePasskey(ctx.db, { userId: user.id, id: p.id, keepASecondFactor: keep }, audit.row))) {
    if (keep && (await findPasskey(ctx.db, p.id)) !== undefined) {
      throw new OAuthError(
        'invalid_request',
        'This is your last second factor, and this server requires one: add another before you remove it.',
        'last second factor',
        409,
      );
    }
    return false;
  }
  audit.committed();
  await endOtherSessions(ctx, user.id, p.session, p.address);
  return true;
}

// ---------------------------------------------------------------------------------------
// Logging in with a passkey

/**
 * What the browser needs to ask for a passkey (navigator.credentials.get): any passkey of
 * this site (discoverable) for a login, or one of `user`'s for their second step.
 */
export async function authenticationOptions(ctx: AppContext, binding: string, user?: User): Promise<PublicKeyCredentialRequestOptionsJSON> {
  const { rpId } = passkeyConfig(ctx);
  const allowCredentials = user === undefined ? undefined : (await listPasskeys(ctx.db, user.id)).map((row) => ({ id: row.id, transports: transportsOf(row) }));
  const challenge = await newChallenge(ctx, binding, user === undefined ? 'login' : 'second_step', user?.id ?? null);
  return (await webauthn()).server.generateAuthenticationOptions({
    rpID: rpId,
    challenge,
    timeout: CHALLENGE_TTL_MS,
    userVerification: 'required',
    allowCredentials,
  });
}

/** Whether the person has a passkey they could use here (passkeys on, and one stored). */
export async function canUsePasskey(ctx: AppContext, userId: string): Promise<boolean> {
  return ctx.config.webauthn !== null && (await listPasskeys(ctx.db, userId)).length > 0;
}

export interface PasskeyLoginAttempt {
  /** The browser library's response, as JSON text. */
  response: string;
  binding: string | undefined;
  address: string;
  /** The session the attempt came with, if any: it ends (sessions.ts startSession). */
  session: string | undefined;
  /**
   * A passkey as the second step, after a right password (or as step-up of a session that
   * proved one factor): the passkey must be the person's, and completes their step (second-step.ts).
   */
  secondStep?: SecondStep;
}

/**
 * A login with a passkey: like a password login (login.ts) it is reserved on the throttle's
 * counters first — the account's, once the credential names one — and a refusal counts as a
 * failed login. The session it starts has `amr` `hwk user mfa`.
 */
export async function logInWithPasskey(ctx: AppContext, attempt: PasskeyLoginAttempt): Promise<SessionLoginResult> {
  const { rpId, origin } = passkeyConfig(ctx);
  const { throttle } = ctx.services;
  const parsed = await parseResponse<AuthenticationResponseJSON>(attempt.response);
  const passkey = parsed === undefined || parsed.response.id.length > 1024 ? undefined : await findPasskey(ctx.db, parsed.response.id);
  const step = attempt.secondStep;
  const account = loginAccountKey(step?.user.id ?? passkey?.user_id, `passkey:${parsed?.response.id.slice(0, 1024) ?? ''}`);
  try {
    await throttle.reserveLogin(account, attempt.address);
  } catch (error) {
    if (!(error instanceof Throttled)) throw error;
    return { ok: false, reason: error.status === 503 ? 'busy' : 'throttled', retryAfter: error.retryAfter };
  }
  const fail = async (reason: PasskeyFailure, userId: string | null): Promise<SessionLoginResult> => {
    await ctx.audit({ type: 'login_failed', userId, address: attempt.address, detail: { method: 'passkey', reason } });
    return { ok: false, reason: 'passkey_refused', passkeyReason: reason };
  };
  if (parsed === undefined) return fail('malformed_response', null);
  // The challenge is spent whatever follows: a response is answered once.
  const challenge = await takeChallenge(ctx, parsed.challenge, attempt.binding, step ? 'second_step' : 'login');
  if (challenge === undefined || (step && challenge.userId !== step.user.id)) return fail('unknown_challenge', step?.user.id ?? passkey?.user_id ?? null);
  if (passkey === undefined) return fail('unknown_credential', step?.user.id ?? null);
  if (step && passkey.user_id !== step.user.id) return fail('unknown_credential', step.user.id);
  const user = await findUserById(ctx.db, passkey.user_id);
  if (user === undefined) return fail('unknown_credential', null);
  // WebAuthn L2 §7.2 step 6: the user handle must be the credential owner's.
  const handle = parsed.response.response.userHandle;
  const { isoBase64URL } = (await webauthn()).helpers;
  if (typeof handle !== 'string' || !isoBase64URL.isBase64URL(handle) || Buffer.from(handle, 'base64url').toString('utf8') !== user.id) {
    return fail('user_handle_mismatch', user.id);
  }
  if (user.disabled) return fail('account_disabled', user.id);
  let verified;
  try {
    verified = await (
      await webauthn()
    ).server.verifyAuthenticationResponse({
      response: parsed.response,
      expectedChallenge: parsed.challenge,
      expectedOrigin: origin,
      expectedRPID: rpId,
      // The count is compared below, once the signature is known to be good.
      credential: { id: passkey.id, publicKey: isoBase64URL.toBuffer(passkey.public_key), counter: 0, transports: transportsOf(passkey) },
      requireUserVerification: true,
    });
  } catch {
    // The library's reason (bad signature, user not verified, wrong origin…) names no secret,
    // but neither does it help anyone but an attacker: the audit says "not verified".
    return fail('not_verified', user.id);
  }
  if (!verified.verified) return fail('not_verified', user.id);
  const count = verified.authenticationInfo.newCounter;
  // WebAuthn L2 §7.2 step 21: a count that did not grow means two authenticators hold the key.
  if ((count > 0 || passkey.sign_count > 0) && count <= passkey.sign_count) {
    await ctx.audit({
      type: 'passkey_sign_count_regressed',
      userId: user.id,
      address: attempt.address,
      detail: { credential: passkey.id.slice(0, 16), name: passkey.name, stored: passkey.sign_count, presented: count },
    });
    return fail('sign_count_regressed', user.id);
  }
  const use = { id: passkey.id, checkedCount: passkey.sign_count, newCount: count, now: ctx.now() };
  if (step) {
    // The count moved on is the passkey's proof: committed with the step's consumption, once. After a password: `pwd hwk user mfa`.
    const proof: FactorProof = { amr: PASSKEY_LOGIN_AMR, use: (trx) => recordPasskeyUse(trx, use), audit: [], detail: { method: 'passkey' } };
    const done = await completeSecondStep(ctx, step, proof, { address: attempt.address, previousSession: attempt.session });
    if (!done.ok) return fail(done.reason === 'used' ? 'concurrent_use' : 'second_step_ended', user.id);
    await throttle.loginSucceeded(account, attempt.address);
    return { ok: true, user, session: done.session };
  }
  if (!(await recordPasskeyUse(ctx.db, use))) return fail('concurrent_use', user.id);
  await throttle.loginSucceeded(account, attempt.address);
  const session = await startSession(ctx, user.id, attempt.session, PASSKEY_LOGIN_AMR, null, attempt.address);
  await ctx.audit({ type: 'login_succeeded', userId: user.id, address: attempt.address, detail: { method: 'passkey', amr: PASSKEY_LOGIN_AMR } });
  return { ok: true, user, session };
}
