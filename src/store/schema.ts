/**
 * The tables as the application sees them. Both backends return the same runtime types:
 * times are epoch milliseconds (SQLite INTEGER; PostgreSQL BIGINT parsed to number),
 * flags are 0/1 integers, scope lists are space-separated strings.
 */
import type { ColumnType, Insertable, Selectable } from 'kysely';

/** Set on insert, never changed afterwards. */
type Immutable<T> = ColumnType<T, T, never>;

export interface UsersTable {
  id: Immutable<string>;
  username: string;
  /** NFKC + lower case: usernames are unique case-insensitively. */
  username_key: string;
  email: string;
  email_key: string;
  display_name: string | null;
  /** 1 when an administrator has marked the e-mail address verified (the OIDC `email_verified` claim). */
  email_verified: ColumnType<number, number | undefined, number>;
  password_hash: string;
  is_admin: number;
  disabled: number;
  created_at: Immutable<number>;
}

export interface ClientsTable {
  id: Immutable<string>;
  name: string;
  grant_type: 'authorization_code' | 'client_credentials' | 'urn:ietf:params:oauth:grant-type:device_code' | 'urn:ietf:params:oauth:grant-type:jwt-bearer';
  /** Who made it known: an administrator, its metadata document (its id is the document's URL), or dynamic registration. */
  kind: ColumnType<ClientKind, ClientKind | undefined, ClientKind>;
  /** 1 when an administrator blocked it (kinds other than 'registered' only). */
  blocked: ColumnType<number, number | undefined, number>;
  /** 1 when an administrator disabled it (any kind, SPEC §4.16): refused like a blocked client until enabled again. */
  disabled: ColumnType<number, number | undefined, number>;
  /** The redirect URLs, as a JSON array of strings; read with `redirectUrisOf`. */
  redirect_uris: string;
  /** SHA-256 of the secret, for confidential clients; null for public ones. */
  secret_hash: string | null;
  trusted: number;
  require_pkce: number;
  scopes: string;
  created_at: Immutable<number>;
  /** OpenID Connect (SPEC §4.10): where RP-initiated logout may return to, as a JSON array of URLs matched exactly. */
  post_logout_redirect_uris: ColumnType<string, string | undefined, string>;
  /** Where back-channel logout tokens are POSTed; null for none. */
  backchannel_logout_uri: ColumnType<string | null, string | null | undefined, string | null>;
  /** The algorithm of its ID tokens and logout tokens (`id_token_signed_response_alg`). */
  id_token_alg: ColumnType<SigningAlg, SigningAlg | undefined, SigningAlg>;
  /**
   * `private_key_jwt` (SPEC §4.11): the client's public keys as a JWK Set (JSON text), or the
   * https URL they are fetched from; at most one is set, and never with a secret.
   */
  jwks: ColumnType<string | null, string | null | undefined, string | null>;
  jwks_uri: ColumnType<string | null, string | null | undefined, string | null>;
  /** 1 when its tokens are issued only with a DPoP proof (SPEC §4.14, `--require-dpop`). */
  require_dpop: ColumnType<number, number | undefined, number>;
  /** 1 when its authorization requests must be pushed (PAR, SPEC §4.14, `--require-par`). */
  require_par: ColumnType<number, number | undefined, number>;
  /** `fapi2`: held to the FAPI 2.0 Security Profile (SPEC §4.14, `--profile fapi2`); null otherwise. */
  profile: ColumnType<ClientProfile | null, ClientProfile | null | undefined, ClientProfile | null>;
  /** 1 when it may exchange a person's access token for a narrower one (SPEC §4.15, `--token-exchange`). */
  token_exchange: ColumnType<number, number | undefined, number>;
  /**
   * The authorization servers it may get ID-JAGs for (SPEC §4.15, `--id-jag-audience`): a JSON
   * array of `{"issuer", "client_id"}`, `client_id` its client ID there (null: the same as here).
   */
  id_jag_audiences: ColumnType<string, string | undefined, string>;
}

export type ClientProfile = 'fapi2';

