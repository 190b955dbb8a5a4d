/** `grant_type=client_credentials`, for confidential clients registered for it. @see RFC 6749 §4.4 */
import { insertGrant } from '../../store/atomic-writes.ts';
import type { Client } from '../../store/schema.ts';
import { InvalidClient, secretRequired } from '../client-auth.ts';
import type { AppContext } from '../../context.ts';
import { timeOrderedUuid } from '../../ids.ts';
import { OAuthError } from '../errors.ts';
import { mintTokenResponse, type TokenResponse } from '../issue.ts';
import { readParams, type RawParams } from '../params.ts';
import { isResourceServerClient } from '../../store/resources.ts';
import { allowedScopes, requestedAudience, resourceDetail } from '../resources.ts';
import { grantableScopes, joinScopes } from '../scopes.ts';
import type { Grant } from './index.ts';

export const clientCredentials: Grant = {
  type: 'client_credentials',
  parameters: {
    scope: 'a subset of the scopes registered for the client on the resource',
    resource: 'the resource server the token is for (RFC 8707); absent: the built-in resource',
  },
  handle,
};

async function handle(raw: RawParams, client: Client | null, ctx: AppContext, address: string): Promise<TokenResponse> {
  const params = readParams(raw, [], ['scope']);
  if (client === null) throw secretRequired();
  if (client.secret_hash === null || client.grant_type !== 'client_credentials') {
    throw new OAuthError('unauthorized_client', 'this client is not registered for the client_credentials grant');
  }
  // A resource server's own client exists only to introspect (SPEC §4.4).
  if (await isResourceServerClient(ctx.db, client.id)) {
    throw new OAuthError('unauthorized_client', "a resource server's introspection client cannot obtain tokens");
  }
  const audience = await requestedAudience(ctx, raw.resource);
  const scopes = grantableScopes(params.scope, allowedScopes(client, audience), audience.scopes.map((s) => s.name));
  const pair = mintTokenResponse(ctx, scopes, false); // RFC 6749 §4.4.3: no refresh token
  const now = ctx.now();
  const grant = { id: timeOrderedUuid(now), clientId: client.id, userId: null, resourceId: audience.id, scopes: joinScopes(scopes), clientScopes: client.scopes };
  const issued = ctx.audit.pending({ type: 'token_issued', clientId: client.id, address, detail: { grant_type: 'client_credentials', grant_id: grant.id, scope: grant.scopes, ...resourceDetail(audience) } });
  if (!(await insertGrant(ctx.db, grant, pair.stored, now, issued.row))) {
    throw new InvalidClient('the client was deleted or changed while the request ran', false);
  }
  issued.committed();
  return pair.response;
}
