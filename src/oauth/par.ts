/**
 * Pushed authorization requests (RFC 9126, SPEC §4.14): `POST /oauth/par`. The client sends
 * the authorization request's parameters over the back channel, authenticated as at the token
 * endpoint, and gets a `request_uri` to send the browser with instead — so nothing in the
 * front channel can be read or changed. Every check of the authorization endpoint that needs
 * no person runs here, with the same code (authorize.ts `resolveTarget`, `checkRequest`); the
 * authorization endpoint checks the stored parameters again when the browser arrives, and
 * answers a pushed request once.
 */
import { randomBytes } from 'node:crypto';
import type { AppContext } from '../context.ts';
import { insertPushedRequest } from '../store/pushed-requests.ts';
import { hashToken } from '../tokens.ts';
import { OAuthError, invalidRequest } from '../protocol/errors.ts';
import { single, type RawParams } from '../protocol/params.ts';
import { clientAssertionCheck } from './assertions/client-assertion.ts';
import { AUTHORIZATION_PARAMETERS, PAR_PATH, REQUEST_URI_PREFIX, checkRequest, resolveTarget } from './authorize.ts';
import { isConfidential } from './assertions/client-keys.ts';
import { authenticatedAsConfidential, identifyClient, requireOwnerAuthentication } from './client-auth.ts';
import { FAPI2 } from './client-rules.ts';
import { endpointProof, type DpopHeader } from './dpop.ts';

/** How long a pushed request waits for the browser (RFC 9126 §2.2 `expires_in`). */
export const PUSHED_REQUEST_SECONDS = 60;

export interface PushedAuthorizationResponse {
  request_uri: string;
  expires_in: number;
}

export interface PushRequest {
  params: RawParams;
  authorization: string | undefined;
  /** The `DPoP` headers: a proof here binds the code as `dpop_jkt` does (RFC 9449 §10.1). */
  dpop: DpopHeader;
  address: string;
}

/** `POST /oauth/par`. Errors are the token endpoint's, as JSON (RFC 9126 §2.3). */
export async function pushAuthorizationRequest(request: PushRequest, ctx: AppContext): Promise<PushedAuthorizationResponse> {
  const { params: raw, authorization, address } = request;
  // Every push stores a row: an address gets the token endpoint's budget here too.
  await ctx.services.throttle.tokenRequestFrom(address);
  // Before the client's assertion, as at the token endpoint: a proof refused (for a nonce) uses up no assertion.
  const proof = await endpointProof(ctx, request.dpop, PAR_PATH);
  const authentication = await identifyClient(ctx.clients, authorization, raw, clientAssertionCheck(ctx, PAR_PATH, address), { secretByCopy: false });
  if (authentication === null) throw invalidRequest('the "client_id" parameter is missing');
  const { client } = authentication;
  const authenticated = authenticatedAsConfidential(authentication);
  // A client's own budget only for a request that proves it comes from it (grants/index.ts `dispatchToken`).
  if (authenticated) await ctx.services.throttle.tokenRequestOf(client.id);
  // RFC 9126 §2.1: a pushed request is never itself a reference.
  if (raw.request_uri !== undefined) throw invalidRequest('"request_uri" cannot be pushed');
  // FAPI 2.0 Security Profile §5.3.2.2: the redirect URL is always named.
  if (client.profile === FAPI2 && single(raw, 'redirect_uri') === undefined) throw invalidRequest('the "redirect_uri" parameter is missing');
  const target = await resolveTarget(raw, ctx, address);
  if (target.client.id !== client.id) throw invalidRequest('"client_id" must name the client that authenticated');
  // The target's client is read afresh (the database, or its metadata document): a copy in the
  // client cache may predate the client's first secret or keys.
  const owner = { client_id: client.id, client_confidential: isConfidential(target.client) ? 1 : 0 };
  requireOwnerAuthentication(client, authenticated, owner);
  // OAuth errors only: a pushed request has no redirect to go back to.
  const checked = await checkRequest(raw, target, ctx).catch((error: unknown) => {
    throw error instanceof OAuthError ? new OAuthError(error.error, error.description, error.detail) : error;
  });
  const stored = storedParams(raw);
  if (proof !== null) {
    if (checked.dpopJkt !== null && checked.dpopJkt !== proof.jkt)
      throw new OAuthError('invalid_dpop_proof', '"dpop_jkt" names another key than the DPoP proof');
    stored.dpop_jkt = proof.jkt;
  }
  const requestUri = `${REQUEST_URI_PREFIX}${randomBytes(32).toString('base64url')}`;
  const now = ctx.now();
  await insertPushedRequest(ctx.db, {
    hash: hashToken(requestUri),
    client_id: client.id,
    params: JSON.stringify(stored),
    created_at: now,
    expires_at: now + PUSHED_REQUEST_SECONDS * 1000,
  });
  return { request_uri: requestUri, expires_in: PUSHED_REQUEST_SECONDS };
}

/** The authorization request's own parameters, as sent (client authentication and anything unknown left out). */
function storedParams(raw: RawParams): Record<string, string | string[]> {
  const names: readonly string[] = [...AUTHORIZATION_PARAMETERS, 'resource'];
  return Object.fromEntries(Object.entries(raw).filter((entry): entry is [string, string | string[]] => names.includes(entry[0]) && entry[1] !== undefined));
}