export type ClientKind = 'registered' | 'metadata_document' | 'dynamic';

/**
 * A pushed authorization request (RFC 9126): by the SHA-256 of its `request_uri`, the
 * parameters as checked at push time (JSON), answered once (`consumed_at`).
 */
export interface PushedRequestsTable {
  hash: Immutable<string>;
  client_id: Immutable<string>;
  params: Immutable<string>;
  created_at: Immutable<number>;
  /** Sixty seconds after the push; once a browser brings it (`opened_at`), the time left to log in and answer. */
  expires_at: number;
  opened_at: number | null;
  consumed_at: number | null;
}

/** A URL prefix an administrator blocked: every metadata document under it is refused. */
export interface ClientBlocksTable {
  prefix: Immutable<string>;
  created_at: Immutable<number>;
}

export interface SessionsTable {
  /** SHA-256 of the session token; the token itself lives only in the user's cookie. */
  id_hash: Immutable<string>;
  user_id: Immutable<string>;
  /**
   * When the person logged in: every login starts a new session. A session that added the
   * person's first second factor is replaced by one from when that factor was proven
   * (store/sessions.ts upgradeSession).
   */
  created_at: Immutable<number>;
  expires_at: number;
  /** How they logged in: RFC 8176 `amr` values, space-separated (SPEC §4.12). */
  amr: Immutable<string>;
  /** The session's public identifier (the OIDC `sid`): 128 random bits, base64url, distinct from the cookie's secret. */
  sid: Immutable<string>;
  /** The upstream connection the person logged in through (SPEC §4.13); null for any other login. */
  connection_id: ColumnType<string | null, string | null | undefined, never>;
}

/**
 * The login a code or grant was approved in, carried unchanged from the session through the
 * code into the grant and every refresh of it: `auth_time` (epoch ms) and `amr` (as in
 * SessionsTable). NULL for codes and grants made before they were recorded, and for grants
 * without a person.
 */
interface LoginColumns {
  auth_time: Immutable<number | null>;
  amr: Immutable<string | null>;
  /** The `sid` of the session that approved (SPEC §4.10); null as above. */
  sid: ColumnType<string | null, string | null | undefined, never>;
}

/** What one authorization produced: a user (null for client_credentials), a client, scopes. */
export interface GrantsTable extends LoginColumns {
  id: Immutable<string>;
  client_id: Immutable<string>;
  user_id: Immutable<string | null>;
  /** The resource server the grant's tokens are for (their audience): a `resources.id`. */
  resource_id: Immutable<string>;
  scopes: Immutable<string>;
  created_at: Immutable<number>;
  last_used_at: number;
  revoked_at: number | null;
  /** When the last token of the grant expires: the grant is alive until then. Not indexed: a refresh moves it. */
  expires_at: number;
  /**
   * `expires_at` rounded up to the end of its day (`grantExpiry`), what the purge finds the grant
   * by: it moves only when the day does, so a refresh's update of the grant writes no index. An
   * older instance's insert leaves it 0 (the column's default for a rolling upgrade); ours name it.
   */
  purge_after: number;
}

export interface AuthCodesTable extends LoginColumns {
  hash: Immutable<string>;
  client_id: Immutable<string>;
  user_id: Immutable<string>;
  redirect_uri: Immutable<string>;
  resource_id: Immutable<string>;
  scopes: Immutable<string>;
  code_challenge: Immutable<string | null>;
  /** The authentication request's `nonce` (OIDC), copied into the ID token of the exchange. */
  nonce: ColumnType<string | null, string | null | undefined, never>;
  created_at: Immutable<number>;
  expires_at: Immutable<number>;
  consumed_at: number | null;
  /** The grant the exchange created, so that a replay can revoke it. */
  grant_id: string | null;
  /** The authorization request's `dpop_jkt` (RFC 9449 §10): the key the exchange must prove; null for none. */
  dpop_jkt: ColumnType<string | null, string | null | undefined, never>;
}

/**
 * A device authorization request (RFC 8628): the SHA-256 of its device code (the key) and
 * of its user code, what it asks for, the polling state and the person's answer.
 */
