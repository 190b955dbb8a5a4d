/**
 * What a login proved (SPEC §4.9, §4.12): when and how a person logged in, as sessions record
 * it and codes, grants and tokens carry it on. Below every folder that decides about logins —
 * accounts/ starts them, oauth/ requires them, identity/ signs them into tokens — so that each
 * asks the same questions of the same value.
 */
import type { Config } from './config.ts';
import type { User } from './store/schema.ts';

/**
 * A login: when (`authTime`, epoch ms; the claim `auth_time` is in seconds) and how (`amr`:
 * RFC 8176 values, space-separated, as stored). The codes and device approvals a session
 * makes carry it into their grants, whose refreshes keep it.
 */
export interface Login {
  authTime: number;
  amr: string;
  /** The session's public identifier (OIDC `sid`); null on rows made before it was recorded. */
  sid: string | null;
}

/** A person in a live session, and the login that started it. */
export interface SignedIn {
  user: User;
  login: Login;
}

/** The `amr` of a login with a password alone (RFC 8176 §2). */
export const PASSWORD_LOGIN_AMR = 'pwd';

/** The `amr` of a login with a passkey (SPEC §4.12): a hardware-bound key, verified user, two factors. */
export const PASSKEY_LOGIN_AMR = 'hwk user mfa';

/**
 * What a one-time code (an authenticator app's or a recovery code) proves as the second step,
 * added to what the first step proved: after a password `pwd otp mfa`, after a login through
 * a connection `fed otp mfa`.
 */
export const OTP_FACTOR_AMR = 'otp mfa';

/** Whether the login (its `amr`) proved a second factor. */
export function isMultiFactor(amr: string): boolean {
  return amr.split(' ').includes('mfa');
}

/**
 * Whether REQUIRE_SECOND_FACTOR (`admins` or `all`) covers the person: their login must prove a
 * second factor (they set one up at a password login), and removing their last one is refused.
 */
export function mustHaveSecondFactor(config: Pick<Config, 'requireSecondFactor'>, user: Pick<User, 'is_admin'>): boolean {
  return config.requireSecondFactor === 'all' || (config.requireSecondFactor === 'admins' && user.is_admin === 1);
}

/**
 * The `amr` of a login that, having proved `amr`, proves `more` too (a passkey as the second
 * step after a password; a factor added in the session): every value of both, once each.
 */
export function amrUnion(amr: string, more: string): string {
  return [...new Set([...amr.split(' '), ...more.split(' ')])].join(' ');
}

/** The login recorded on a code or grant row; null for none (a client acting as itself, a row older than the record). */
export function loginOf(row: { auth_time: number | null; amr: string | null; sid: string | null }): Login | null {
  return row.auth_time === null || row.amr === null ? null : { authTime: row.auth_time, amr: row.amr, sid: row.sid };
}

/**
 * `auth_time` (epoch seconds) and `amr` (RFC 8176) of a person's token (SPEC §4.9, §4.10,
 * §4.12), in JWT access tokens, ID tokens and introspection alike; nothing when no login is recorded.
 */
export function loginClaims(login: Login | null): { auth_time?: number; amr?: string[] } {
  return login === null ? {} : { auth_time: Math.floor(login.authTime / 1000), amr: login.amr.split(' ') };
}
