/**
 * The token endpoint's grants, by `grant_type`: the one list of them. The token route's
 * dispatch and body schema and the metadata's `grant_types_supported` all derive from it.
 */
import type { Client } from '../../store/schema.ts';
import type { AppContext } from '../../context.ts';
import type { TokenResponse } from '../issue.ts';
import type { RawParams } from '../params.ts';
import { authorizationCode } from './authorization-code.ts';
import { clientCredentials } from './client-credentials.ts';
import { refreshToken } from './refresh-token.ts';

export interface Grant {
  /** Its `grant_type` value. */
  type: string;
  /** Its own token request parameters (besides `grant_type` and client authentication), each with what it is, for the OpenAPI description. */
  parameters: Readonly<Record<string, string>>;
  /** `address` is the client's, for the audit trail. */
  handle(params: RawParams, client: Client | null, ctx: AppContext, address: string): Promise<TokenResponse>;
}

export const GRANTS: ReadonlyMap<string, Grant> = new Map([authorizationCode, refreshToken, clientCredentials].map((grant) => [grant.type, grant]));

export const GRANT_TYPES: readonly string[] = [...GRANTS.keys()];