export interface DeviceCodesTable {
  hash: Immutable<string>;
  user_code_hash: Immutable<string>;
  client_id: Immutable<string>;
  scopes: Immutable<string>;
  resource_id: Immutable<string>;
  created_at: Immutable<number>;
  expires_at: Immutable<number>;
  /** Seconds the device must wait between polls; grows by 5 with each `slow_down`. */
  poll_interval: number;
  /** When the device last polled (at first, when the request was made: the interval applies before the first poll too). */
  last_polled_at: number;
  /** null while the person has not answered. */
  decision: 'approved' | 'denied' | null;
  /** Who answered. */
  user_id: string | null;
  /** The login they answered in, as in LoginColumns: set with the answer. */
  auth_time: number | null;
  amr: string | null;
  sid: ColumnType<string | null, string | null | undefined, string | null>;
  decided_at: number | null;
  consumed_at: number | null;
  /** The grant the exchange created, so that a replay can revoke it. */
  grant_id: string | null;
}

export interface AccessTokensTable {
  hash: Immutable<string>;
  grant_id: Immutable<string>;
  scopes: Immutable<string>;
  created_at: Immutable<number>;
  expires_at: Immutable<number>;
  /** The RFC 7638 thumbprint of the key every use must prove (DPoP, SPEC §4.14); null for a bearer token. */
  dpop_jkt: ColumnType<string | null, string | null | undefined, never>;
  /** Who acts for the person (RFC 8693 §4.1 `act`, JSON) in a token made by an exchange (SPEC §4.15); null otherwise. */
  act: ColumnType<string | null, string | null | undefined, never>;
}

export interface RefreshTokensTable {
  hash: Immutable<string>;
  grant_id: Immutable<string>;
  created_at: Immutable<number>;
  expires_at: Immutable<number>;
  rotated_at: number | null;
  successor_hash: string | null;
  /**
   * This token's own pair — it and the access token issued with it — sealed under a key derived
   * from the refresh token it replaced, so that the grace window can hand the pair out again to
   * that predecessor; written with the row, cleared by the purge once the window is over, null
   * for a first token. On the new row rather than the rotated one: an insert appends, where
   * growing an old row splits its page.
   */
  replay_box: ColumnType<string | null, string | null | undefined, null>;
  /** A public client's refresh token: the key a refresh must prove (RFC 9449 §5), kept by every successor; null otherwise. */
  dpop_jkt: ColumnType<string | null, string | null | undefined, never>;
}

/** The scopes a user approved for a client on one resource server. */
export interface ConsentsTable {
  user_id: Immutable<string>;
  client_id: Immutable<string>;
  resource_id: Immutable<string>;
  /** '' for an administrator's client (one consent for all its redirect URLs); else the origin approved (protocol/redirect-uri.ts `consentOrigin`). */
  redirect_origin: Immutable<string>;
  scopes: string;
  created_at: number;
  expires_at: number;
}

/**
 * A resource server (SPEC §3): an API that accepts Gatehouse's access tokens. The row
 * 'builtin' is the service's own API; its `uri` is NULL because it is always PUBLIC_URL.
 */
export interface ResourcesTable {
  id: Immutable<string>;
  /** The normalized RFC 8707 resource indicator; NULL for builtin. */
  uri: string | null;
  name: string;
  /** The resource server's own confidential client, for introspection; NULL for builtin. */
  client_id: string | null;
  created_at: Immutable<number>;
  /** How its access tokens are made (SPEC §4.9); the built-in resource's stays 'opaque'. */
  token_format: ColumnType<TokenFormat, TokenFormat | undefined, TokenFormat>;
  /** The algorithm of its JWT access tokens. */
  signing_alg: ColumnType<SigningAlg, SigningAlg | undefined, SigningAlg>;
  /** Its access tokens' lifetime in seconds; NULL: its format's default (oauth/resources.ts `accessTokenTtl`). */
  access_token_ttl: ColumnType<number | null, number | null | undefined, number | null>;
  /** 1 when its tokens need a login with a second factor (SPEC §4.12). */
  require_second_factor: ColumnType<number, number | undefined, number>;
  /** 1 when its tokens are issued only with a DPoP proof (SPEC §4.14, `--require-dpop`). */
  require_dpop: ColumnType<number, number | undefined, number>;
}

