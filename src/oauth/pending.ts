/**
 * The login page's view of a pending authorization: which application the person is logging
 * in for, whether an administrator checked it, and — in the popup flow (`response_mode=web_message`, SPEC §4.1) — what to post
 * to the opener if the person closes the popup, and to which origin: the client's registered
 * redirect URL's, never one taken from the request.
 */
import type { AppContext } from '../context.ts';
import type { Client } from '../store/schema.ts';
import { popupCancel, requestedParams, resolveTarget, type PopupCancel } from './authorize.ts';
import { ThrottleUnavailable, Throttled } from '../throttle.ts';
import { OAuthError } from '../protocol/errors.ts';
import { parseForm } from '../protocol/params.ts';
import { redirectDestinations, redirectUrisOf } from '../protocol/redirect-uri.ts';

export interface PendingAuthorization {
  clientName: string;
  /** What the page says of a client no administrator checked; null for an administrator's. */
  notVetted: UnvettedClient | null;
  popup: PopupCancel | null;
  /** The request's `login_hint` (OIDC Core §3.1.2.1), to fill the username field with; null without one. */
  loginHint: string | null;
}

/** A longer `login_hint` names no username or e-mail address of ours: it is not shown. */
const MAX_LOGIN_HINT_LENGTH = 254;

/** What the login and consent pages say of a client no administrator checked (SPEC §4.1, §4.8). */
export interface UnvettedClient {
  /** The host its metadata document came from; null for a dynamically registered client. */
  documentHost: string | null;
  /** Everywhere it may send the person, not only where this request would. */
  destinations: { thisComputer: boolean; hosts: string[] };
}

/** Null for an administrator's client. */
export function unvettedClient(client: Client): UnvettedClient | null {
  if (client.kind === 'registered') return null;
  return { documentHost: client.kind === 'metadata_document' ? new URL(client.id).host : null, destinations: redirectDestinations(redirectUrisOf(client)) };
}

/**
 * The authorization request `next` leads to; null when `next` (already a safe same-site
 * path) is no authorization request of a known client.
 */
export async function pendingAuthorization(next: string, ctx: AppContext, address: string): Promise<PendingAuthorization | null> {
  const url = new URL(next, ctx.config.publicUrl);
  if (url.pathname !== '/oauth/authorize') return null;
  try {
    const params = await requestedParams(parseForm(url.search.slice(1)), ctx);
    if (params === null) return null;
    const target = await resolveTarget(params, ctx, address);
    const hint = params.login_hint;
    return {
      loginHint: typeof hint === 'string' && hint.length <= MAX_LOGIN_HINT_LENGTH ? hint : null,
      clientName: target.client.name,
      notVetted: unvettedClient(target.client),
      popup: target.responseMode === 'web_message' ? popupCancel(target) : null,
    };
  } catch (error) {
    // The authorization page itself will explain (or answer 429/503 in its turn).
    if (error instanceof OAuthError || error instanceof Throttled || error instanceof ThrottleUnavailable) return null;
    throw error;
  }
}
