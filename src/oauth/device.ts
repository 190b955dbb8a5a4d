/**
 * The device authorization grant (RFC 8628), its two halves that are not the token
 * endpoint: the device's request for a device code and a user code
 * (`POST /oauth/device_authorization`), and the person's part at `/device` — entering the
 * user code, then approving or denying. The polling is the token grant in
 * grants/device-code.ts.
 *
 * A user code has only about 34.6 bits, so entering one is guarded like a password: each
 * attempt is counted as a wrong guess against the person and their address *before* the
 * code is looked up (throttle.ts), and given back only when the code was right. Once the
 * limit is reached even the right code is refused until the window passes, so guessing
 * concurrently or slowly gains nothing.
 *
 * @see RFC 8628 §3.1–3.3, §5.1 (user code brute force), §5.4 (remote phishing)
 */
import { isMultiFactor, type SignedIn } from '../login.ts';
import type { AppContext } from '../context.ts';
import { findClient } from '../store/clients.ts';
import { decideDeviceCode, findByUserCode, insertDeviceCode } from '../store/device-codes.ts';
import type { Client, DeviceCode, User } from '../store/schema.ts';
import { Throttled } from '../throttle.ts';
import { mintToken, mintUserCode, readUserCode } from '../tokens.ts';
import { clientAssertionCheck } from './assertions/client-assertion.ts';
import { isConfidential } from './assertions/client-keys.ts';
import { authenticateClient } from './client-auth.ts';
import { DEVICE_CODE_GRANT_TYPE } from './grants/types.ts';
import { OAuthError, invalidRequest } from '../protocol/errors.ts';
import { readParams, type RawParams } from '../protocol/params.ts';
import { joinScopes, splitScopes } from './scopes.ts';
import { requestScopes, audienceById, requestedAudience, resourceDetail, type Audience } from './resources.ts';

/** Seconds a device waits between polls, before any `slow_down` (RFC 8628 §3.2 default). */
export const POLL_INTERVAL = 5;

/** Where people enter user codes. */
export const VERIFICATION_PATH = '/device';

export interface DeviceAuthorizationResponse {
  device_code: string;
  user_code: string;
  verification_uri: string;
  verification_uri_complete: string;
  expires_in: number;
  interval: number;
}

/**
 * `POST /oauth/device_authorization`: a device client asks for a device code and a user code.
 * Errors are those of the token endpoint (RFC 8628 §3.2).
 */
export async function requestDeviceAuthorization(
  raw: RawParams,
  authorization: string | undefined,
  ctx: AppContext,
  address: string,
): Promise<DeviceAuthorizationResponse> {
  const { throttle } = ctx.services;
  // Every request stores a row: an address gets the token endpoint's budget here too.
  await throttle.tokenRequestFrom(address);
  // From the database, not the client cache, as at the authorization endpoint (client-kinds.ts
  // `requestingClient`): the row stored below refers to the client.
  const stored = (id: string) => findClient(ctx.db, id);
  const check = clientAssertionCheck(ctx, '/oauth/device_authorization', address);
  const client = await authenticateClient({ find: stored, findStored: stored }, authorization, raw, check);
  const params = readParams(raw, client === null ? ['client_id'] : [], ['scope']);
  if (client === null) throw invalidRequest('the "client_id" parameter is missing'); // reported above; narrows the type
  if (isConfidential(client)) await throttle.tokenRequestOf(client.id);
  if (client.grant_type !== DEVICE_CODE_GRANT_TYPE) {
    throw new OAuthError('unauthorized_client', 'this client is not registered for the device authorization grant');
  }
  const audience = await requestedAudience(ctx, raw.resource);
  const scopes = joinScopes(requestScopes(params.scope, client, audience));
  const now = ctx.now();
  const deviceCode = mintToken('deviceCode');
  // A fresh user code until one is free: live codes are few against 20^8, so this ends at once.
  for (;;) {
    const userCode = mintUserCode();
    const row = {
      hash: deviceCode.hash,
      user_code_hash: userCode.hash,
      client_id: client.id,
      scopes,
      resource_id: audience.id,
      created_at: now,
      expires_at: now + ctx.config.deviceCodeTtl * 1000,
      poll_interval: POLL_INTERVAL,
    };
    if (!(await insertDeviceCode(ctx.db, row))) continue;
    await ctx.audit({ type: 'device_authorization_requested', clientId: client.id, address, detail: { scope: scopes, ...resourceDetail(audience) } });
    const verificationUri = `${ctx.config.publicUrl}${VERIFICATION_PATH}`;
    return {
      device_code: deviceCode.token,
      user_code: userCode.display,
      verification_uri: verificationUri,
      verification_uri_complete: `${verificationUri}?${new URLSearchParams({ user_code: userCode.display })}`,
      expires_in: ctx.config.deviceCodeTtl,
      interval: POLL_INTERVAL,
    };
  }
}