export type TokenFormat = 'opaque' | 'jwt';
export type SigningAlg = 'ES256' | 'RS256';

/** A scope: its name is unique across resource servers. */
export interface ScopesTable {
  name: Immutable<string>;
  resource_id: Immutable<string>;
  description: string;
  created_at: Immutable<number>;
}

/** A first-run setup link (SPEC §1): the SHA-256 of its token, deleted when used. */
export interface SetupTokensTable {
  hash: Immutable<string>;
  created_at: Immutable<number>;
  expires_at: Immutable<number>;
}

/**
 * One security event (SPEC §4.6). `actor_id` is the administrator who made a change;
 * `user_id` and `client_id` are who the event is about. `detail` is JSON of plain facts
 * (scopes, reasons, grant ids): never a token, code, secret or password.
 */
export interface AuditEventsTable {
  id: ColumnType<number, never, never>;
  at: Immutable<number>;
  type: Immutable<string>;
  actor_id: Immutable<string | null>;
  user_id: Immutable<string | null>;
  client_id: Immutable<string | null>;
  address: Immutable<string | null>;
  detail: Immutable<string | null>;
  expires_at: Immutable<number>;
}

/** A group of users, released as the `groups` claim (SPEC §4.10); its name is a scope token. */
export interface GroupsTable {
  name: Immutable<string>;
  created_at: Immutable<number>;
}

export interface GroupMembersTable {
  group_name: Immutable<string>;
  user_id: Immutable<string>;
}

/**
 * A back-channel logout to deliver (SPEC §4.10): the session `sid` that ended, a client that
 * got an ID token in it, and the delivery's progress; times in epoch milliseconds.
 */
export interface BackchannelLogoutsTable {
  sid: Immutable<string>;
  client_id: Immutable<string>;
  /** The person whose session ended; no longer a reference (a deleted person's logouts are still delivered, SPEC §4.16). */
  user_id: Immutable<string>;
  /** Their username, for the logout token's `sub`; null in rows queued before it was kept (migration 20261128_002). */
  username: ColumnType<string | null, string | null | undefined, never>;
  state: 'pending' | 'delivered' | 'failed';
  attempts: number;
  /** When the next attempt is due (while pending). */
  next_attempt_at: number;
  /** Until when an instance holds the row for an attempt under way; null when none does. */
  claimed_until: number | null;
  created_at: Immutable<number>;
  expires_at: Immutable<number>;
  /** The address of the request that ended the session, for the delivery's audit event; null: the command line (or a row queued before it was kept). */
  address: Immutable<string | null>;
}

export type SigningKeyState = 'next' | 'active' | 'retiring';

/** A signing key pair (src/identity/keys.ts); times in epoch milliseconds. */
export interface SigningKeysTable {
  /** The RFC 7638 thumbprint of the public JWK. */
  kid: Immutable<string>;
  alg: Immutable<'ES256' | 'RS256'>;
  state: SigningKeyState;
  /** The public JWK, as JSON. */
  public_jwk: Immutable<string>;
  /** The private JWK: JSON, or (encrypted = 1) a compact JWE of that JSON under the key derived from KEYS_SECRET. */
  private_jwk: string;
  encrypted: number;
  created_at: Immutable<number>;
  /** When it signs (or began to): for a `next` key, the end of its publication lead. */
  activates_at: number;
  /** For a `retiring` key: when everything it signed has expired and it is removed. */
  retires_at: number | null;
}

/** An assertion accepted once (SPEC §4.11): SHA-256 of its issuer, NUL and id, kept until its `exp`. */
export interface ConsumedAssertionsTable {
  key: Immutable<string>;
  expires_at: number;
}

