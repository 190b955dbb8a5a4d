/**
 * `grant_type=authorization_code`. @see RFC 6749 §4.1.3, RFC 7636 §4.6, RFC 9700 §4.2.4
 */
import { exchangeCode } from '../../store/atomic-writes.ts';
import { findCode } from '../../store/codes.ts';
import type { Client } from '../../store/schema.ts';
import { hashIfWellFormed } from '../../tokens.ts';
import type { AppContext } from '../../context.ts';
import { OAuthError, invalidGrant, invalidRequest } from '../errors.ts';
import type { TokenResponse } from '../issue.ts';
import { readParams, type RawParams } from '../params.ts';
import { checkVerifier } from '../pkce.ts';
import { checkSameAudience } from '../resources.ts';
import type { Grant, ProvenClient } from './index.ts';
import { exchangeApproved, replayed, type SingleUseCode } from './single-use.ts';

const AUTHORIZATION_CODE: SingleUseCode = { grantType: 'authorization_code', noun: 'authorization code', replayDetail: {}, exchange: exchangeCode, find: findCode };

export const authorizationCode: Grant = {
  type: 'authorization_code',
  parameters: {
    code: 'the code from the authorization response',
    redirect_uri: 'must be the authorization request\'s when sent',
    code_verifier: 'the PKCE verifier; required when the request had a code_challenge',
    resource: "optional; must be the authorization request's resource when sent (RFC 8707)",
  },
  handle,
};

async function handle(raw: RawParams, client: Client | null, ctx: AppContext, address: string, proven: ProvenClient): Promise<TokenResponse> {
  // A client sending no credentials must at least name itself (RFC 6749 §4.1.3): its
  // missing client_id is reported together with any other missing parameter.
  const required = client === null ? (['code', 'client_id'] as const) : (['code'] as const);
  const params = readParams(raw, required, ['redirect_uri', 'code_verifier']);
  if (client === null) throw invalidRequest('the "client_id" parameter is missing'); // reported above; narrows the type
  if (client.grant_type !== 'authorization_code') {
    throw new OAuthError('unauthorized_client', 'this client is not registered for the authorization_code grant');
  }
  const now = ctx.now();
  const hash = hashIfWellFormed('code', params.code);
  // Loaded whatever its state: each reason for refusal gets its own log line; the client
  // sees invalid_grant for all of them.
  const code = hash === null ? undefined : await findCode(ctx.db, hash);
  if (!code) throw invalidGrant('the authorization code is invalid', 'unknown code');
  if (code.client_id !== client.id) throw invalidGrant('the authorization code is invalid', 'code was issued to another client');
  await proven(client.id);
  // Before anything is consumed or revoked: a request refused with invalid_target changes nothing.
  await checkSameAudience(ctx, raw.resource, code.resource_id);
  if (code.consumed_at !== null) {
    await replayed(AUTHORIZATION_CODE, code, code.grant_id, ctx, address);
    throw invalidGrant('the authorization code has already been used', 'code replay: revoked what it issued');
  }
  if (code.expires_at <= now) throw invalidGrant('the authorization code has expired', 'expired code');
  if (params.redirect_uri !== undefined && params.redirect_uri !== code.redirect_uri) {
    throw invalidGrant('"redirect_uri" does not match the authorization request', 'redirect_uri mismatch');
  }
  // A code issued without a challenge before PKCE became required (for this client, or for
  // everyone) is refused: the requirement holds from the moment it is switched on.
  if (code.code_challenge === null && (ctx.config.requirePkce || client.require_pkce === 1)) {
    throw invalidGrant('this client must use PKCE, and the authorization request had no "code_challenge"', 'code issued without PKCE before it was required');
  }
  checkVerifier(code.code_challenge, params.code_verifier);
  if (code.user_disabled) throw invalidGrant('the authorization code is invalid', 'user is disabled');
  return exchangeApproved(AUTHORIZATION_CODE, code, client, ctx, address, now);
}
