/**
 * `grant_type=urn:ietf:params:oauth:grant-type:device_code`: the device polls until the
 * person has answered at /device (oauth/device.ts), then exchanges its device code, once.
 *
 * The order of the checks: a poll sooner than the device code's interval is `slow_down`
 * before anything else is said, so of many polls at once at most one goes on; then a used
 * device code is a replay (refused, and what it issued revoked, like a replayed
 * authorization code); then expiry, the person's answer, and the exchange — one conditional
 * write in the transaction that creates the grant (store/device-codes.ts). A device code
 * read as approved, unused and polled in time goes straight to that write, which takes the
 * poll too: one write per exchange, not two. Only when the exchange refuses, or its write
 * consumes nothing, is the poll recorded on its own first, so that a poll too soon still hears
 * `slow_down` before anything else, a replay included (single-use.ts `checkPoll`).
 *
 * @see RFC 8628 §3.4, §3.5
 */
import { joinedCredentials } from '../../store/clients.ts';
import type { Kysely } from 'kysely';
import { exchangeDeviceCode } from '../../store/atomic-writes.ts';
import { findDeviceCode, pollDue, recordPoll, recordTooSoon, type Poll } from '../../store/device-codes.ts';
import type { Client, Database } from '../../store/schema.ts';
import { hashIfWellFormed } from '../../tokens.ts';
import type { AppContext } from '../../context.ts';
import { OAuthError, invalidGrant } from '../../protocol/errors.ts';
import type { TokenResponse } from '../issue.ts';
import { defineGrant, type Loaded, type ParamsOf } from './grant.ts';
import { DEVICE_CODE_GRANT_TYPE } from './types.ts';
import type { DpopProof } from '../dpop.ts';
import { exchangeApproved, replayed, type SingleUseCode } from './single-use.ts';

const DEVICE_CODE: SingleUseCode = {
  grantType: DEVICE_CODE_GRANT_TYPE,
  noun: 'device code',
  replayDetail: { grant_type: DEVICE_CODE_GRANT_TYPE },
  exchange: exchangeDeviceCode,
  find: findDeviceCode,
  checkPoll,
};

/** Records the poll; `slow_down` when it came sooner than the device code's interval. */
async function checkPoll(db: Kysely<Database>, hash: string, now: number): Promise<void> {
  const poll = await recordPoll(db, hash, now);
  if (poll !== 'in_time') throw refusal(poll);
}

function refusal(poll: Exclude<Poll, 'in_time'>): OAuthError {
  return poll === 'too_soon'
    ? new OAuthError('slow_down', 'polled too soon: wait 5 seconds longer between polls from now on')
    : invalidGrant('the device code is invalid', 'device code voided');
}

const parameters = { device_code: { required: true, description: 'the device code from the device authorization response' } } as const;

type Params = ParamsOf<typeof parameters>;
type StoredDeviceCode = NonNullable<Awaited<ReturnType<typeof findDeviceCode>>>;

export const deviceCode = defineGrant({
  type: DEVICE_CODE_GRANT_TYPE,
  usableBy: [DEVICE_CODE_GRANT_TYPE],
  title: 'device authorization grant',
  parameters,
  client: 'client_id',
  redeems: 'device code',
  loadsClientCredentials: true,
  load,
  issue,
});

async function load(params: Params, _client: Client, ctx: AppContext): Promise<Loaded<StoredDeviceCode>> {
  const hash = hashIfWellFormed('deviceCode', params.device_code);
  const device = hash === null ? undefined : await findDeviceCode(ctx.db, hash);
  if (!device) throw invalidGrant('the device code is invalid', 'unknown device code');
  return { clientId: device.client_id, clientConfidential: device.client_confidential, storedCredentials: joinedCredentials(device), redeemed: device };
}

async function issue(
  device: StoredDeviceCode,
  _params: Params,
  client: Client,
  ctx: AppContext,
  address: string,
  proof: DpopProof | null,
): Promise<TokenResponse> {
  const now = ctx.now();
  const personEnabled = device.user_id !== null && device.user_disabled === 0;
  if (device.decision === 'approved' && device.consumed_at === null && device.expires_at > now && personEnabled) {
    // In time by the row as read: the exchange's write takes the poll, deciding it again (store/device-codes.ts `consumeDeviceCode`).
    if (pollDue(device, now)) return exchangeApproved(DEVICE_CODE, device, client, ctx, address, now, proof);
    // Too soon by the read is too soon in the database too: a poll's time and interval only grow.
    throw refusal(await recordTooSoon(ctx.db, device.hash, now));
  }
  await checkPoll(ctx.db, device.hash, now);
  if (device.consumed_at !== null) {
    await replayed(DEVICE_CODE, device, device.grant_id, ctx, address);
    throw invalidGrant('the device code has already been used', 'device code replay: revoked what it issued');
  }
  if (device.expires_at <= now) throw new OAuthError('expired_token', 'the device code has expired: start again');
  if (device.decision === 'denied') throw new OAuthError('access_denied', 'the person denied the request', undefined, 400);
  if (device.decision === null) throw new OAuthError('authorization_pending', 'the person has not answered yet: keep polling');
  // What is left: approved, unused and unexpired, for a person disabled since.
  throw invalidGrant('the device code is invalid', 'user is disabled');
}
