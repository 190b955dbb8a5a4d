/**
 * Dynamic client registration (RFC 7591, SPEC §4.8): an application registers itself with
 * a JSON document and gets a client ID at once. Such clients are public, always use PKCE,
 * are never trusted, and are purged when unused (store/purge.ts). Unknown fields are
 * ignored (RFC 7591 §2); known ones are checked like a metadata document's.
 */
import { randomUUID } from 'node:crypto';
import { SCOPES } from '../config.ts';
import type { AppContext } from '../context.ts';
import { SCOPE, clientFlags, isStringArray, optionalHttpsUrl } from '../oauth/client-metadata.ts';
import { isAdministratorsClientName, normalizeClientName } from '../oauth/client-names.ts';
import { AUTHORIZATION_CODE_GRANT_TYPE, REFRESH_TOKEN_GRANT_TYPE } from '../oauth/grants/types.ts';
import { OAuthError } from '../protocol/errors.ts';
import { joinScopes } from '../oauth/scopes.ts';
import { insertClient } from '../store/clients.ts';
import { redirectUrisProblem } from './clients.ts';

/** The only grant and response types such a client may use; `none` is its only authentication. */
const DYNAMIC_CLIENT_GRANT_TYPES = [AUTHORIZATION_CODE_GRANT_TYPE, REFRESH_TOKEN_GRANT_TYPE];
const RESPONSE_TYPES = ['code'];
/** The name shown on the consent page when the registration gives none. */
const UNNAMED = 'Unnamed application';
const MAX_SCOPE_LENGTH = 1000;

const invalidMetadata = (description: string) => new OAuthError('invalid_client_metadata', description);

/** The registered client's metadata, as answered (RFC 7591 §3.2.1). */
export interface RegistrationResponse {
  client_id: string;
  client_id_issued_at: number;
  client_name: string;
  redirect_uris: string[];
  grant_types: string[];
  response_types: string[];
  token_endpoint_auth_method: 'none';
  client_uri?: string;
  logo_uri?: string;
  scope?: string;
  /** RFC 9449 §5.2, RFC 9126 §6: its tokens only with a DPoP proof, its requests only pushed; each said only when true. */
  dpop_bound_access_tokens?: true;
  require_pushed_authorization_requests?: true;
}

/** A list field: absent (the default), or an array of strings all among `allowed`. */
function listField(fields: Record<string, unknown>, name: string, allowed: readonly string[]): string[] {
  const value = fields[name];
  if (value === undefined) return [...allowed];
  if (!isStringArray(value)) throw invalidMetadata(`${name} must be an array of strings`);
  // Values this server does not support are left out of the registration, whose answer says
  // what was registered (RFC 7591 §3.2.1) — VS Code lists every grant the server's metadata
  // names. A list with none it supports is refused.
  const kept = [...new Set(value.filter((item) => allowed.includes(item)))];
  if (kept.length === 0) throw invalidMetadata(`${name} must list ${allowed.join(' or ')}`);
  return kept;
}

/** Checks the registration request `body` (parsed JSON) into the metadata to register; throws the RFC 7591 errors. */
export function registrationMetadata(body: unknown): Omit<RegistrationResponse, 'client_id' | 'client_id_issued_at'> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw invalidMetadata('the body must be a JSON object');
  const fields = body as Record<string, unknown>;
  const redirectUris = fields.redirect_uris;
  if (!isStringArray(redirectUris) || redirectUris.length === 0)
    throw new OAuthError('invalid_redirect_uri', 'redirect_uris must be a non-empty array of URLs');
  // Only public clients register themselves (token_endpoint_auth_method none, below).
  const redirectProblem = redirectUrisProblem(redirectUris, { required: true, publicClient: true });
  if (redirectProblem) throw new OAuthError('invalid_redirect_uri', redirectProblem);

  const rawName = fields.client_name;
  if (rawName !== undefined && typeof rawName !== 'string') throw invalidMetadata('client_name must be a string');
  const named = normalizeClientName(rawName?.trim() || UNNAMED);
  if ('problem' in named) throw invalidMetadata(`client_name ${named.problem}`);
  const clientUri = optionalHttpsUrl(fields, 'client_uri');
  if ('problem' in clientUri) throw invalidMetadata(clientUri.problem);
  const logoUri = optionalHttpsUrl(fields, 'logo_uri');
  if ('problem' in logoUri) throw invalidMetadata(logoUri.problem);
  const method = fields.token_endpoint_auth_method;
  if (method !== undefined && method !== 'none') throw invalidMetadata('token_endpoint_auth_method must be none: only public clients may register themselves');
  // An empty scope is none asked for (the MCP Inspector sends "" when the server names no scopes).
  const scope = fields.scope === '' ? undefined : fields.scope;
  if (scope !== undefined && (typeof scope !== 'string' || scope.length > MAX_SCOPE_LENGTH || !SCOPE.test(scope)))
    throw invalidMetadata('scope must be a space-separated list of scope names');
  const flags = clientFlags(fields);
  if ('problem' in flags) throw invalidMetadata(flags.problem);

  return {
    client_name: named.name,
    redirect_uris: redirectUris,
    grant_types: listField(fields, 'grant_types', DYNAMIC_CLIENT_GRANT_TYPES),
    response_types: listField(fields, 'response_types', RESPONSE_TYPES),
    token_endpoint_auth_method: 'none',
    ...(clientUri.value === null ? {} : { client_uri: clientUri.value }),
    ...(logoUri.value === null ? {} : { logo_uri: logoUri.value }),
    ...(scope === undefined ? {} : { scope }),
    ...(flags.requireDpop ? { dpop_bound_access_tokens: true as const } : {}),
    ...(flags.requirePar ? { require_pushed_authorization_requests: true as const } : {}),
  };
}

/** Registers the client `body` describes and records who asked (`address`). */
export async function registerDynamicClient(ctx: AppContext, body: unknown, address: string): Promise<RegistrationResponse> {
  const metadata = registrationMetadata(body);
  // Checked here, not with the rest: it needs the database.
  if (await isAdministratorsClientName(ctx.db, metadata.client_name))
    throw invalidMetadata('client_name is the name of an application an administrator registered');
  const now = ctx.now();
  const id = randomUUID();
  await insertClient(ctx.db, {
    id,
    kind: 'dynamic',
    name: metadata.client_name,
    grant_type: AUTHORIZATION_CODE_GRANT_TYPE,
    redirect_uris: JSON.stringify(metadata.redirect_uris),
    secret_hash: null,
    trusted: 0,
    require_pkce: 1,
    scopes: joinScopes(SCOPES),
    created_at: now,
    require_dpop: metadata.dpop_bound_access_tokens ? 1 : 0,
    require_par: metadata.require_pushed_authorization_requests ? 1 : 0,
  });
  await ctx.audit({ type: 'client_registered', clientId: id, address, detail: { redirect_uris: metadata.redirect_uris.length } });
  return { client_id: id, client_id_issued_at: Math.floor(now / 1000), ...metadata };
}
