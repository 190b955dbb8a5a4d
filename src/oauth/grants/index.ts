/** The token endpoint's grants, by `grant_type`. */
import type { Client } from '../../store/schema.ts';
import type { AppContext } from '../../context.ts';
import type { TokenResponse } from '../issue.ts';
import type { RawParams } from '../params.ts';
import * as authorizationCode from './authorization-code.ts';
import * as clientCredentials from './client-credentials.ts';
import * as refreshToken from './refresh-token.ts';

/** `address` is the client's, for the audit trail. */
export type GrantHandler = (params: RawParams, client: Client | null, ctx: AppContext, address: string) => Promise<TokenResponse>;

export const GRANTS: ReadonlyMap<string, GrantHandler> = new Map(
  [authorizationCode, refreshToken, clientCredentials].map((grant) => [grant.grantType, grant.handle]),
);
