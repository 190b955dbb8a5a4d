/**
 * The route schemas, for the OpenAPI description (http/openapi.ts collects them).
 *
 * They document; they do not validate. The OAuth routes (and the WebSocket's) are
 * registered with `...PARAMETERS_CHECKED_BY_PROTOCOL`, so Fastify only attaches its
 * validation result and the protocol code in src/oauth/ reads and checks every parameter
 * itself, answering with OAuth's own errors. Changing a schema here changes the document,
 * never what a request is refused for.
 */
import { MAX_NONCE_LENGTH, PROMPTS, RESPONSE_MODES } from '../oauth/authorize.ts';
import type { OAuthErrorCode } from '../protocol/errors.ts';
import { GRANTS, TOKEN_GRANT_TYPES } from '../oauth/grants/index.ts';

export const TAGS = {
  oauth: 'OAuth',
  discovery: 'Discovery',
  resource: 'Resource',
  operations: 'Operations',
} as const;

/**
 * Route options for endpoints whose form or query parameters the protocol code reads
 * itself: it answers with OAuth's own errors (RFC 6749 §5.2), naming every missing
 * parameter and refusing a repeated one as `invalid_request` — which a schema check would
 * turn into a bland 400 before the code sees the request (our parser makes a repeated
 * parameter an array). The schema documents the parameters; `attachValidation` leaves the
 * verdict to the protocol code.
 */
export const PARAMETERS_CHECKED_BY_PROTOCOL = { attachValidation: true } as const;

/** A form body's schema: `application/x-www-form-urlencoded` is the only body Gatehouse reads. */
export function formBody(properties: Record<string, object>, required: string[] = []) {
  return { content: { 'application/x-www-form-urlencoded': { schema: { type: 'object', properties, required } } } };
}

/** The RFC 6749 §5.2 error body every JSON endpoint answers with. */
export function oauthError(description: string, errors?: readonly OAuthErrorCode[]) {
  return {
    description,
    type: 'object',
    required: ['error', 'error_description'],
    properties: {
      error: { type: 'string', ...(errors ? { enum: errors } : {}), description: 'the error code, for your code' },
      error_description: { type: 'string', description: 'what went wrong, for people (never contains a token)' },
    },
  } as const;
}

/** What a client-authenticating endpoint can be refused with, besides its own errors. */
export const CLIENT_AUTH_ERRORS = {
  401: oauthError('`invalid_client`: unknown client, wrong secret or refused client assertion (with `WWW-Authenticate: Basic` when HTTP Basic was used)', [
    'invalid_client',
  ]),
  429: oauthError('`temporarily_unavailable`: too many requests; `Retry-After` says when to try again', ['temporarily_unavailable']),
  503: oauthError('`temporarily_unavailable`: a service Gatehouse depends on is unreachable', ['temporarily_unavailable']),
} as const;

