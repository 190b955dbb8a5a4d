/** OpenID Connect userinfo (OIDC Core §5.3): the identity claims an access token's scopes release. */
import type { AppContext } from '../context.ts';
import { identityClaims, OPENID_SCOPE, type IdentityClaims } from '../identity/id-tokens.ts';
import { OAuthError } from '../protocol/errors.ts';
import { single, type RawParams } from '../protocol/params.ts';
import { InsufficientScope, authenticateBearer, requireScope, type PresentedToken } from './bearer.ts';
import { splitScopes } from './scopes.ts';

/**
 * The claims for the token in the `Authorization` header, or (POST) as `access_token` in a
 * form body (RFC 6750 §2.2) — one or the other; it must be for the built-in resource and hold `openid`.
 */
export async function userinfo(ctx: AppContext, fromHeader: PresentedToken | undefined, form: RawParams | null): Promise<IdentityClaims> {
  const inBody = form === null ? undefined : single(form, 'access_token');
  if (inBody !== undefined && fromHeader !== undefined) throw new OAuthError('invalid_request', 'send the access token once: in the header or in the body');
  const token = await authenticateBearer(ctx, fromHeader ?? (inBody === undefined ? undefined : { token: inBody }));
  requireScope(token, splitScopes(token.scopes), OPENID_SCOPE);
  // A client acting as itself is never granted openid (resources.ts `requestScopes`).
  const claims = token.user_id === null ? null : await identityClaims(ctx, token.user_id, splitScopes(token.scopes));
  if (claims === null) throw new InsufficientScope(OPENID_SCOPE, token);
  return claims;
}