/** A person's authenticator app (SPEC §4.12): at most one; see migration 20261126_011. */
export interface AuthenticatorAppsTable {
  user_id: Immutable<string>;
  /** The TOTP secret in base32: as is, or (encrypted = 1) a compact JWE of it under the key derived from KEYS_SECRET. */
  secret: string;
  encrypted: number;
  created_at: number;
  /** NULL while the set-up waits for its first code. */
  confirmed_at: number | null;
  /** The last accepted 30-second time step: a code of that step or an earlier one is refused. */
  last_step: number | null;
  /** For a set-up not yet confirmed; NULL once confirmed. */
  expires_at: number | null;
}

/** A recovery code, by its SHA-256; used by deleting its row. */
export interface RecoveryCodesTable {
  user_id: Immutable<string>;
  code_hash: Immutable<string>;
  created_at: Immutable<number>;
}

/** A login whose password was right and whose second step is to come (SPEC §4.12), held by a cookie's token. */
export interface PendingLoginsTable {
  id_hash: Immutable<string>;
  user_id: Immutable<string>;
  /** What the person has proven so far (RFC 8176, space-separated): 'pwd', or 'fed' (and more) through a connection. */
  amr: Immutable<string>;
  created_at: Immutable<number>;
  expires_at: Immutable<number>;
  /** The upstream connection the first step came through (SPEC §4.13); null for a password. */
  connection_id: ColumnType<string | null, string | null | undefined, never>;
}

/** An upstream identity provider (SPEC §4.13); see migration 20261128_001. */
export interface ConnectionsTable {
  id: Immutable<string>;
  name: string;
  kind: 'oidc' | 'oauth2';
  preset: ConnectionPreset | null;
  /** `oidc`: the issuer whose discovery document names the endpoints. */
  issuer: string | null;
  /** `oauth2`: the provider's endpoints (a preset fills them in). */
  authorization_url: string | null;
  token_url: string | null;
  userinfo_url: string | null;
  /** GitHub Enterprise Server's or a self-hosted GitLab's URL; null for the public service. */
  base_url: string | null;
  /** Microsoft: the Entra ID tenant. */
  tenant: string | null;
  client_id: string;
  /** The client secret Gatehouse got from the provider: as is, or (encrypted = 1) a compact JWE under KEYS_SECRET. */
  client_secret: string;
  encrypted: number;
  /** Space-separated scopes asked of the provider. */
  scope: string;
  /** JSON array of lower-case email domains whose people this connection serves. */
  domains: string;
  required: number;
  create_accounts: number;
  link_verified_email: number;
  groups_claim: string | null;
  trust_mfa: number;
  allow_private_address: number;
  enabled: number;
  created_at: Immutable<number>;
  updated_at: number;
  /** 1 when the provider's tokens are kept at each login, sealed (SPEC §4.15, `--keep-tokens`). */
  keep_tokens: ColumnType<number, number | undefined, number>;
  /**
   * JSON array of the resource servers that may exchange a person's token for them (`--token-resource`):
   * `{"id", "uri"}` each (store/connections.ts `TokenResource`).
   */
  token_resources: ColumnType<string, string | undefined, string>;
}

export type ConnectionPreset = 'github' | 'google' | 'microsoft' | 'gitlab' | 'orcid';

/** A person's identity at a connection (SPEC §4.13). */
export interface UserIdentitiesTable {
  connection_id: Immutable<string>;
  /** The provider's `sub` (GitHub: its numeric id, as text). */
  subject: Immutable<string>;
  user_id: Immutable<string>;
  /** The email the provider gave at the last login, shown on the account pages. */
  email: string | null;
  /** JSON array: the group memberships this connection granted at the last login. */
  groups: string;
  created_at: Immutable<number>;
  last_login_at: number | null;
  /** The provider's tokens of the last login, JSON sealed under KEYS_SECRET, when its connection keeps them (SPEC §4.15); null otherwise. */
  provider_tokens: ColumnType<string | null, string | null | undefined, string | null>;
  /** While an instance refreshes them at the provider: until when the others wait for its result (epoch ms); null otherwise. */
  provider_tokens_refreshing_until: ColumnType<number | null, number | null | undefined, number | null>;
}

