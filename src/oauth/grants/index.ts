/**
 * The token endpoint's grants, by `grant_type`: the one list of them. The token route's
 * dispatch and body schema and the metadata's `grant_types_supported` all derive from it.
 */
import type { Client } from '../../store/schema.ts';
import type { AppContext } from '../../context.ts';
import { authenticateClient } from '../client-auth.ts';
import { requireStanding } from '../client-kinds.ts';
import { OAuthError, invalidRequest } from '../errors.ts';
import type { TokenResponse } from '../issue.ts';
import { single, type RawParams } from '../params.ts';
import { authorizationCode } from './authorization-code.ts';
import { clientCredentials } from './client-credentials.ts';
import { deviceCode } from './device-code.ts';
import { refreshToken } from './refresh-token.ts';

/**
 * Called by a grant once the request has proven it comes from `clientId` — it carries a
 * code or refresh token issued to that client — and before the grant changes anything:
 * charges the client's token budget, throwing `Throttled` beyond it, and checks the client
 * may still obtain tokens (not blocked; a metadata document that still resolves).
 */
export type ProvenClient = (clientId: string) => Promise<void>;

export interface Grant {
  /** Its `grant_type` value. */
  type: string;
  /** Its own token request parameters (besides `grant_type` and client authentication), each with what it is, for the OpenAPI description. */
  parameters: Readonly<Record<string, string>>;
  /** `address` is the client's, for the audit trail. */
  handle(params: RawParams, client: Client | null, ctx: AppContext, address: string, proven: ProvenClient): Promise<TokenResponse>;
}

export const GRANTS: ReadonlyMap<string, Grant> = new Map([authorizationCode, refreshToken, clientCredentials, deviceCode].map((grant) => [grant.type, grant]));

export const GRANT_TYPES: readonly string[] = [...GRANTS.keys()];

/**
 * `POST /api/token`: pick the grant, throttle, authenticate the client, run the grant.
 *
 * Every request counts against its address (TOKEN_REQUESTS_PER_ADDRESS). A client's own
 * budget (TOKEN_REQUESTS_PER_CLIENT) is charged only for requests that prove they come from
 * it: a confidential client's, once its secret is checked; a public client's, once the grant
 * has found the code or refresh token it carries and seen it was issued to that client — the
 * request is charged then, whether the grant goes on to succeed or to refuse it (expired,
 * replayed, wrong verifier). A request that merely names a client spends only its address's
 * budget, so nobody can lock a client out by flooding the endpoint with its client_id.
 */
export async function requestToken(params: RawParams, authorization: string | undefined, ctx: AppContext, address: string): Promise<TokenResponse> {
  const grantType = single(params, 'grant_type');
  if (grantType === undefined) throw invalidRequest('the "grant_type" parameter is missing');
  const grant = GRANTS.get(grantType);
  if (!grant) throw new OAuthError('unsupported_grant_type', `supported grant types are ${GRANT_TYPES.join(', ')}`);
  const { throttle } = ctx.services;
  await throttle.tokenRequestFrom(address);
  const client = await authenticateClient(ctx.clients, authorization, params);
  let charged: string | null = null;
  const proven: ProvenClient = async (clientId) => {
    if (charged === clientId) return; // an authenticated client is charged once, not again by its grant
    charged = clientId;
    await throttle.tokenRequestOf(clientId);
    const proved = client?.id === clientId ? client : await ctx.clients.find(clientId);
    if (proved) await requireStanding(ctx, proved, address);
  };
  if (client !== null && client.secret_hash !== null) await proven(client.id);
  return grant.handle(params, client, ctx, address, proven);
}
