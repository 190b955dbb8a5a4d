/**
 * Revocation. Revoking any token revokes its whole grant: the access token, every
 * generation of the refresh chain. @see RFC 7009 §2.1
 */
import type { AuditEvent } from '../store/audit-events.ts';
import { revokeGrants } from '../store/atomic-writes.ts';
import { joinedCredentials } from '../store/clients.ts';
import type { GrantsToRevoke } from '../store/grants.ts';
import { findTokenOwner, type TokenOwner } from '../store/tokens.ts';
import { hashIfWellFormed } from '../tokens.ts';
import { readJwtAccessToken } from '../identity/jwt-access-tokens.ts';
import { authenticatedAsConfidential, confirmSecret, confirmingRefusals, requireOwnerAuthentication, type ClientAuthentication } from './client-auth.ts';
import type { AppContext, RevocationReason } from '../context.ts';
import { OAuthError } from '../protocol/errors.ts';
import { readParams, type RawParams } from '../protocol/params.ts';

/**
 * Revokes the grants matched by `where` and tells the listeners. `recorded`: the audit event
 * of this revocation, written with it (same transaction or statement) when it revoked
 * anything.
 */
export async function revoke(ctx: AppContext, where: GrantsToRevoke, reason: RevocationReason, recorded?: AuditEvent): Promise<string[]> {
  const event = recorded === undefined ? undefined : ctx.audit.pending(recorded);
  const revoked = await revokeGrants(ctx.db, where, ctx.now(), event?.row);
  if (revoked.length > 0) {
    event?.committed();
    ctx.onGrantsRevoked(revoked, reason);
  }
  return revoked;
}

/**
 * `POST /oauth/revoke`. Unknown, expired and malformed tokens, and unknown hints, succeed
 * silently (RFC 7009 §2.2). A token of a confidential client needs that client's
 * credentials; a token may only be revoked by the client it was issued to. A secret checked
 * against the client cache is confirmed by the client's credentials as stored, read with the
 * token, or by a read of their own when the token is not the client's or the request is refused
 * (client-auth.ts `confirmSecret`).
 */
export async function revokeToken(raw: RawParams, authentication: ClientAuthentication | null, ctx: AppContext, address: string): Promise<void> {
  const params = await confirmingRefusals(
    () => confirmSecret(ctx.clients, authentication),
    () => readParams(raw, ['token'], ['token_type_hint']),
  );
  const owner = await findTokenGrant(ctx, params.token, params.token_type_hint);
  const client = authentication?.client ?? null;
  const ours = owner !== null && owner.client_id === client?.id;
  await confirmSecret(ctx.clients, authentication, ours ? joinedCredentials(owner) : undefined);
  if (owner === null) return;
  requireOwnerAuthentication(client, authenticatedAsConfidential(authentication), owner, authentication?.usedBasic);
  if (client !== null && !ours) {
    throw new OAuthError('unauthorized_client', 'the token was not issued to this client', 'revocation refused: token of another client');
  }
  await revoke(ctx, { grantId: owner.grant_id }, 'revoked', {
    type: 'token_revoked',
    userId: owner.user_id,
    clientId: owner.client_id,
    address,
    detail: { grant_id: owner.grant_id },
  });
}

/**
 * The live grant a token belongs to, looked up by its kind (the hint only picks which kind
 * first). A JWT access token this server signed is found by its `jti`, as introspection finds
 * it, so that a client that logs out by revoking its JWT leaves nothing alive (SPEC §4.3).
 */
async function findTokenGrant(ctx: AppContext, token: string, hint: string | undefined): Promise<TokenOwner | null> {
  const kinds = [
    { table: 'access_tokens', hash: async () => (await readJwtAccessToken(ctx, token, { acceptExpired: true }))?.hash ?? hashIfWellFormed('access', token) },
    { table: 'refresh_tokens', hash: async () => hashIfWellFormed('refresh', token) },
  ] as const;
  // RFC 7009 §2.1: a wrong or unknown hint still finds the token. An expired access token
  // still revokes its grant, whose refresh token may live on.
  for (const { table, hash } of hint === 'refresh_token' ? [...kinds].reverse() : kinds) {
    const tokenHash = await hash();
    const owner = tokenHash === null ? undefined : await findTokenOwner(ctx.db, table, tokenHash);
    if (owner) return owner.revoked_at === null ? owner : null;
  }
  return null;
}
