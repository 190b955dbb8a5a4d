/** `grant_type=client_credentials`, for confidential clients registered for it. @see RFC 6749 §4.4 */
import type { Client } from '../../store/schema.ts';
import { InvalidClient } from '../client-auth.ts';
import type { AppContext } from '../../context.ts';
import { OAuthError } from '../../protocol/errors.ts';
import type { DpopProof } from '../dpop.ts';
import { mintTokenResponse, proofBinding, type TokenResponse } from '../issue.ts';
import { isResourceServerClient } from '../../store/resources.ts';
import { requestScopes, requestedAudience, resourceDetail } from '../resources.ts';
import { defineGrant, type Loaded, type ParamsOf } from './grant.ts';
import { CLIENT_CREDENTIALS_GRANT_TYPE } from './types.ts';
import { insertingGrant, writeGrant } from './write-grant.ts';

const parameters = {
  scope: { description: 'a subset of the scopes registered for the client on the resource' },
  resource: { repeatable: true, description: 'the resource server the token is for (RFC 8707); absent: the built-in resource' },
} as const;

type Params = ParamsOf<typeof parameters>;

// It redeems nothing but the client's own credentials: the client is the one that authenticated
// (a confidential one: the dispatcher refuses a public client that names itself, grant.ts `requireRegistered`).
export const clientCredentials = defineGrant({
  type: CLIENT_CREDENTIALS_GRANT_TYPE,
  usableBy: [CLIENT_CREDENTIALS_GRANT_TYPE],
  title: 'client_credentials grant',
  parameters,
  client: 'credentials',
  redeems: 'client secret',
  load,
  issue,
});

async function load(_params: Params, client: Client, ctx: AppContext): Promise<Loaded<null>> {
  // A resource server's own client exists only to introspect (SPEC §4.4).
  if (await isResourceServerClient(ctx.db, client.id)) {
    throw new OAuthError('unauthorized_client', "a resource server's introspection client cannot obtain tokens");
  }
  return { clientId: client.id, redeemed: null };
}

async function issue(_redeemed: null, params: Params, client: Client, ctx: AppContext, address: string, proof: DpopProof | null): Promise<TokenResponse> {
  const audience = await requestedAudience(ctx, params.resource);
  const scopes = requestScopes(params.scope, client, audience, false);
  // RFC 6749 §4.4.3: no refresh token.
  const pair = await mintTokenResponse(ctx, audience.tokens, { clientId: client.id, userId: null, username: null, login: null }, scopes, {
    withRefresh: false,
    binding: proofBinding(proof, true),
  });
  const grant = {
    grantType: CLIENT_CREDENTIALS_GRANT_TYPE,
    clientId: client.id,
    userId: null,
    resourceId: audience.id,
    clientScopes: client.scopes,
    login: null,
    detail: resourceDetail(audience),
  };
  if (!(await writeGrant(ctx, grant, pair.stored, ctx.now(), address, insertingGrant(ctx)))) {
    throw new InvalidClient('the client was deleted or changed while the request ran', false);
  }
  return pair.response;
}