/** `private_key_jwt` (SPEC §4.11): a client assertion instead of a secret. */
const CLIENT_ASSERTION_FIELDS = {
  client_assertion_type: { type: 'string', description: 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer, for a private_key_jwt client' },
  client_assertion: { type: 'string', description: "a private_key_jwt client's assertion: a JWT signed by one of its keys (RFC 7523 §2.2)" },
} as const;

/** Every way a request names or authenticates its client in the body, beside HTTP Basic. */
const CLIENT_FIELDS = {
  client_id: { type: 'string', description: 'the client, unless it authenticates with HTTP Basic' },
  client_secret: { type: 'string', description: "a confidential client's secret (client_secret_post), unless it uses HTTP Basic" },
  ...CLIENT_ASSERTION_FIELDS,
} as const;

/** Client authentication: HTTP Basic (`client_secret_basic`), or `client_id` (+ `client_secret`) in the body. */
export const CLIENT_SECURITY: { [scheme: string]: string[] }[] = [{}, { clientSecretBasic: [] }];

export const metadataSchema = {
  tags: [TAGS.discovery],
  summary: 'Authorization server metadata (RFC 8414)',
  response: {
    200: {
      description: 'The endpoints and what they support; `issuer` is PUBLIC_URL',
      type: 'object',
      additionalProperties: true,
      properties: {
        issuer: { type: 'string' },
        authorization_endpoint: { type: 'string' },
        token_endpoint: { type: 'string' },
        revocation_endpoint: { type: 'string' },
      },
    },
  },
} as const;

/** The same document, as OpenID Connect Discovery 1.0 names it. */
export const openidConfigurationSchema = {
  ...metadataSchema,
  summary: 'OpenID Provider configuration (OpenID Connect Discovery 1.0): the same document',
} as const;

export const authorizeSchema = {
  tags: [TAGS.oauth],
  summary: 'Authorization request (RFC 6749 §4.1.1, PKCE RFC 7636)',
  description:
    "Opened in the person's browser (or popup), never fetched. Errors about the client or the redirect URL render a page; " +
    'every other answer goes to the redirect URL with `state` and `iss` (RFC 9207), ' +
    'with `response_mode=form_post` is POSTed there by an auto-submitting form, ' +
    'or with `response_mode=web_message` is posted to `window.opener`.',
  querystring: {
    type: 'object',
    required: ['client_id', 'response_type'],
    properties: {
      client_id: { type: 'string', description: 'the client ID (a UUID)' },
      redirect_uri: { type: 'string', description: 'exactly the registered redirect URL; the registered one when left out' },
      response_type: { type: 'string', enum: ['code'] },
      state: { type: 'string', description: 'returned unchanged; ties the answer to your request' },
      scope: { type: 'string', description: 'space-separated scopes; default: all the client may have' },
      resource: { type: 'string', description: 'the URI of the resource server the token is for (RFC 8707); default: this service' },
      code_challenge: { type: 'string', description: 'BASE64URL(SHA-256(code_verifier)), 43 characters' },
      code_challenge_method: { type: 'string', enum: ['S256'] },
      response_mode: { type: 'string', enum: RESPONSE_MODES, description: '`form_post`: an auto-submitting form; `web_message`: the popup flow' },
      prompt: { type: 'string', description: `space-separated: ${PROMPTS.map((p) => `\`${p}\``).join(', ')}` },
      nonce: { type: 'string', maxLength: MAX_NONCE_LENGTH, description: 'OpenID Connect: copied into the ID token of the code' },
      // A string here: Fastify coerces what a schema calls a number, and the protocol reads the text (authorize.ts).
      max_age: { type: 'string', pattern: '^[0-9]+$', description: 'OpenID Connect: seconds; an older login is made again first (`0`: as `prompt=login`)' },
      login_hint: { type: 'string', description: 'OpenID Connect: fills the username field of the login page' },
      id_token_hint: {
        type: 'string',
        description: 'OpenID Connect: an ID token this server issued (expiry ignored); with `prompt=none`, another user logged in is `login_required`',
      },
      request: { type: 'string', description: 'not supported: `request_not_supported`' },
      request_uri: { type: 'string', description: 'not supported: `request_uri_not_supported`' },
    },
  },
  response: {
    200: {
      description: 'A page: login, consent, the form posting the answer (`form_post`), or (popup flow) the page posting the answer to `window.opener`',
      content: { 'text/html': { schema: { type: 'string' } } },
    },
    302: {
      description: 'To the login page, or to the redirect URL with `code`, `state`, `iss` (or `error`, `error_description`, `state`, `iss`)',
      type: 'null',
    },
    400: {
      description: 'An error page: unknown client, or a redirect URL that is not the registered one (never redirected)',
      content: { 'text/html': { schema: { type: 'string' } } },
    },
  },
} as const;

/**
 * Each grant's own parameters, as the grant modules declare them; one taken by several
 * grants (`scope`) says what it means for each.
 */
function grantParameters(): Record<string, { type: 'string'; description: string }> {
  const meanings = new Map<string, string[]>();
  for (const grant of GRANTS.values()) {
    for (const [name, { description }] of Object.entries(grant.parameters)) {
      meanings.set(name, [...(meanings.get(name) ?? []), `${grant.type}: ${description}`]);
    }
  }
  return Object.fromEntries([...meanings].map(([name, described]) => [name, { type: 'string', description: described.join('; ') }]));
}

const tokenResponseSchema = {
  200: {
    description:
      'The tokens (RFC 6749 §5.1), with `Cache-Control: no-store`; no refresh token for client_credentials and token exchange; ' +
      "a token exchange's ID-JAG or provider token in `access_token` (RFC 8693 §2.2.1), `expires_in` absent when the provider did not say",
    type: 'object',
    required: ['token_type', 'access_token'],
    properties: {
      token_type: {
        type: 'string',
        description: '`Bearer`, or `DPoP` when the request sent a DPoP proof (RFC 9449 §5); `N_A` for an ID-JAG (RFC 8693 §2.2.1)',
      },
      access_token: { type: 'string' },
      expires_in: { type: 'integer' },
      refresh_token: { type: 'string' },
      scope: { type: 'string' },
      id_token: { type: 'string', description: 'when the scopes hold `openid`: the OpenID Connect ID token (a JWS)' },
      issued_token_type: { type: 'string', description: 'a token exchange (RFC 8693 §2.2.1): what `access_token` is' },
    },
  },
} as const;

export const tokenSchema = {
  tags: [TAGS.oauth],
  summary:
    'Token request: code exchange, refresh, client credentials, device code polling, JWT grants, token exchange ' +
    '(RFC 6749 §4.1.3, §6, §4.4; RFC 8628 §3.4; RFC 7523; RFC 8693)',
  security: CLIENT_SECURITY,
  body: formBody(
    {
      grant_type: { type: 'string', enum: TOKEN_GRANT_TYPES },
      ...grantParameters(),
      ...CLIENT_FIELDS,
    },
    ['grant_type'],
  ),
  response: {
    ...tokenResponseSchema,
    400: oauthError(
      'A refused request (RFC 6749 §5.2), `invalid_target` (RFC 8707); while polling with a device code also ' +
        '`authorization_pending`, `slow_down`, `access_denied`, `expired_token` (RFC 8628 §3.5)',
      [
        'invalid_request',
        'invalid_grant',
        'invalid_scope',
        'unauthorized_client',
        'unsupported_grant_type',
        'invalid_target',
        'authorization_pending',
        'slow_down',
        'access_denied',
        'expired_token',
      ],
    ),
    ...CLIENT_AUTH_ERRORS,
  },
} as const;

export const deviceAuthorizationSchema = {
  tags: [TAGS.oauth],
  summary: 'Device authorization request (RFC 8628 §3.1): a device code to poll with, and a user code for the person',
  security: CLIENT_SECURITY,
  body: formBody({
    ...CLIENT_FIELDS,
    scope: { type: 'string', description: 'space-separated scopes; default: all the client may have' },
    resource: { type: 'string', description: 'the resource server the tokens are for (RFC 8707); default: the built-in one' },
  }),
  response: {
    200: {
      description: 'Show `user_code` and `verification_uri` to the person, then poll the token endpoint every `interval` seconds',
      type: 'object',
      required: ['device_code', 'user_code', 'verification_uri', 'verification_uri_complete', 'expires_in', 'interval'],
      properties: {
        device_code: { type: 'string' },
        user_code: { type: 'string', description: '8 letters, shown as XXXX-XXXX' },
        verification_uri: { type: 'string' },
        verification_uri_complete: { type: 'string', description: '`verification_uri` with the user code filled in (for a link or a QR code)' },
        expires_in: { type: 'integer' },
        interval: { type: 'integer' },
      },
    },
    400: oauthError('A refused request', ['invalid_request', 'invalid_scope', 'invalid_target', 'unauthorized_client']),
    ...CLIENT_AUTH_ERRORS,
  },
} as const;

export const parSchema = {
  tags: [TAGS.oauth],
  summary: 'Pushed authorization request (RFC 9126): the authorization request, sent ahead, for a request_uri',
  security: CLIENT_SECURITY,
  body: formBody({
    ...CLIENT_FIELDS,
    response_type: { type: 'string', description: '`code`' },
    redirect_uri: { type: 'string' },
    state: { type: 'string' },
    scope: { type: 'string' },
    resource: { type: 'string' },
    code_challenge: { type: 'string' },
    code_challenge_method: { type: 'string', description: '`S256`' },
    dpop_jkt: { type: 'string', description: 'the thumbprint of the DPoP key the code is for (RFC 9449 §10); a DPoP proof does the same' },
  }),
  response: {
    201: {
      description: 'Send the browser to the authorization endpoint with `client_id` and this `request_uri`, within `expires_in` seconds; it answers once',
      type: 'object',
      required: ['request_uri', 'expires_in'],
      properties: { request_uri: { type: 'string' }, expires_in: { type: 'integer' } },
    },
    400: oauthError('A refused request: what the authorization endpoint would refuse', [
      'invalid_request',
      'invalid_scope',
      'invalid_target',
      'unauthorized_client',
      'unsupported_response_type',
      'invalid_dpop_proof',
    ]),
    ...CLIENT_AUTH_ERRORS,
  },
} as const;

export const revokeSchema = {
  tags: [TAGS.oauth],
  summary: "Revocation (RFC 7009): revokes the token's whole grant, both tokens",
  security: CLIENT_SECURITY,
  body: formBody(
    {
      token: { type: 'string', description: 'an access or refresh token' },
      token_type_hint: { type: 'string', description: '`access_token` or `refresh_token`; only decides which is looked up first' },
      client_id: { type: 'string' },
      client_secret: { type: 'string' },
      ...CLIENT_ASSERTION_FIELDS,
    },
    ['token'],
  ),
  response: {
    200: { description: 'Revoked, or nothing to revoke (unknown tokens succeed too)', type: 'object', properties: {} },
    400: oauthError("A refused request; `unauthorized_client` for another client's token", ['invalid_request', 'unauthorized_client']),
    ...CLIENT_AUTH_ERRORS,
  },
} as const;

/** Only these fields can leave the introspection endpoint (RFC 7662 §2.2). */
const introspectionResponseSchema = {
  200: {
    description: 'The token\'s state (RFC 7662 §2.2): `{"active":false}` alone for anything not live',
    type: 'object',
    required: ['active'],
    properties: {
      active: { type: 'boolean' },
      scope: { type: 'string' },
      client_id: { type: 'string' },
      username: { type: 'string' },
      sub: { type: 'string' },
      token_type: { type: 'string' },
      exp: { type: 'integer' },
      iat: { type: 'integer' },
      iss: { type: 'string' },
      aud: { type: 'string', description: 'the URI of the resource server the token is for (RFC 8707)' },
      jti: { type: 'string', description: "a JWT access token's `jti` (RFC 9068); absent for opaque tokens" },
      auth_time: { type: 'integer', description: "a person's token: when they logged in to approve the grant (epoch seconds)" },
      amr: { type: 'array', items: { type: 'string' }, description: 'a person\'s token: how they logged in (RFC 8176), e.g. `["pwd"]`' },
      cnf: {
        type: 'object',
        properties: { jkt: { type: 'string' } },
        description: 'a DPoP-bound token (`token_type` `DPoP`): the RFC 7638 thumbprint of its key (RFC 9449 §6.2)',
      },
      act: {
        type: 'object',
        additionalProperties: true,
        description: 'a token made by a token exchange: who acts for the person, `{"sub": <client ID>}`, nested when exchanged again (RFC 8693 §4.1)',
      },
    },
  },
} as const;

export const introspectSchema = {
  tags: [TAGS.oauth],
  summary: 'Introspection (RFC 7662), for confidential clients',
  security: CLIENT_SECURITY,
  body: formBody(
    {
      token: { type: 'string' },
      token_type_hint: { type: 'string' },
      client_id: { type: 'string', description: 'with client_secret, when not using HTTP Basic' },
      client_secret: { type: 'string' },
      ...CLIENT_ASSERTION_FIELDS,
    },
    ['token'],
  ),
  response: { ...introspectionResponseSchema, 400: oauthError('A refused request', ['invalid_request']), ...CLIENT_AUTH_ERRORS },
} as const;
