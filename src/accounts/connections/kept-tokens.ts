/**
 * The provider's tokens a connection keeps (SPEC §4.15, `--keep-tokens`): the "token vault" an
 * MCP server that calls the provider for a person needs. Kept at each login through the
 * connection, only sealed under KEYS_SECRET (protocol/seal.ts; a connection cannot keep them
 * without it), on the person's identity row — so they go when the identity is unlinked, the
 * person deleted or the connection deleted — and deleted when the person is disabled or the
 * connection stops keeping them. Handed out only by a token exchange (oauth/grants/token-exchange.ts,
 * through AppContext `providerTokens`), refreshed at the provider once expired.
 */
import type { AppContext, NoProviderToken, ProviderTokens } from '../../context.ts';
import { open, seal } from '../../protocol/seal.ts';
import { keepProviderTokens, keptTokensOf, type KeptTokensRow } from '../../store/connections.ts';
import type { Connection } from '../../store/schema.ts';
import { UpstreamFailure, refreshUpstreamTokens } from './upstream.ts';

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
  });
}

/**
 * The person's current provider tokens at the connection: as kept, or refreshed at the provider
 * (and kept again) when the access token has expired or is about to. In one process, concurrent
 * requests for the same identity wait for one refresh (`refreshing`): a provider that rotates
 * refresh tokens and detects their reuse would take a second refresh with the same token for
 * theft. Across instances two may still race; the one whose write loses, or whose refresh the
 * provider refuses, takes what the other kept if it is current.
 */
export async function currentProviderTokens(ctx: AppContext, connection: Connection, userId: string): Promise<ProviderTokens | NoProviderToken> {
  const keysSecret = ctx.config.keys.secret;
  const kept = keysSecret === null ? undefined : await keptTokensOf(ctx.db, connection.id, userId);
  if (!kept || keysSecret === null) return 'none_kept';
  const tokens = await opened(keysSecret, connection.id, kept);
  if (isCurrent(tokens, ctx.now())) return tokens;
  const key = ownerOf(connection.id, kept.subject);
  let refresh = refreshing.get(key);
  if (!refresh) {
    refresh = refreshKept(ctx, connection, keysSecret, kept, tokens).finally(() => refreshing.delete(key));
    refreshing.set(key, refresh);
  }
  const refreshed = await refresh;
  if (refreshed !== 'refresh_failed') return refreshed;
  // Refreshed meanwhile by another instance (the provider refused the old refresh token)?
  const now = await keptTokensOf(ctx.db, connection.id, userId);
  const latest = now && now.provider_tokens !== kept.provider_tokens ? await opened(keysSecret, connection.id, now) : null;
  return latest !== null && isCurrent(latest, ctx.now()) ? latest : 'refresh_failed';
}

/** The refreshes under way in this process, by identity. */
const refreshing = new Map<string, Promise<ProviderTokens | 'refresh_failed'>>();

const isCurrent = (tokens: ProviderTokens, now: number) => tokens.expires_at === null || tokens.expires_at - EXPIRY_MARGIN_MS > now;

/** Refreshes the kept tokens at the provider and keeps the new ones, if what is kept is still what was read. */
async function refreshKept(
  ctx: AppContext,
  connection: Connection,
  keysSecret: string,
  kept: KeptTokensRow,
  tokens: ProviderTokens,
): Promise<ProviderTokens | 'refresh_failed'> {
  if (tokens.refresh_token === null) return 'refresh_failed';
  let refreshed: ProviderTokens;
  try {
    refreshed = await refreshUpstreamTokens(ctx, connection, tokens.refresh_token);
  } catch (error) {
    if (!(error instanceof UpstreamFailure)) throw error;
    return 'refresh_failed';
  }
  const sealedTokens = await sealed(keysSecret, connection.id, kept.subject, refreshed);
  await keepProviderTokens(ctx.db, { connectionId: connection.id, subject: kept.subject, sealed: sealedTokens, previous: kept.provider_tokens });
  // Kept or not (another instance kept its own, or they were deleted meanwhile), these are the provider's current tokens.
  return refreshed;
}