/** A login under way at a provider (SPEC §4.13), by the SHA-256 of its `state`; single use, ten minutes. */
export interface UpstreamLoginsTable {
  state_hash: Immutable<string>;
  connection_id: Immutable<string>;
  /** SHA-256 of the value of the browser's cookie that started it. */
  binding_hash: Immutable<string>;
  code_verifier: Immutable<string>;
  nonce: Immutable<string>;
  /** Where the person goes after logging in (a same-site path). */
  next: Immutable<string>;
  /** **Connect**: the logged-in person the identity is to be linked to. */
  link_user_id: Immutable<string | null>;
  /** Seconds: the provider was asked (OIDC `max_age`) to authenticate the person within them; null when not. */
  max_age: Immutable<number | null>;
  created_at: Immutable<number>;
  expires_at: Immutable<number>;
}

/** An identity waiting for its person to log in to the account that has its email, and confirm the link (SPEC §4.13). */
export interface PendingIdentitiesTable {
  id_hash: Immutable<string>;
  connection_id: Immutable<string>;
  subject: Immutable<string>;
  email: Immutable<string | null>;
  created_at: Immutable<number>;
  expires_at: Immutable<number>;
}

/** A passkey (SPEC §4.12): a WebAuthn credential of a user, by its credential ID (base64url). */
export interface PasskeysTable {
  id: Immutable<string>;
  user_id: Immutable<string>;
  /** The credential's COSE public key, base64url. */
  public_key: Immutable<string>;
  /** The authenticator's signature counter at the last accepted use (0: it keeps none). */
  sign_count: number;
  /** What the browser said the authenticator can be reached by: a JSON array of strings. */
  transports: Immutable<string>;
  /** The person's own name for it. */
  name: string;
  created_at: Immutable<number>;
  last_used_at: number | null;
}

/** What a WebAuthn challenge is for: adding a passkey, a passkey login, or a passkey as the second step after a password (or step-up). */
export type ChallengePurpose = 'register' | 'login' | 'second_step';

/**
 * A WebAuthn challenge handed to a browser: by the SHA-256 of the challenge, bound to that
 * browser (SHA-256 of its binding cookie), for one purpose, single use, five minutes.
 */
export interface WebauthnChallengesTable {
  challenge_hash: Immutable<string>;
  binding_hash: Immutable<string>;
  purpose: Immutable<ChallengePurpose>;
  /** Whose passkey a 'register' challenge adds, or whose a 'second_step' one must be; null for 'login'. */
  user_id: Immutable<string | null>;
  created_at: Immutable<number>;
  expires_at: Immutable<number>;
}

/** The secret of a jwt-bearer (publisher) client, kept so it can verify the grant tokens it signs (SPEC §4.11). */
export interface ClientGrantSecretsTable {
  client_id: Immutable<string>;
  /** The secret: a compact JWE under the key derived from KEYS_SECRET (encrypted = 1), or the secret itself. */
  secret: string;
  encrypted: number;
}

export type TrustedIssuerProfile = 'id-jag' | 'workload';

/** An external issuer whose signed assertions the jwt-bearer grant accepts (SPEC §3, §4.11). */
export interface TrustedIssuersTable {
  /** Its `iss`, exactly as its assertions carry it. */
  issuer: Immutable<string>;
  profile: TrustedIssuerProfile;
  /** Where its keys are; null: discovered from its metadata. */
  jwks_uri: string | null;
  /** 1: its keys may be fetched from loopback and private addresses. */
  allow_private_address: number;
  /** Which claim names the user (id-jag): `sub` or `email` (verified e-mail only). */
  subject_claim: 'sub' | 'email';
  /** The exact `sub` a workload's token must carry; null: any. */
  subject: string | null;
  /** JSON array of client IDs: those that may present its ID-JAGs (empty: any confidential client), or the one its workloads act as. */
  clients: string;
  /** Space-separated scopes it may obtain at most; null: no restriction of its own. */
  scopes: string | null;
  /** The resource a workload's token is for when the request names none. */
  resource: string | null;
  created_at: Immutable<number>;
}