/** A device request the person may answer, as the consent page shows it. */
export interface PendingDevice {
  /** The user code in its canonical form, `XXXX-XXXX`. */
  userCode: string;
  client: Pick<Client, 'id' | 'name'>;
  /** The resource server the tokens will be for: named on the consent page unless it is the built-in one. */
  audience: Audience;
  scopes: ReturnType<typeof splitScopes>;
  /** The stored request's user code hash, for the answer. */
  row: Pick<DeviceCode, 'hash'>;
}

export type UserCodeCheck =
  | { ok: true; device: PendingDevice }
  /** `malformed`: cannot be a user code (not counted); `unknown`: no such live, unanswered request; `throttled`: too many wrong codes. */
  | { ok: false; reason: 'malformed' | 'unknown' }
  | { ok: false; reason: 'throttled'; retryAfter: number };

/**
 * Checks a user code `user` typed at /device, from `address`. A code that cannot be one
 * (wrong length or letters) is refused without counting: it cannot match anything. Any other
 * code is counted as a guess first; a wrong, expired or already answered one stays counted
 * and is recorded in the audit trail.
 */
export async function checkUserCode(ctx: AppContext, user: User, typed: string, address: string): Promise<UserCodeCheck> {
  const code = readUserCode(typed);
  if (code === null) return { ok: false, reason: 'malformed' };
  const { throttle } = ctx.services;
  try {
    await throttle.reserveUserCodeGuess(user.id, address);
  } catch (error) {
    if (!(error instanceof Throttled)) throw error;
    return { ok: false, reason: 'throttled', retryAfter: error.retryAfter };
  }
  const row = await findByUserCode(ctx.db, code.hash);
  if (!row || row.decision !== null || row.expires_at <= ctx.now()) {
    const reason = !row ? 'unknown' : row.decision !== null ? 'answered' : 'expired';
    await ctx.audit({ type: 'user_code_failed', userId: user.id, clientId: row?.client_id ?? null, address, detail: { reason } });
    return { ok: false, reason: 'unknown' };
  }
  await throttle.userCodeAccepted(user.id, address);
  const audience = await audienceById(ctx, row.resource_id);
  return {
    ok: true,
    device: {
      userCode: code.display,
      client: { id: row.client_id, name: row.client_name },
      audience,
      scopes: splitScopes(row.scopes),
      row: { hash: row.hash },
    },
  };
}

/**
 * Whether approving needs a second factor first (SPEC §4.12, step-up): the resource server
 * wants one and the login proved none. Denying never does.
 */
export function stepUpNeeded(device: PendingDevice, { login }: SignedIn): boolean {
  return device.audience.requireSecondFactor && !isMultiFactor(login.amr);
}

/**
 * Records the person's answer, with the login it was given in (the grant's `auth_time` and
 * `amr`); false when the request was answered or expired meanwhile.
 */
export async function answerDevice(ctx: AppContext, { user, login }: SignedIn, device: PendingDevice, approve: boolean, address: string): Promise<boolean> {
  if (approve && stepUpNeeded(device, { user, login })) return false;
  const decision = approve ? 'approved' : 'denied';
  if (!(await decideDeviceCode(ctx.db, device.row.hash, { decision, userId: user.id, login, now: ctx.now() }))) return false;
  await ctx.audit({
    type: approve ? 'device_approved' : 'device_denied',
    userId: user.id,
    clientId: device.client.id,
    address,
    detail: { scope: joinScopes(device.scopes), ...resourceDetail(device.audience) },
  });
  return true;
}
