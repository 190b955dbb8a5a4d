/**
 * The device's side of the device authorization grant (RFC 8628), done with oauth4webapi,
 * and the person's side at /device, done with the UserAgent: what the device suites share.
 */
import assert from 'node:assert/strict';
import * as oauth from 'oauth4webapi';
import { DEVICE_CODE_GRANT_TYPE } from '../../src/oauth/grants/types.ts';
import { discover, insecure, tokenResult, type App, type TokenResult } from './oauth-client.ts';
import type { TestServer } from './server.ts';
import type { Outcome, UserAgent } from './user-agent.ts';

/** A device client registered on `server` (public unless `confidential`), as the device sees the server. */
export async function deviceApp(server: Pick<TestServer, 'url' | 'createClient'>, options: { confidential?: boolean; scope?: string } = {}): Promise<App> {
  const { client, secret } = await server.createClient({
    name: 'Kitchen TV',
    grantType: DEVICE_CODE_GRANT_TYPE,
    redirectUris: [],
    confidential: options.confidential ?? false,
    scope: options.scope ?? '',
  });
  return discover(server as TestServer, client.id, { secret });
}

/** The device authorization request, through the library: the codes and where to send the person. */
export async function requestCodes(app: App, params: Record<string, string> = {}): Promise<oauth.DeviceAuthorizationResponse> {
  return oauth.processDeviceAuthorizationResponse(app.as, app.client, await oauth.deviceAuthorizationRequest(app.as, app.client, app.auth, params, insecure));
}

/** One poll of the token endpoint as the library sends it, unprocessed. */
export function pollRequest(app: App, deviceCode: string): Promise<Response> {
  return oauth.deviceCodeGrantRequest(app.as, app.client, app.auth, deviceCode, insecure);
}

export async function poll(app: App, deviceCode: string): Promise<TokenResult> {
  return tokenResult(await pollRequest(app, deviceCode));
}

/** The poll answered with this error. */
export async function assertPollError(app: App, deviceCode: string, error: string): Promise<void> {
  const result = await poll(app, deviceCode);
  assert.deepEqual([result.status, result.body.error], [400, error], result.body.error_description);
}

/**
 * The person opens `verification_uri_complete` (already logged in), checks the code is
 * filled in, continues, and answers the consent page with `decision`. Returns the final page.
 */
export async function answerAtDevicePage(
  agent: UserAgent,
  codes: Pick<oauth.DeviceAuthorizationResponse, 'verification_uri_complete' | 'user_code'>,
  decision: 'approve' | 'deny',
): Promise<Outcome> {
  const form = await agent.visit(new URL(codes.verification_uri_complete!).pathname + new URL(codes.verification_uri_complete!).search);
  assert.equal(form.response.status, 200);
  assert.ok(form.html.includes(`value="${codes.user_code}"`), 'the code is filled in');
  const consent = await agent.submit(form.html, '/device', { user_code: codes.user_code });
  assert.equal(consent.response.status, 200);
  assert.match(consent.html, /Only continue if you started this on a device of your own/);
  return agent.submit(consent.html, '/device', { decision });
}
