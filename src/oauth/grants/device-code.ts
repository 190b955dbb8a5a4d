/**
 * `grant_type=urn:ietf:params:oauth:grant-type:device_code`: the device polls until the
 * person has answered at /device (oauth/device.ts), then exchanges its device code, once.
 *
 * The order of the checks: a poll sooner than the device code's interval is `slow_down`
 * before anything else is said, so of many polls at once at most one goes on; then a used
 * device code is a replay (refused, and what it issued revoked, like a replayed
 * authorization code); then expiry, the person's answer, and the exchange — one conditional
 * write in the transaction that creates the grant (store/device-codes.ts).
 *
 * @see RFC 8628 §3.4, §3.5
 */
import { randomUUID } from 'node:crypto';
import { exchangeDeviceCode, findDeviceCode, recordPoll } from '../../store/device-codes.ts';
import type { Client, DeviceCode } from '../../store/schema.ts';
import { hashIfWellFormed } from '../../tokens.ts';
import type { AppContext } from '../../context.ts';
import { DEVICE_CODE_GRANT_TYPE } from '../device.ts';
import { OAuthError, invalidGrant, invalidRequest } from '../errors.ts';
import { mintTokenResponse, scopesStillAllowed, type TokenResponse } from '../issue.ts';
import { readParams, type RawParams } from '../params.ts';
import { splitScopes } from '../scopes.ts';
import { revoke } from '../revocation.ts';
import type { Grant, ProvenClient } from './index.ts';

export const deviceCode: Grant = {
  type: DEVICE_CODE_GRANT_TYPE,
  parameters: { device_code: 'the device code from the device authorization response' },
  handle,
};

async function handle(raw: RawParams, client: Client | null, ctx: AppContext, address: string, proven: ProvenClient): Promise<TokenResponse> {
  const params = readParams(raw, client === null ? ['device_code', 'client_id'] : ['device_code'], []);
  if (client === null) throw invalidRequest('the "client_id" parameter is missing'); // reported above; narrows the type
  if (client.grant_type !== DEVICE_CODE_GRANT_TYPE) {
    throw new OAuthError('unauthorized_client', 'this client is not registered for the device authorization grant');
  }
  const hash = hashIfWellFormed('deviceCode', params.device_code);
  const device = hash === null ? undefined : await findDeviceCode(ctx.db, hash);
  if (!device) throw invalidGrant('the device code is invalid', 'unknown device code');
  if (device.client_id !== client.id) throw invalidGrant('the device code is invalid', 'device code was issued to another client');
  await proven(client.id);
  const now = ctx.now();
  if (!(await recordPoll(ctx.db, device.hash, now))) {
    throw new OAuthError('slow_down', 'polled too soon: wait 5 seconds longer between polls from now on');
  }
  if (device.consumed_at !== null) {
    await replayed(device, device.grant_id, ctx, address);
    throw invalidGrant('the device code has already been used', 'device code replay: revoked what it issued');
  }
  if (device.expires_at <= now) throw new OAuthError('expired_token', 'the device code has expired: start again');
  if (device.decision === 'denied') throw new OAuthError('access_denied', 'the person denied the request', undefined, 400);
  if (device.decision === null) throw new OAuthError('authorization_pending', 'the person has not answered yet: keep polling');
  if (device.user_id === null || device.user_disabled !== 0) throw invalidGrant('the device code is invalid', 'user is disabled');
  // SPEC §4.2: scopes taken from the client since the request was made are dropped.
  const scopes = scopesStillAllowed(splitScopes(device.scopes), client);
  if (scopes.length === 0) throw invalidGrant('the device code is invalid', 'every scope of the request was taken from the client');

  const pair = mintTokenResponse(ctx, scopes, true);
  const grant = { id: randomUUID(), clientId: client.id, userId: device.user_id, resourceId: device.resource_id, scopes: pair.stored.scopes, clientScopes: client.scopes };
  const detail = { grant_type: DEVICE_CODE_GRANT_TYPE, grant_id: grant.id, scope: grant.scopes };
  const issued = ctx.audit.pending({ type: 'token_issued', userId: device.user_id, clientId: client.id, address, detail });
  const exchange = await exchangeDeviceCode(ctx.db, device.hash, grant, pair.stored, now, issued.row);
  if (exchange === 'parties_changed') throw invalidGrant('the device code is invalid', 'client deleted or changed, or user disabled, during the exchange');
  if (exchange === 'code_consumed') {
    // Used by a request that passed its own poll in time, or voided meanwhile.
    const winner = await findDeviceCode(ctx.db, device.hash);
    if (!winner) throw invalidGrant('the device code is invalid', 'device code voided during the exchange');
    await replayed(device, winner.grant_id, ctx, address);
    throw invalidGrant('the device code has already been used', 'concurrent device code replay: revoked what it issued');
  }
  issued.committed();
  return pair.response;
}

/** RFC 6749 §4.1.2, as for authorization codes: a reused device code revokes every token issued from it. */
async function replayed(device: DeviceCode, grantId: string | null, ctx: AppContext, address: string): Promise<void> {
  if (grantId !== null) await revoke(ctx, { grantId }, 'code_replay');
  await ctx.audit({ type: 'code_replay_detected', userId: device.user_id, clientId: device.client_id, address, detail: { grant_type: DEVICE_CODE_GRANT_TYPE, grant_id: grantId } });
}
