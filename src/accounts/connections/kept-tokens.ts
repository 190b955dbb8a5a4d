/**
 * The provider's tokens a connection keeps (SPEC §4.15, `--keep-tokens`): the "token vault" an
 * MCP server that calls the provider for a person needs. Kept at each login through the
 * connection, only sealed under KEYS_SECRET (protocol/seal.ts; a connection cannot keep them
 * without it), on the person's identity row — so they go when the identity is unlinked, the
 * person deleted or the connection deleted — and deleted when the person is disabled or the
 * connection stops keeping them. Handed out only by a token exchange (oauth/grants/token-exchange.ts),
 * refreshed at the provider once expired.
 */
import type { AppContext } from '../../context.ts';
import { open, seal } from '../../protocol/seal.ts';
import { forgetProviderTokens, keepProviderTokens, keptTokensOf, type KeptTokensRow } from '../../store/connections.ts';
import type { Connection } from '../../store/schema.ts';
import { UpstreamFailure, refreshUpstreamTokens, type ProviderTokens } from './upstream.ts';

/** An access token this close to its expiry is refreshed first: the resource server still has to use it. */
const EXPIRY_MARGIN_MS = 30_000;

/** The identity a sealed row belongs to, in its header: one identity's tokens never open as another's. */
const ownerOf = (connectionId: string, subject: string) => `${connectionId} ${subject}`;

/** Sealed under `keysSecret`: the callers have made sure it is set (a connection keeps tokens only with KEYS_SECRET, connections.ts). */
async function sealed(keysSecret: string, connectionId: string, subject: string, tokens: ProviderTokens): Promise<string> {
  return (await seal('provider_tokens', ownerOf(connectionId, subject), JSON.stringify(tokens), keysSecret)).value;
}

async function opened(keysSecret: string, connectionId: string, kept: KeptTokensRow): Promise<ProviderTokens> {
  const stored = { value: kept.provider_tokens, encrypted: 1 };
  return JSON.parse(await open('provider_tokens', ownerOf(connectionId, kept.subject), stored, keysSecret)) as ProviderTokens;
}

/** After a login through the connection linked the identity: its tokens, kept when the connection keeps them. */
export async function keepTokensOfLogin(ctx: AppContext, connection: Connection, subject: string, tokens: ProviderTokens): Promise<void> {
  const keysSecret = ctx.config.keys.secret;
  // Started without KEYS_SECRET after --keep-tokens was set with it: nothing is kept in clear.
  if (connection.keep_tokens !== 1 || keysSecret === null) return;
  await keepProviderTokens(ctx.db, {
    connectionId: connection.id,
    subject,
    sealed: await sealed(keysSecret, connection.id, subject, tokens),
    expiresAt: tokens.expires_at,
  });
}

/** Why the person's provider token cannot be had. */
export type NoProviderToken = 'none_kept' | 'refresh_failed';

/**
 * The person's current provider tokens at the connection: as kept, or refreshed at the provider
 * (and kept again) when the access token has expired or is about to. A refresh racing another
 * keeps one of the two results; the other request gets what was kept.
 */
export async function currentProviderTokens(ctx: AppContext, connection: Connection, userId: string): Promise<ProviderTokens | NoProviderToken> {
  const keysSecret = ctx.config.keys.secret;
  const kept = keysSecret === null ? undefined : await keptTokensOf(ctx.db, connection.id, userId);
  if (!kept || keysSecret === null) return 'none_kept';
  const tokens = await opened(keysSecret, connection.id, kept);
  const fresh = tokens.expires_at === null || tokens.expires_at - EXPIRY_MARGIN_MS > ctx.now();
  if (fresh) return tokens;
  if (tokens.refresh_token === null) return 'refresh_failed';
  let refreshed: ProviderTokens;
  try {
    refreshed = await refreshUpstreamTokens(ctx, connection, tokens.refresh_token);
  } catch (error) {
    if (!(error instanceof UpstreamFailure)) throw error;
    return 'refresh_failed';
  }
  const stored = await keepProviderTokens(ctx.db, {
    connectionId: connection.id,
    subject: kept.subject,
    sealed: await sealed(keysSecret, connection.id, kept.subject, refreshed),
    expiresAt: refreshed.expires_at,
    previous: kept.provider_tokens,
  });
  if (stored) return refreshed;
  // Another request refreshed them first (or they were deleted meanwhile): what is kept now decides.
  const now = await keptTokensOf(ctx.db, connection.id, userId);
  return now ? opened(keysSecret, connection.id, now) : 'none_kept';
}

/** Deletes every provider token kept for the person (disabled) or at the connection (it keeps them no more). */
export function forgetKeptTokens(ctx: AppContext, of: { userId: string } | { connectionId: string }): Promise<void> {
  return forgetProviderTokens(ctx.db, of);
}
