/**
 * `grant_type=authorization_code`. @see RFC 6749 §4.1.3, RFC 7636 §4.6, RFC 9700 §4.2.4
 */
import { joinedCredentials } from '../../store/clients.ts';
import { exchangeCode } from '../../store/atomic-writes.ts';
import { findCode } from '../../store/codes.ts';
import type { Client } from '../../store/schema.ts';
import { hashIfWellFormed } from '../../tokens.ts';
import type { AppContext } from '../../context.ts';
import { OAuthError, invalidGrant } from '../../protocol/errors.ts';
import { mustUsePkce } from '../client-rules.ts';
import type { DpopProof } from '../dpop.ts';
import type { TokenResponse } from '../issue.ts';
import { checkVerifier } from '../pkce.ts';
import { checkSameAudience } from '../resources.ts';
import { defineGrant, type Loaded, type ParamsOf } from './grant.ts';
import { exchangeApproved, replayed, type SingleUseCode } from './single-use.ts';
import { AUTHORIZATION_CODE_GRANT_TYPE } from './types.ts';

const AUTHORIZATION_CODE: SingleUseCode = {
  grantType: AUTHORIZATION_CODE_GRANT_TYPE,
  noun: 'authorization code',
  replayDetail: {},
  exchange: exchangeCode,
  find: findCode,
};

const parameters = {
  code: { required: true, description: 'the code from the authorization response' },
  redirect_uri: { description: "must be the authorization request's when sent" },
  code_verifier: { description: 'the PKCE verifier; required when the request had a code_challenge' },
  resource: { repeatable: true, description: "optional; must be the authorization request's resource when sent (RFC 8707)" },
} as const;

type Params = ParamsOf<typeof parameters>;
type StoredCode = NonNullable<Awaited<ReturnType<typeof findCode>>>;

export const authorizationCode = defineGrant({
  type: AUTHORIZATION_CODE_GRANT_TYPE,
  usableBy: [AUTHORIZATION_CODE_GRANT_TYPE],
  title: 'authorization_code grant',
  parameters,
  client: 'client_id',
  redeems: 'authorization code',
  loadsClientCredentials: true,
  load,
  issue,
});

async function load(params: Params, _client: Client, ctx: AppContext): Promise<Loaded<StoredCode>> {
  const hash = hashIfWellFormed('code', params.code);
  // Loaded whatever its state: each reason for refusal gets its own log line; the client
  // sees invalid_grant for all of them.
  const code = hash === null ? undefined : await findCode(ctx.db, hash);
  if (!code) throw invalidGrant('the authorization code is invalid', 'unknown code');
  return { clientId: code.client_id, clientConfidential: code.client_confidential, storedCredentials: joinedCredentials(code), redeemed: code };
}

async function issue(code: StoredCode, params: Params, client: Client, ctx: AppContext, address: string, proof: DpopProof | null): Promise<TokenResponse> {
  const now = ctx.now();
  // Before anything is consumed or revoked: a request refused with invalid_target changes nothing.
  await checkSameAudience(ctx, params.resource, code.resource_id);
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
  if (code.code_challenge === null && mustUsePkce(client, ctx.config)) {
    throw invalidGrant('this client must use PKCE, and the authorization request had no "code_challenge"', 'code issued without PKCE before it was required');
  }
  checkVerifier(code.code_challenge, params.code_verifier);
  // RFC 9449 §10: the authorization request named the key the code is for.
  if (code.dpop_jkt !== null && proof?.jkt !== code.dpop_jkt) {
    throw new OAuthError('invalid_dpop_proof', 'the authorization request bound this code to a DPoP key: prove that key', 'dpop_jkt mismatch');
  }
  if (code.user_disabled) throw invalidGrant('the authorization code is invalid', 'user is disabled');
  return exchangeApproved(AUTHORIZATION_CODE, code, client, ctx, address, now, proof);
}
