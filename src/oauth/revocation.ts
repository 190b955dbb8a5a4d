/**
 * Revocation. Revoking any token revokes its whole grant: the access token, every
 * generation of the refresh chain. @see RFC 7009 §2.1
 */
import { findLiveAccessToken, findRefreshToken, revokeGrants } from '../store/grants.ts';
import type { Client } from '../store/schema.ts';
import { hashIfWellFormed } from '../tokens.ts';
import { secretRequired } from './client-auth.ts';
import type { OAuthContext, RevocationReason } from './context.ts';
import { OAuthError } from './errors.ts';
import { readParams, type RawParams } from './params.ts';

/** Revokes the grants matched by `where` and tells the listeners. */
export async function revoke(ctx: OAuthContext, where: Parameters<typeof revokeGrants>[1], reason: RevocationReason): Promise<string[]> {
  const revoked = await revokeGrants(ctx.db, where, ctx.now());
  if (revoked.length > 0) ctx.onGrantsRevoked(revoked, reason);
  return revoked;
}

/**
 * `POST /oauth/revoke`. Unknown, expired and malformed tokens, and unknown hints, succeed
 * silently (RFC 7009 §2.2). A token of a confidential client needs that client's
 * credentials; a token may only be revoked by the client it was issued to.
 */
export async function revokeToken(raw: RawParams, client: Client | null, ctx: OAuthContext): Promise<void> {
  const params = readParams(raw, ['token'], ['token_type_hint']);
  const owner = await findTokenGrant(ctx, params.token, params.token_type_hint);
  if (owner === null) return;
  if (client === null && owner.clientConfidential) throw secretRequired();
  if (client !== null && owner.clientId !== client.id) {
    throw new OAuthError('unauthorized_client', 'the token was not issued to this client', 'revocation refused: token of another client');
  }
  await revoke(ctx, { grantId: owner.grantId }, 'revoked');
}

async function findTokenGrant(
  ctx: OAuthContext,
  token: string,
  hint: string | undefined,
): Promise<{ grantId: string; clientId: string; clientConfidential: boolean } | null> {
  const lookups = {
    access_token: async () => {
      const hash = hashIfWellFormed('access', token);
      const row = hash === null ? undefined : await findLiveAccessToken(ctx.db, hash, ctx.now());
      return row ? { grantId: row.grant_id, clientId: row.client_id, clientConfidential: row.client_confidential === 1 } : null;
    },
    refresh_token: async () => {
      const hash = hashIfWellFormed('refresh', token);
      const row = hash === null ? undefined : await findRefreshToken(ctx.db, hash);
      return row && row.revoked_at === null ? { grantId: row.grant_id, clientId: row.client_id, clientConfidential: row.client_confidential === 1 } : null;
    },
  };
  // The hint only orders the lookups (RFC 7009 §2.1); a wrong or unknown hint still finds the token.
  const order = hint === 'refresh_token' ? [lookups.refresh_token, lookups.access_token] : [lookups.access_token, lookups.refresh_token];
  for (const lookup of order) {
    const found = await lookup();
    if (found) return found;
  }
  return null;
}
