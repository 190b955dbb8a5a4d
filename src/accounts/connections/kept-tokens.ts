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
import { keepProviderTokens, keptTokensOf, releaseRefreshLease, takeRefreshLease, type KeptTokensRow } from '../../store/connections.ts';
import type { Connection } from '../../store/schema.ts';
import { setTimeout as sleep } from 'node:timers/promises';
import { PROVIDER_TIMEOUT_MS, UpstreamFailure, refreshUpstreamTokens } from './upstream.ts';

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
 * (and kept again) when the access token has expired or is about to. One refresh at a time per
 * identity, across every instance: a provider that rotates refresh tokens and detects their reuse
 * takes a second refresh with the same token for theft, and revokes the person's tokens there.
 * In one process, concurrent requests share one refresh (`refreshing`); across instances, the one
 * that takes the identity's lease refreshes and the others wait for what it keeps.
 */
export async function currentProviderTokens(ctx: AppContext, connection: Connection, userId: string): Promise<ProviderTokens | NoProviderToken> {
  const keysSecret = ctx.config.keys.secret;
  const kept = keysSecret === null ? undefined : await keptTokensOf(ctx.db, connection.id, userId);
  if (!kept || keysSecret === null) return 'none_kept';
  const tokens = await opened(keysSecret, connection.id, kept);
  if (isCurrent(tokens, ctx.now())) return tokens;
  const refreshToken = tokens.refresh_token;
  if (refreshToken === null) return 'refresh_failed'; // nothing to refresh with: no lease taken, no call to the provider
  const key = ownerOf(connection.id, kept.subject);
  let underWay = refreshing.get(ctx);
  if (!underWay) refreshing.set(ctx, (underWay = new Map()));
  let refresh = underWay.get(key);
  if (!refresh) {
    const started = refreshOnce(ctx, connection, keysSecret, { userId, kept, tokens, refreshToken }).finally(() => underWay.delete(key));
    underWay.set(key, (refresh = started));
  }
  return refresh;
}

/** The refreshes under way in this instance, by identity. */
const refreshing = new WeakMap<AppContext, Map<string, Promise<ProviderTokens | NoProviderToken>>>();

/**
 * How long an instance may take to refresh: discovery (when its cache is cold) and the token
 * request, each within the provider's time limit, and a margin. Another instance waits that long,
 * then may take over.
 */
const REFRESH_LEASE_MS = 3 * PROVIDER_TIMEOUT_MS + 5_000;
/** How often a waiting instance looks for the result. */
const POLL_MS = 100;

/** Current enough to hand out: not expired, nor about to be. */
const isCurrent = (tokens: ProviderTokens, now: number) => tokens.expires_at === null || tokens.expires_at - EXPIRY_MARGIN_MS > now;

/** What another instance just refreshed: handed out while not expired, even within the margin (a short-lived provider token). */
const isAlive = (tokens: ProviderTokens, now: number) => tokens.expires_at === null || tokens.expires_at > now;

interface Stale {
  userId: string;
  kept: KeptTokensRow;
  tokens: ProviderTokens;
  refreshToken: string;
}

/**
 * Refreshes the stale tokens once: with the identity's lease (one conditional write), at the
 * provider, keeping the result; without it — another instance refreshes — waiting for what that
 * instance keeps, or for its lease to lapse.
 */
async function refreshOnce(ctx: AppContext, connection: Connection, keysSecret: string, stale: Stale): Promise<ProviderTokens | NoProviderToken> {
  const identity = { connectionId: connection.id, subject: stale.kept.subject };
  // The wait is bounded in real time, whatever the context's clock says (tests move theirs).
  const deadline = Date.now() + REFRESH_LEASE_MS;
  for (;;) {
    const now = ctx.now();
    const lease = { ...identity, until: now + REFRESH_LEASE_MS };
    if (await takeRefreshLease(ctx.db, { ...lease, previous: stale.kept.provider_tokens, now }))
      return refreshWithLease(ctx, connection, keysSecret, stale, lease);
    const latest = await keptTokensOf(ctx.db, connection.id, stale.userId);
    if (!latest) return 'none_kept';
    if (latest.provider_tokens !== stale.kept.provider_tokens) {
      const tokens = await opened(keysSecret, connection.id, latest);
      return isAlive(tokens, ctx.now()) ? tokens : 'refresh_failed';
    }
    if (Date.now() >= deadline) return 'refresh_failed';
    await sleep(POLL_MS);
  }
}

/** With the lease: refreshes at the provider and keeps the result (which gives the lease back), or gives it back having kept nothing. */
async function refreshWithLease(
  ctx: AppContext,
  connection: Connection,
  keysSecret: string,
  stale: Stale,
  lease: { connectionId: string; subject: string; until: number },
): Promise<ProviderTokens | NoProviderToken> {
  const { kept } = stale;
  // Kept in place of the stale tokens, unless something else replaced or deleted them meanwhile
  // (with `leaseUntil`: only while the lease is still this one).
  const keep = async (tokens: ProviderTokens, leaseUntil?: number) =>
    keepProviderTokens(ctx.db, {
      connectionId: lease.connectionId,
      subject: lease.subject,
      sealed: await sealed(keysSecret, connection.id, kept.subject, tokens),
      previous: kept.provider_tokens,
      leaseUntil,
    });
  let refreshed: ProviderTokens;
  try {
    refreshed = await refreshUpstreamTokens(ctx, connection, stale.refreshToken);
  } catch (error) {
    let forgotten = false;
    try {
      // The provider refused the refresh token itself (RFC 6749 §5.2: expired, revoked): it will
      // never work again. Kept without it, the tokens answer every later exchange at once instead
      // of sending the provider the same dead token each time, until the person logs in through
      // the connection again. Only while the lease is ours: an instance that took it over after
      // ours lapsed may be keeping a good refresh. Any other failure (unreachable, a malformed
      // answer) may pass: the next exchange tries again.
      if (error instanceof UpstreamFailure && error.grantRefused) {
        forgotten = await keep({ ...stale.tokens, refresh_token: null }, lease.until);
        const detail = { connection: connection.id, error: error.providerError };
        if (forgotten) await ctx.audit({ type: 'provider_refresh_refused', userId: stale.userId, detail });
      }
    } finally {
      if (!forgotten) await releaseRefreshLease(ctx.db, lease);
    }
    if (!(error instanceof UpstreamFailure)) throw error;
    return 'refresh_failed';
  }
  // If this write throws, the lease is held until it lapses, on purpose: the provider may have
  // rotated the refresh token already, and another instance refreshing with the old one at once
  // would be taken for theft there. Waiters get 'refresh_failed' meanwhile.
  if (await keep(refreshed)) return refreshed;
  // Not kept. Our lease lapsed and another instance kept its own refresh: that one is the one to
  // use. Or the person was disabled, or the connection keeps tokens no more: nothing is handed out.
  await releaseRefreshLease(ctx.db, lease);
  const latest = await keptTokensOf(ctx.db, connection.id, stale.userId);
  const theirs = latest && latest.provider_tokens !== kept.provider_tokens ? await opened(keysSecret, connection.id, latest) : null;
  return theirs !== null && isAlive(theirs, ctx.now()) ? theirs : 'none_kept';
}
