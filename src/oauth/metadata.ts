/**
 * The authorization server metadata document: where the endpoints are and what they
 * support. @see RFC 8414 §2, RFC 9207 §3
 */
import type { Config } from '../config.ts';
import { TOKEN_GRANT_TYPES } from './grants/index.ts';

const WELL_KNOWN = '/.well-known/oauth-authorization-server';

/**
 * Where the metadata is served: the well-known path, and for an issuer with a path
 * (`https://example.com/auth`) the path-inserted location as well
 * (`/.well-known/oauth-authorization-server/auth`, RFC 8414 §3.1), where clients look first.
 */
export function metadataPaths(config: Config): string[] {
  const path = new URL(config.publicUrl).pathname.replace(/\/+$/, '');
  return path === '' ? [WELL_KNOWN] : [WELL_KNOWN, `${WELL_KNOWN}${path}`];
}

/** `scopes` is every scope of every resource server (oauth/resources.ts `scopesSupported`). */
export function serverMetadata(config: Config, scopes: readonly string[]) {
  const base = config.publicUrl;
  return {
    issuer: base,
    authorization_endpoint: `${base}/oauth/authorize`,
    token_endpoint: `${base}/api/token`,
    revocation_endpoint: `${base}/oauth/revoke`,
    device_authorization_endpoint: `${base}/oauth/device_authorization`,
    ...(config.dynamicClientRegistration ? { registration_endpoint: `${base}/oauth/register` } : {}),
    response_types_supported: ['code'],
    response_modes_supported: ['query', 'web_message'],
    grant_types_supported: TOKEN_GRANT_TYPES,
    token_endpoint_auth_methods_supported: ['none', 'client_secret_basic', 'client_secret_post'],
    revocation_endpoint_auth_methods_supported: ['none', 'client_secret_basic', 'client_secret_post'],
    introspection_endpoint: `${base}/oauth/introspect`,
    introspection_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post'],
    code_challenge_methods_supported: ['S256'],
    scopes_supported: [...scopes],
    prompt_values_supported: ['none', 'login', 'consent'],
    authorization_response_iss_parameter_supported: true,
    client_id_metadata_document_supported: config.clientMetadata.enabled,
    jwks_uri: `${base}/oauth/jwks`,
  };
}
