/**
 * `grant_type=refresh_token`, with rotation. Each refresh token is used once; its successor
 * pair is recorded by one conditional write. Within the grace window the immediate
 * predecessor yields the same successor pair again (idempotent, for racing tabs and lost
 * responses); any other reuse revokes the grant.
 *
 * @see RFC 6749 §6, RFC 9700 §4.14.2 (refresh token rotation and reuse detection)
 */
import { joinedCredentials } from '../../store/clients.ts';
import { hashIfWellFormed, openWithToken, sealWithToken } from '../../tokens.ts';
import { rotateRefreshToken } from '../../store/atomic-writes.ts';
import { loginOf } from '../../login.ts';
import { findRefreshToken, type RefreshTokenInfo } from '../../store/tokens.ts';
import type { Client } from '../../store/schema.ts';
import type { AppContext } from '../../context.ts';
import { OAuthError, invalidGrant, invalidScope } from '../../protocol/errors.ts';
import type { DpopProof } from '../dpop.ts';
import { mintTokenResponse, scopesStillAllowed, secondsUntil, type AccessTokenResponse, type TokenResponse } from '../issue.ts';
import { IDENTITY_SCOPE_NAMES, parseScope, quoted, scopesBeyond, splitScopes, unknownScope } from '../scopes.ts';
import { scopesOfResource } from '../../store/resources.ts';
import { checkSameAudience, joinedAudience, lacksRequiredSecondFactor } from '../resources.ts';
import { revoke } from '../revocation.ts';
import { defineGrant, type Loaded, type ParamsOf } from './grant.ts';
import { AUTHORIZATION_CODE_GRANT_TYPE, DEVICE_CODE_GRANT_TYPE, JWT_BEARER_GRANT_TYPE, REFRESH_TOKEN_GRANT_TYPE } from './types.ts';

const parameters = {
  refresh_token: { required: true, description: 'the newest refresh token' },
  scope: { description: 'a subset of what was granted' },
  resource: { repeatable: true, description: "optional; must be the grant's resource when sent (RFC 8707)" },
} as const;

type Params = ParamsOf<typeof parameters>;

export const refreshToken = defineGrant({
  type: REFRESH_TOKEN_GRANT_TYPE,
  // The grants that give refresh tokens: their clients refresh.
  usableBy: [AUTHORIZATION_CODE_GRANT_TYPE, DEVICE_CODE_GRANT_TYPE, JWT_BEARER_GRANT_TYPE],
  title: 'refresh_token grant',
  parameters,
  client: 'optional',
  redeems: 'refresh token',
  loadsClientCredentials: true,
  load,
  issue,
});

/** What the sealed box holds: enough to answer the same response again. */
interface SealedSuccessor {
  response: AccessTokenResponse;
  accessExpiresAt: number;
}

async function load(params: Params, client: Client | null, ctx: AppContext): Promise<Loaded<RefreshTokenInfo>> {
  const hash = hashIfWellFormed('refresh', params.refresh_token);
  const token = hash === null ? undefined : await findRefreshToken(ctx.db, hash);
  if (!token) throw invalidGrant('the refresh token is invalid', 'unknown refresh token');
  return { clientId: token.client_id, clientConfidential: token.client_confidential, storedCredentials: joinedCredentials(token), redeemed: token };
}

