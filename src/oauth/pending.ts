/**
 * The login page's view of a pending authorization: which application the person is logging
 * in for, and — in the popup flow (`response_mode=web_message`, SPEC §4.1) — what to post
 * to the opener if the person closes the popup, and to which origin: the client's registered
 * redirect URL's, never one taken from the request.
 */
import type { AppContext } from '../context.ts';
import { popupCancel, resolveTarget, type PopupCancel } from './authorize.ts';
import { OAuthError } from './errors.ts';
import { parseForm } from './params.ts';

export interface PendingAuthorization {
  clientName: string;
  popup: PopupCancel | null;
}

/**
 * The authorization request `next` leads to; null when `next` (already a safe same-site
 * path) is no authorization request of a known client.
 */
export async function pendingAuthorization(next: string, ctx: AppContext, address: string): Promise<PendingAuthorization | null> {
  const url = new URL(next, ctx.config.publicUrl);
  if (url.pathname !== '/oauth/authorize') return null;
  try {
    const target = await resolveTarget(parseForm(url.search.slice(1)), ctx, address);
    return { clientName: target.client.name, popup: target.responseMode === 'web_message' ? popupCancel(target) : null };
  } catch (error) {
    if (error instanceof OAuthError) return null; // the authorization page itself will explain
    throw error;
  }
}
