/**
 * RP-initiated logout (OpenID Connect RP-Initiated Logout 1.0, SPEC §4.10): what a request to
 * the `end_session_endpoint` asks for, and what to do about it. The person is sent back to
 * the application only to a `post_logout_redirect_uri` registered for the client that the
 * ID token hint (its `aud`) or `client_id` names, matched exactly — never an open redirect.
 * The session ends at once only when a valid hint names the person logged in; otherwise they
 * confirm with a CSRF-protected form, so that a cross-site link alone logs nobody out.
 */
import { type SignedIn } from '../login.ts';
import { isSwitchedOff, lookupClient } from '../oauth/client-auth.ts';
import { accountUri, type Config } from '../config.ts';
import type { AppContext } from '../context.ts';
import { invalidRequest } from '../protocol/errors.ts';
import { readParams, type RawParams } from '../protocol/params.ts';
import { postLogoutRedirectUrisOf } from '../protocol/redirect-uri.ts';
import { readIdTokenHint, type IdTokenHint } from '../identity/id-tokens.ts';

/** The parameters read (RP-Initiated Logout 1.0 §2); `logout_hint` and `ui_locales` are accepted and ignored. */
const PARAMETERS = ['id_token_hint', 'client_id', 'post_logout_redirect_uri', 'state', 'logout_hint', 'ui_locales'] as const;

export interface LogoutRequest {
  /** The ID token hint, checked; null when none was sent. */
  readonly hint: IdTokenHint | null;
  /** The name of the client the request comes from, when one is named and known. */
  readonly clientName: string | null;
  /** Where to send the person once logged out (the registered URL, with `state`); null: Gatehouse's own page. */
  readonly redirectTo: string | null;
  /** The request's parameters as sent, for the confirmation form to send again. */
  readonly fields: Readonly<Record<string, string>>;
}

/**
 * Reads a logout request. A repeated parameter, a hint this server did not issue (another
 * key's signature, malformed, another issuer), or a `client_id` other than the hint's
 * audience is `invalid_request` (the error page: nothing is done).
 */
export async function readLogoutRequest(ctx: AppContext, raw: RawParams): Promise<LogoutRequest> {
  const params = readParams(raw, [], PARAMETERS);
  const hint = params.id_token_hint === undefined ? null : await readIdTokenHint(ctx, params.id_token_hint);
  if (params.id_token_hint !== undefined && hint === null) throw invalidRequest('the "id_token_hint" is not an ID token this server issued');
  if (hint && params.client_id !== undefined && params.client_id !== hint.clientId)
    throw invalidRequest('the "client_id" is not the client the "id_token_hint" was issued to');
  const clientId = hint?.clientId ?? params.client_id;
  const found = clientId === undefined ? undefined : await lookupClient(ctx.db, clientId);
  const client = found && !isSwitchedOff(found) ? found : undefined;
  const requested = params.post_logout_redirect_uri;
  let redirectTo: string | null = null;
  if (client && requested !== undefined && postLogoutRedirectUrisOf(client).includes(requested)) {
    const url = new URL(requested);
    if (params.state !== undefined) url.searchParams.append('state', params.state);
    redirectTo = url.href;
  }
  const fields = Object.fromEntries(Object.entries(params).filter((entry): entry is [string, string] => entry[1] !== undefined));
  return { hint, clientName: client?.name ?? null, redirectTo, fields };
}

/**
 * What to do with the person's session: `end` it at once (a valid hint names them), ask them
 * to `confirm` first (any other request: no hint, or one naming someone else), or `none`
 * when nobody is logged in.
 */
export function logoutDecision(request: LogoutRequest, signedIn: SignedIn | null, config: Config): 'end' | 'confirm' | 'none' {
  if (signedIn === null) return 'none';
  return request.hint?.sub === accountUri(signedIn.user.username, config) ? 'end' : 'confirm';
}