async function issue(
  token: RefreshTokenInfo,
  params: Params,
  _client: Client | null,
  ctx: AppContext,
  address: string,
  proof: DpopProof | null,
): Promise<TokenResponse> {
  const now = ctx.now();
  // Before anything is rotated or revoked: a request refused with invalid_target changes nothing.
  await checkSameAudience(ctx, params.resource, token.resource_id);
  // RFC 9449 §5: a public client's bound refresh token is good only with a proof by its key — a
  // thief's request is refused before it can rotate anything (or be taken for reuse).
  if (token.dpop_jkt !== null && proof?.jkt !== token.dpop_jkt) {
    throw new OAuthError('invalid_dpop_proof', 'this refresh token is bound to a DPoP key: prove that key', 'refresh without its DPoP key');
  }
  if (token.revoked_at !== null) throw revokedGrant();
  if (token.expires_at <= now) throw invalidGrant('the refresh token has expired', 'expired refresh token');
  // Step-up (SPEC §4.12): a grant approved with a second factor refreshes with nothing more; one
  // approved without (before its resource server came to require one, or an assertion's) does not.
  if (lacksRequiredSecondFactor(token, loginOf(token))) {
    throw invalidGrant(
      'the resource server requires a login with a second factor, and this grant was approved without: ask the person again',
      'grant approved without a second factor',
    );
  }

  const about = { userId: token.user_id, clientId: token.client_id, address };
  const grantScopes = splitScopes(token.scopes);
  const requested = params.scope === undefined ? grantScopes : parseScope(params.scope);
  const wider = scopesBeyond(requested, grantScopes);
  if (wider.length > 0) {
    const existing = [...(await scopesOfResource(ctx.db, token.resource_id)).map((s) => s.name), ...IDENTITY_SCOPE_NAMES];
    const unknown = scopesBeyond(wider, existing);
    throw unknown.length > 0 ? unknownScope(unknown) : invalidScope(`scope ${quoted(wider)} was not granted`);
  }

  if (token.rotated_at === null) {
    // SPEC §4.2: scopes taken from the client since the grant was made are dropped; a grant
    // left with none is over.
    const client = { scopes: token.client_scopes, kind: token.client_kind };
    if (scopesStillAllowed(grantScopes, client).length === 0) {
      await revoke(ctx, { grantId: token.grant_id }, 'revoked');
      throw invalidGrant('the refresh token has been revoked', 'every scope of the grant was taken from the client: grant revoked');
    }
    const scopes = scopesStillAllowed(requested, client);
    if (scopes.length === 0) throw invalidScope('the scopes asked for are no longer allowed to this client');
    // Deleting a resource server revokes its grants: only a refresh racing the deletion finds it gone.
    const audience = joinedAudience(token, ctx);
    if (audience === null) throw revokedGrant();
    // A refresh is not a login: its tokens keep the grant's (SPEC §4.12).
    const subject = { clientId: token.client_id, userId: token.user_id, username: token.username, login: loginOf(token) };
    // The new access token is bound to this request's key; the refresh token keeps its binding,
    // or a public client's unbound one is bound now to the key it proved (RFC 9449 §5).
    const binding = { access: proof?.jkt ?? null, refresh: token.dpop_jkt ?? (token.client_confidential === 1 ? null : (proof?.jkt ?? null)) };
    const pair = await mintTokenResponse(ctx, audience, subject, scopes, { withRefresh: true, binding });
    const grace = ctx.config.refreshGraceSeconds > 0;
    const sealed: SealedSuccessor = { response: pair.response, accessExpiresAt: pair.stored.accessExpiresAt };
    const box = grace ? sealWithToken(params.refresh_token, JSON.stringify(sealed)) : null;
    const refreshed = ctx.audit.pending({ ...about, type: 'token_refreshed', detail: { grant_id: token.grant_id, scope: pair.response.scope } });
    const rotation = await rotateRefreshToken(
      ctx.db,
      { hash: token.hash, grantId: token.grant_id, clientScopes: token.client_scopes, purgeAfter: token.purge_after },
      { ...pair.stored, box },
      now,
      refreshed.row,
    );
    if (rotation === 'rotated') {
      refreshed.committed();
      return pair.response;
    }
    // Revoked since we read the token, or its client deleted or changed, or its user disabled.
    if (rotation === 'grant_unusable') throw revokedGrant();
  }
  // Rotated already, earlier or concurrently: re-read what the winner recorded.
  const rotated = await findRefreshToken(ctx.db, token.hash);
  const repeat = rotated ? replayWithinGrace(rotated, params.refresh_token, ctx, now) : null;
  if (repeat) {
    await ctx.audit({ ...about, type: 'token_refreshed', detail: { grant_id: token.grant_id, scope: repeat.scope, repeated_within_grace: true } });
    return repeat;
  }
  await revoke(ctx, { grantId: token.grant_id }, 'refresh_reuse');
  await ctx.audit({ ...about, type: 'refresh_reuse_detected', detail: { grant_id: token.grant_id } });
  throw invalidGrant('the refresh token has already been used', 'refresh token reuse: grant revoked');
}

const revokedGrant = () => invalidGrant('the refresh token has been revoked', 'refresh token of a revoked grant');

/**
 * The same successor pair again, when `token` is the immediate predecessor of an unused
 * successor and the rotation happened within the grace window; otherwise null. `token` as
 * `findRefreshToken` reads it: with its successor's sealed pair and whether it was used.
 */
function replayWithinGrace(token: RefreshTokenInfo, presented: string, ctx: AppContext, now: number): AccessTokenResponse | null {
  const graceMs = ctx.config.refreshGraceSeconds * 1000;
  if (graceMs === 0 || token.revoked_at !== null || token.rotated_at === null || token.successor_box === null) return null;
  if (now - token.rotated_at > graceMs || token.successor_rotated_at !== null) return null; // the successor is in use already
  const opened = openWithToken(presented, token.successor_box);
  if (opened === null) return null;
  const sealed = JSON.parse(opened) as SealedSuccessor;
  return { ...sealed.response, expires_in: secondsUntil(sealed.accessExpiresAt, now) };
}