export type TrustedIssuer = Selectable<TrustedIssuersTable>;

/** A fan-out message between processes sharing one SQLite file (events/fan-out.ts); empty on PostgreSQL. */
export interface FanOutMessagesTable {
  id: ColumnType<number, never, never>;
  /** The sending process: random per process, so that it skips its own messages. */
  origin: Immutable<string>;
  /** The message, as Redis or PostgreSQL NOTIFY would carry it. */
  payload: Immutable<string>;
  /** Epoch milliseconds; rows older than a minute are deleted by the next sender. */
  sent_at: Immutable<number>;
}

/**
 * A shard of the grants and its counter of changes the bearer check reads (revocations, a person
 * disabled or renamed), kept by PostgreSQL's triggers (migration 20261204_001_token_epochs);
 * at zero on SQLite. Read by the bearer-token cache (bearer-token-cache.ts).
 */
export interface TokenEpochsTable {
  /** The last two hex digits of a grant's id (`gatehouse_token_shard`). */
  shard: Immutable<string>;
  epoch: ColumnType<number, never, never>;
}

/** What a queued message is (SPEC §4.16): each kind has its composer (accounts/account-mail.ts). */
export type MailKind = 'password_reset' | 'verify_email' | 'email_change_notice' | 'password_changed';

/** A message to send (mail.ts): what to send, not the message itself (migration 20261130_001). */
export interface MailOutboxTable {
  id: Immutable<string>;
  kind: Immutable<MailKind>;
  /** The person it is about; null for a reset asked for an address no account has (composed to nothing). */
  user_id: Immutable<string | null>;
  to_address: Immutable<string>;
  /** Plain facts its composer needs, as JSON (never a token or a password). */
  detail: Immutable<string>;
  /** The address of the request that asked for it, for its audit events; null: the command line. */
  address: Immutable<string | null>;
  state: 'pending' | 'sent' | 'failed' | 'skipped';
  attempts: number;
  next_attempt_at: number;
  claimed_until: number | null;
  created_at: Immutable<number>;
  expires_at: Immutable<number>;
}

export type AccountLinkPurpose = 'password_reset' | 'verify_email';

/** A single-use link a message carries (accounts/account-links.ts), by its token's hash; at most one per person and purpose. */
export interface AccountLinksTable {
  /** Replaced, with the rest but the person and purpose, when a newer link replaces this one. */
  id_hash: string;
  purpose: Immutable<AccountLinkPurpose>;
  user_id: Immutable<string>;
  /** verify_email: the address it verifies (the person's, or the one they are changing to). */
  email: string | null;
  /** password_reset: the fingerprint of the password hash it replaces (accounts/passwords.ts). */
  password_fingerprint: string | null;
  created_at: number;
  expires_at: number;
}

export interface Database {
  users: UsersTable;
  clients: ClientsTable;
  client_blocks: ClientBlocksTable;
  sessions: SessionsTable;
  grants: GrantsTable;
  auth_codes: AuthCodesTable;
  device_codes: DeviceCodesTable;
  access_tokens: AccessTokensTable;
  pushed_requests: PushedRequestsTable;
  refresh_tokens: RefreshTokensTable;
  consents: ConsentsTable;
  resources: ResourcesTable;
  scopes: ScopesTable;
  setup_tokens: SetupTokensTable;
  audit_events: AuditEventsTable;
  signing_keys: SigningKeysTable;
  groups: GroupsTable;
  group_members: GroupMembersTable;
  backchannel_logouts: BackchannelLogoutsTable;
  consumed_assertions: ConsumedAssertionsTable;
  authenticator_apps: AuthenticatorAppsTable;
  recovery_codes: RecoveryCodesTable;
  pending_logins: PendingLoginsTable;
  passkeys: PasskeysTable;
  webauthn_challenges: WebauthnChallengesTable;
  client_grant_secrets: ClientGrantSecretsTable;
  trusted_issuers: TrustedIssuersTable;
  fan_out_messages: FanOutMessagesTable;
  token_epochs: TokenEpochsTable;
  connections: ConnectionsTable;
  user_identities: UserIdentitiesTable;
  upstream_logins: UpstreamLoginsTable;
  pending_identities: PendingIdentitiesTable;
  mail_outbox: MailOutboxTable;
  account_links: AccountLinksTable;
}

