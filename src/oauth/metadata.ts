/**
 * The authorization server metadata document: where the endpoints are and what they
 * support; the same document is the OpenID Provider configuration.
 * @see RFC 8414 §2, RFC 9207 §3, OpenID Connect Discovery 1.0 §3
 */
import { ID_JAG_PROFILE } from './assertions/profiles.ts';
import type { Config } from '../config.ts';
import { DEFAULT_ID_TOKEN_ALG } from '../identity/id-tokens.ts';
import { SIGNING_ALGS } from '../identity/key-schedule.ts';
import { ASSERTION_ALGS } from './assertions/remote-keys.ts';
import { PAR_PATH, PROMPTS, RESPONSE_MODES } from './authorize.ts';
import { DPOP_ALGORITHMS } from './dpop.ts';
import { TOKEN_GRANT_TYPES, TOKEN_PATH } from './grants/index.ts';

/** `GET` and `POST` (OIDC Core §5.3). */
export const USERINFO_PATH = '/oauth/userinfo';

const WELL_KNOWN = '/.well-known/oauth-authorization-server';
export const OPENID_CONFIGURATION = '/.well-known/openid-configuration';

/** The claims ID tokens and userinfo may carry (SPEC §4.10). */
export const CLAIMS_SUPPORTED = [
  'sub',
  'iss',
  'aud',
  'exp',
  'iat',
  'auth_time',
  'nonce',
  'at_hash',
  'sid',
  'amr',
  'azp',
  'preferred_username',
  'name',
  'email',
  'email_verified',
  'groups',
] as const;

/**
 * Where the metadata is served: the well-known paths (RFC 8414's and OpenID Connect
 * Discovery's), and for an issuer with a path (`https://example.com/auth`) the path-inserted
 * locations as well (`/.well-known/oauth-authorization-server/auth`, RFC 8414 §3.1, where
 * clients look first; `/.well-known/openid-configuration/auth` likewise) and Discovery's own,
 * appended to the issuer (`/auth/.well-known/openid-configuration`, for a proxy that passes
 * the path on).
 */
export function metadataPaths(config: Config): string[] {
  const path = new URL(config.publicUrl).pathname.replace(/\/+$/, '');
  if (path === '') return [WELL_KNOWN, OPENID_CONFIGURATION];
  return [WELL_KNOWN, `${WELL_KNOWN}${path}`, OPENID_CONFIGURATION, `${OPENID_CONFIGURATION}${path}`, `${path}${OPENID_CONFIGURATION}`];
}

/** `scopes` is every scope of every resource server (oauth/resources.ts `scopesSupported`). */
export function serverMetadata(config: Config, scopes: readonly string[]) {
  const base = config.publicUrl;
  return {
    issuer: base,
    authorization_endpoint: `${base}/oauth/authorize`,
    token_endpoint: `${base}${TOKEN_PATH}`,
    revocation_endpoint: `${base}/oauth/revoke`,
    device_authorization_endpoint: `${base}/oauth/device_authorization`,
    ...(config.dynamicClientRegistration ? { registration_endpoint: `${base}/oauth/register` } : {}),
    response_types_supported: ['code'],
    response_modes_supported: [...RESPONSE_MODES],
    grant_types_supported: TOKEN_GRANT_TYPES,
    token_endpoint_auth_methods_supported: ['none', 'client_secret_basic', 'client_secret_post', 'private_key_jwt'],
    // private_key_jwt's client assertions (SPEC §4.11): asymmetric algorithms only, never HS* or none.
    token_endpoint_auth_signing_alg_values_supported: [...ASSERTION_ALGS],
    revocation_endpoint_auth_methods_supported: ['none', 'client_secret_basic', 'client_secret_post', 'private_key_jwt'],
    revocation_endpoint_auth_signing_alg_values_supported: [...ASSERTION_ALGS],
    introspection_endpoint: `${base}/oauth/introspect`,
    introspection_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post', 'private_key_jwt'],
    introspection_endpoint_auth_signing_alg_values_supported: [...ASSERTION_ALGS],
    code_challenge_methods_supported: ['S256'],
    scopes_supported: [...scopes],
    prompt_values_supported: [...PROMPTS],
    authorization_response_iss_parameter_supported: true,
    client_id_metadata_document_supported: config.clientMetadata.enabled,
    jwks_uri: `${base}/oauth/jwks`,
    // OpenID Connect (SPEC §4.10).
    userinfo_endpoint: `${base}${USERINFO_PATH}`,
    end_session_endpoint: `${base}/oauth/logout`,
    // The default first: an RP that reads no registration of its own expects it.
    id_token_signing_alg_values_supported: [DEFAULT_ID_TOKEN_ALG, ...SIGNING_ALGS.filter((alg) => alg !== DEFAULT_ID_TOKEN_ALG)],
    subject_types_supported: ['public'],
    claims_supported: [...CLAIMS_SUPPORTED],
    backchannel_logout_supported: true,
    backchannel_logout_session_supported: true,
    request_parameter_supported: false,
    request_uri_parameter_supported: false,
    // The jwt-bearer grant takes identity assertions (ID-JAG) from trusted issuers (SPEC §4.11).
    authorization_grant_profiles_supported: [ID_JAG_PROFILE],
    // DPoP (SPEC §4.14, RFC 9449 §5.1) and PAR (RFC 9126 §5).
    dpop_signing_alg_values_supported: [...DPOP_ALGORITHMS],
    pushed_authorization_request_endpoint: `${base}${PAR_PATH}`,
    require_pushed_authorization_requests: config.requirePar,
  };
}
