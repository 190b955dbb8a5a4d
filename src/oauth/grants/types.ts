/**
 * The `grant_type` values, as the wire spells them: the one place each is written in the
 * code (the store's schema and SQL keep their own literals, below oauth/). Which of them the
 * token endpoint accepts is the grant map's business (index.ts `TOKEN_GRANT_TYPES`); which a
 * client may be registered for is `CLIENT_GRANT_TYPES`.
 */
import type { Client } from '../../store/schema.ts';

export const AUTHORIZATION_CODE_GRANT_TYPE = 'authorization_code' as const;
export const REFRESH_TOKEN_GRANT_TYPE = 'refresh_token' as const;
export const CLIENT_CREDENTIALS_GRANT_TYPE = 'client_credentials' as const;
/** RFC 8628 §3.4. */
export const DEVICE_CODE_GRANT_TYPE = 'urn:ietf:params:oauth:grant-type:device_code' as const;
/** RFC 7523 §2.1. */
export const JWT_BEARER_GRANT_TYPE = 'urn:ietf:params:oauth:grant-type:jwt-bearer' as const;

/** The grants an administrator may register a client for (the token endpoint also takes refresh_token: index.ts `TOKEN_GRANT_TYPES`). */
export const CLIENT_GRANT_TYPES = [
  AUTHORIZATION_CODE_GRANT_TYPE,
  CLIENT_CREDENTIALS_GRANT_TYPE,
  DEVICE_CODE_GRANT_TYPE,
  JWT_BEARER_GRANT_TYPE,
] as const satisfies ReadonlyArray<Client['grant_type']>;

/** What a client is registered for: one of `CLIENT_GRANT_TYPES`, as its row says. */
export type ClientGrantType = (typeof CLIENT_GRANT_TYPES)[number];

/** RFC 8693 §2.1. */
export const TOKEN_EXCHANGE_GRANT_TYPE = 'urn:ietf:params:oauth:grant-type:token-exchange' as const;

/** RFC 8693 §3: the token types a token exchange names. */
export const ACCESS_TOKEN_URN = 'urn:ietf:params:oauth:token-type:access_token' as const;
export const ID_TOKEN_URN = 'urn:ietf:params:oauth:token-type:id_token' as const;
/** draft-ietf-oauth-identity-assertion-authz-grant §3. */
export const ID_JAG_URN = 'urn:ietf:params:oauth:token-type:id-jag' as const;