export type User = Selectable<UsersTable>;
export type Connection = Selectable<ConnectionsTable>;
export type UserIdentity = Selectable<UserIdentitiesTable>;
export type NewUser = Insertable<UsersTable>;
export type Client = Selectable<ClientsTable>;
export type NewClient = Insertable<ClientsTable>;
export type AuthCode = Selectable<AuthCodesTable>;
export type DeviceCode = Selectable<DeviceCodesTable>;
export type Resource = Selectable<ResourcesTable>;
export type ScopeRow = Selectable<ScopesTable>;
export type SigningKeyRow = Selectable<SigningKeysTable>;
export type PasskeyRow = Selectable<PasskeysTable>;

/**
 * A table's every column, by name; the compiler checks the list against the table's
 * interface, so a column added there and not here does not compile.
 */
function everyColumn<T>() {
  return <const C extends readonly (keyof T & string)[]>(
    columns: C & ([Exclude<keyof T, C[number]>] extends [never] ? unknown : { missing: Exclude<keyof T, C[number]> }),
  ): C => columns;
}

/** The tables the token paths read whole, by prepared query (store/prepared.ts). */
const COLUMNS = {
  users: everyColumn<UsersTable>()([
    'id',
    'username',
    'username_key',
    'email',
    'email_key',
    'display_name',
    'email_verified',
    'password_hash',
    'is_admin',
    'disabled',
    'created_at',
  ]),
  clients: everyColumn<ClientsTable>()([
    'id',
    'name',
    'grant_type',
    'kind',
    'blocked',
    'disabled',
    'redirect_uris',
    'secret_hash',
    'trusted',
    'require_pkce',
    'scopes',
    'created_at',
    'post_logout_redirect_uris',
    'backchannel_logout_uri',
    'id_token_alg',
    'jwks',
    'jwks_uri',
    'require_dpop',
    'require_par',
    'profile',
    'token_exchange',
    'id_jag_audiences',
  ]),
  auth_codes: everyColumn<AuthCodesTable>()([
    'hash',
    'client_id',
    'user_id',
    'redirect_uri',
    'resource_id',
    'scopes',
    'code_challenge',
    'nonce',
    'created_at',
    'expires_at',
    'consumed_at',
    'grant_id',
    'dpop_jkt',
    'auth_time',
    'amr',
    'sid',
  ]),
  device_codes: everyColumn<DeviceCodesTable>()([
    'hash',
    'user_code_hash',
    'client_id',
    'scopes',
    'resource_id',
    'created_at',
    'expires_at',
    'poll_interval',
    'last_polled_at',
    'decision',
    'user_id',
    'auth_time',
    'amr',
    'sid',
    'decided_at',
    'consumed_at',
    'grant_id',
  ]),
  resources: everyColumn<ResourcesTable>()([
    'id',
    'uri',
    'name',
    'client_id',
    'created_at',
    'token_format',
    'signing_alg',
    'access_token_ttl',
    'require_second_factor',
    'require_dpop',
  ]),
  scopes: everyColumn<ScopesTable>()(['name', 'resource_id', 'description', 'created_at']),
};

/**
 * Every column of `table`, each named (`clients.id`, …): what a prepared query selects
 * instead of `*`. A prepared query that names its columns runs as a named statement on
 * PostgreSQL, parsed and planned once per connection; one that selects `*` cannot (prepared.ts)
 * and is parsed and planned on every run — on the authorization request and the code exchange,
 * a third of the database's CPU (docs/performance.md, "Named statements").
 */
export function allColumnsOf<T extends keyof typeof COLUMNS>(table: T): ReadonlyArray<`${T}.${(typeof COLUMNS)[T][number]}`> {
  return COLUMNS[table].map((column) => `${table}.${column}`) as ReadonlyArray<`${T}.${(typeof COLUMNS)[T][number]}`>;
}
