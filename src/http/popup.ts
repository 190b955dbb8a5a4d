/**
 * The login page on the way to an authorization: which application is asking, and — in
 * the popup flow (`response_mode=web_message`, SPEC §4.1) — what to post to the opener if
 * the person closes the popup, and to which origin: the client's registered redirect URL's,
 * never one taken from the request.
 */
import { resolveTarget, type AuthorizationTarget } from '../oauth/authorize.ts';
import type { AppContext } from '../context.ts';
import { OAuthError } from '../oauth/errors.ts';
import { originOf } from '../oauth/redirect-uri.ts';
import { parseForm } from './forms.ts';

export interface PopupCancel {
  /** The target origin of `postMessage`. */
  origin: string;
  /** `{"type":"authorization_canceled","state"}`, as JSON. */
  canceled: string;
}

export function popupCancel(target: AuthorizationTarget): PopupCancel {
  return { origin: originOf(target.redirectUri), canceled: JSON.stringify({ type: 'authorization_canceled', state: target.state }) };
}

/**
 * What the login page shows about the authorization request `next` leads to; null when
 * `next` (already a safe same-site path) is no authorization request of a known client.
 */
export async function pendingAuthorization(next: string, ctx: AppContext): Promise<{ clientName: string; popup: PopupCancel | null } | null> {
  const url = new URL(next, ctx.config.publicUrl);
  if (url.pathname !== '/oauth/authorize') return null;
  try {
    const target = await resolveTarget(parseForm(url.search.slice(1)), ctx);
    return { clientName: target.client.name, popup: target.responseMode === 'web_message' ? popupCancel(target) : null };
  } catch (error) {
    if (error instanceof OAuthError) return null; // the authorization page itself will explain
    throw error;
  }
}
