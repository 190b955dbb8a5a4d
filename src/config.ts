/**
 * Settings, read from the environment once and validated. This module is the only reader
 * of `process.env`; everything else receives a typed, frozen `Config`.
 *
 * An invalid value stops start-up with one line naming the setting (SPEC §1).
 */
import { availableParallelism } from 'node:os';
import { isIP } from 'node:net';

/**
 * The built-in resource's scopes (its rows are seeded by a migration): what an administrator's
 * client created without a scope list may have, and what the service's own API checks.
 */
export const SCOPES = ['annotation:read', 'annotation:write'] as const;
export type Scope = (typeof SCOPES)[number];

export type DatabaseLocation =
  /**
   * `groupCommit`: writes that arrive together share one transaction (store/group-commit.ts);
   * false (SQLITE_GROUP_COMMIT=false) gives each its own, for measuring what batching buys.
   */
  | { kind: 'sqlite'; path: string; groupCommit: boolean } // ':memory:' for throw-away runs
  | { kind: 'postgres'; url: string };

export interface Config {
  readonly port: number;
  readonly host: string;
  /** How many processes `gatehouse serve` answers from, all on one port (1: the serving process itself). */
  readonly workers: number;
  /** The issuer and the base of every absolute URL we hand out; no trailing slash. */
  readonly publicUrl: string;
  readonly database: DatabaseLocation;
  readonly redisUrl: string | null;
  /**
   * Which proxies may tell us the client's address (X-Forwarded-For): false (none), a hop
   * count, or a list of proxy addresses / CIDR ranges. Throttling and the audit trail key on
   * the client address, so behind a load balancer this must name it; trusting everyone
   * would let any client pick its own address.
   */
  readonly trustProxy: false | number | string[];
  /** Lifetimes, in seconds. */
  readonly accessTokenTtl: number;
  /** Of JWT access tokens, unless their resource server sets its own (oauth/resources.ts `accessTokenTtl`). */
  readonly jwtAccessTokenTtl: number;
  readonly refreshTokenTtl: number;
  readonly authCodeTtl: number;
  /** How long a device authorization request (its device code and user code) lives (RFC 8628 `expires_in`). */
  readonly deviceCodeTtl: number;
  readonly refreshGraceSeconds: number;
  readonly sessionTtl: number;
  readonly consentTtl: number;
  /** When true every client must use PKCE; otherwise each client's own flag decides. */
  readonly requirePkce: boolean;
  /** When true every client must push its authorization requests (PAR, SPEC §4.14). */
  readonly requirePar: boolean;
  /** When true, DPoP proofs must carry a nonce the server issued (SPEC §4.14); needs KEYS_SECRET. */
  readonly dpopNonces: boolean;
  readonly logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
  /** Seconds between background purges of expired rows; 0 disables the schedule. */
  readonly purgeIntervalSeconds: number;
  /** Days an audit event is kept before purge removes it. */
  readonly auditRetentionDays: number;
  /** When set, `/metrics` answers only requests carrying it as a Bearer token; null: open. */
  readonly metricsToken: string | null;
  /** Throttling; a limit of 0 turns that counter off. */
  readonly throttle: {
    /** Failed logins allowed per account, and per client address, within `loginWindowSeconds`. */
    readonly loginFailuresPerAccount: number;
    readonly loginFailuresPerAddress: number;
    readonly loginWindowSeconds: number;
    /** Token endpoint requests allowed per client, and per client address, per minute. */
    readonly tokenRequestsPerClient: number;
    readonly tokenRequestsPerAddress: number;
  };
  /** Client ID metadata documents (SPEC §4.8). */
  readonly clientMetadata: {
    /** Whether a client may identify itself by the https URL of its metadata document. */
    readonly enabled: boolean;
    /** Host names documents may come from (`*.example.com`: its subdomains); empty: any public host. */
    readonly allowedHosts: readonly string[];
    /** Development and tests only: let documents come from loopback and private addresses. */
    readonly allowPrivateAddresses: boolean;
  };
  /** Whether `POST /oauth/register` (RFC 7591 dynamic client registration) is open. */
  readonly dynamicClientRegistration: boolean;
  /** Signing keys and what they sign (SPEC §4.9; src/identity/keys.ts). */
  readonly keys: {
    /** When set, private signing keys are stored encrypted under a key derived from it; null: stored unencrypted. */
    readonly secret: string | null;
    /** Days an active key signs before a successor is published; 0: only `gatehouse keys rotate` rotates. */
    readonly rotationDays: number;
  };
  /** Lifetime of OpenID Connect ID tokens, in seconds. */
  readonly idTokenTtl: number;
  /** Who must have a second factor before a password login completes (SPEC §4.12). */
  readonly requireSecondFactor: 'none' | 'admins' | 'all';
  /** Who may log in with a password (SPEC §4.13): everyone, administrators only, or nobody (connections and passkeys only). */
  readonly passwordLogin: 'all' | 'admins' | 'none';
  /**
   * Passkeys (SPEC §4.12): the WebAuthn RP ID and the origin responses must come from (the
   * origin of PUBLIC_URL); null when passkeys are off (PUBLIC_URL on an IP address and no
   * WEBAUTHN_RP_ID: browsers refuse an IP address as an RP ID).
   */
  readonly webauthn: { readonly rpId: string; readonly origin: string } | null;
  /**
   * Mail (SPEC §4.16): the SMTP server's URL (`smtp://` or `smtps://`, user and password in
   * it: never logged) and the From address; null when SMTP_URL is unset, and no mail is sent.
   */
  readonly mail: { readonly smtpUrl: string; readonly from: string } | null;
}

/**
 * The lifetimes, in seconds, an access token may be given (a resource server's own, or
 * JWT_ACCESS_TOKEN_TTL for JWTs): JWTs stay short, since an offline verifier cannot learn of
 * a revocation before they expire (SPEC §4.9).
 */
export const ACCESS_TOKEN_TTL_RANGE = { jwt: [60, 3600], opaque: [60, 86_400] } as const satisfies Record<'jwt' | 'opaque', readonly [number, number]>;

export class ConfigError extends Error {
  override name = 'ConfigError';
}

/** A setting as `gatehouse --help` lists it: its name, what it is, and its default when unset (a value that means the same when given). */
export interface Setting {
  readonly name: string;
  readonly help: string;
  /** Setting it to this changes nothing (test/unit/config.test.ts checks); absent: unset means something no value says. */
  readonly default?: string;
}

/**
 * Every setting `loadConfig` reads, in the order the README's table has them: `gatehouse
 * --help` lists them from here, and `loadConfig` refuses to read a name that is not here, so
 * a new setting cannot be left out of the help.
 */
export const SETTINGS: readonly Setting[] = [
  { name: 'DATABASE_URL', help: 'sqlite:<path>, sqlite::memory:, or postgres://…', default: 'sqlite:./data/gatehouse.db' },
  { name: 'REDIS_URL', help: 'redis://…: throttling counters and revocation fan-out shared by several instances' },
  { name: 'PORT', help: 'the port to listen on', default: '5000' },
  { name: 'HOST', help: 'the address to listen on', default: '127.0.0.1' },
  { name: 'WORKERS', help: 'processes serve answers from, on one port: 1 to 64, or auto (one per core)', default: '1' },
  { name: 'TRUST_PROXY', help: "the load balancer's addresses or CIDR ranges, comma-separated, or a hop count" },
  { name: 'PUBLIC_URL', help: "the issuer (default http://localhost:PORT); its host name is in every person's id" },
  { name: 'ACCESS_TOKEN_TTL', help: 'opaque access token lifetime, seconds', default: '3600' },
  { name: 'JWT_ACCESS_TOKEN_TTL', help: 'JWT access token lifetime, seconds (60–3600)', default: '300' },
  { name: 'REFRESH_TOKEN_TTL', help: 'refresh token lifetime, seconds', default: '2592000' },
  { name: 'AUTH_CODE_TTL', help: 'authorization code lifetime, seconds (at most 3600)', default: '600' },
  { name: 'DEVICE_CODE_TTL', help: 'device code lifetime, seconds (10–86400)', default: '600' },
  { name: 'REFRESH_GRACE_SECONDS', help: 'how long a rotated refresh token still gets the same answer (0–3600)', default: '60' },
  { name: 'REQUIRE_PKCE', help: "true: every client must use PKCE; false: each client's own flag decides", default: 'false' },
  { name: 'REQUIRE_PAR', help: 'true: every authorization request must be pushed first (POST /oauth/par)', default: 'false' },
  { name: 'DPOP_NONCES', help: 'true: DPoP proofs must carry a nonce the server gave (needs KEYS_SECRET)', default: 'false' },
  { name: 'SESSION_TTL', help: 'login session lifetime, seconds', default: '1209600' },
  { name: 'CONSENT_TTL', help: 'how long an approval is remembered, seconds', default: '31536000' },
  { name: 'PURGE_INTERVAL_SECONDS', help: 'seconds between purges of expired rows (0: never)', default: '600' },
  { name: 'AUDIT_RETENTION_DAYS', help: 'days an audit event is kept (1–36500)', default: '365' },
  { name: 'METRICS_TOKEN', help: 'when set, /metrics requires it as a Bearer token (16+ visible characters)' },
  { name: 'LOGIN_FAILURES_PER_ACCOUNT', help: 'failed logins per account within the window (0: no limit)', default: '10' },
  { name: 'LOGIN_FAILURES_PER_ADDRESS', help: 'failed logins per client address within the window (0: no limit)', default: '100' },
  { name: 'LOGIN_THROTTLE_WINDOW', help: 'the login throttling window, seconds', default: '900' },
  { name: 'TOKEN_REQUESTS_PER_CLIENT', help: 'token requests per client a minute (0: no limit)', default: '1200' },
  { name: 'TOKEN_REQUESTS_PER_ADDRESS', help: 'token requests per client address a minute (0: no limit)', default: '600' },
  { name: 'CLIENT_METADATA_DOCUMENTS', help: 'accept clients named by the https URL of a metadata document', default: 'true' },
  { name: 'CLIENT_METADATA_ALLOWED_HOSTS', help: 'comma-separated hosts metadata documents may come from (*.example.com); unset: any' },
  { name: 'CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES', help: 'true: metadata documents from loopback and private addresses (tests only)', default: 'false' },
  { name: 'DYNAMIC_CLIENT_REGISTRATION', help: 'true: open POST /oauth/register (RFC 7591)', default: 'false' },
  { name: 'KEYS_SECRET', help: '32+ characters: stored private keys and secrets are encrypted under it' },
  { name: 'SIGNING_KEY_ROTATION_DAYS', help: 'days a signing key signs before a successor (0: only gatehouse keys rotate)', default: '90' },
  { name: 'ID_TOKEN_TTL', help: 'ID token lifetime, seconds (60–86400)', default: '3600' },
  { name: 'REQUIRE_SECOND_FACTOR', help: 'who must have a second factor: none, admins or all', default: 'none' },
  { name: 'PASSWORD_LOGIN', help: 'who may log in with a password: all, admins or none', default: 'all' },
  { name: 'SMTP_URL', help: 'smtp:// or smtps:// (user and password in the URL): mail for forgotten passwords and verification' },
  { name: 'MAIL_FROM', help: 'the From of that mail: an address, or Name <address> (default: gatehouse@ the host of PUBLIC_URL)' },
  { name: 'WEBAUTHN_RP_ID', help: "passkeys' RP ID: PUBLIC_URL's host name (default) or a parent domain; none on an IP" },
  { name: 'SQLITE_GROUP_COMMIT', help: 'false: every SQLite write in a transaction of its own', default: 'true' },
  { name: 'LOG_LEVEL', help: 'fatal, error, warn, info, debug, trace or silent', default: 'info' },
];

type Env = Readonly<Record<string, string | undefined>>;

const SETTING_NAMES = new Set(SETTINGS.map((setting) => setting.name));

/** The environment as `loadConfig` may read it: only the names SETTINGS declares (a programming error otherwise). */
export function declaredOnly(env: Env): Env {
  return new Proxy(env, {
    get(target, name) {
      if (typeof name === 'string' && !SETTING_NAMES.has(name)) throw new Error(`config.ts reads ${name}, which SETTINGS does not declare (nor --help list)`);
      return Reflect.get(target, name);
    },
  });
}

function integer(env: Env, name: string, fallback: number, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d+$/.test(raw)) throw new ConfigError(`${name} must be a whole number, got "${raw}"`);
  const value = Number(raw);
  if (value < min || value > max) throw new ConfigError(`${name} must be between ${min} and ${max}, got ${value}`);
  return value;
}

/** The most worker processes WORKERS may ask for: beyond this, more processes only add contention. */
export const MAX_WORKERS = 64;

/** WORKERS: a whole number from 1 to MAX_WORKERS, or `auto` for one per available core (at most MAX_WORKERS). */
function workers(env: Env): number {
  if (env.WORKERS === 'auto') return Math.min(availableParallelism(), MAX_WORKERS);
  if (env.WORKERS !== undefined && env.WORKERS !== '' && !/^\d+$/.test(env.WORKERS))
    throw new ConfigError(`WORKERS must be a whole number from 1 to ${MAX_WORKERS}, or auto, got "${env.WORKERS}"`);
  return integer(env, 'WORKERS', 1, 1, MAX_WORKERS);
}

function withGroupCommit(location: DatabaseLocation, groupCommit: boolean): DatabaseLocation {
  return location.kind === 'sqlite' ? { ...location, groupCommit } : location;
}

function boolean(env: Env, name: string, fallback: boolean): boolean {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (/^(1|true|yes|on)$/i.test(raw)) return true;
  if (/^(0|false|no|off)$/i.test(raw)) return false;
  throw new ConfigError(`${name} must be true or false, got "${raw}"`);
}

function oneOf<T extends string>(env: Env, name: string, allowed: readonly T[], fallback: T): T {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!(allowed as readonly string[]).includes(raw)) {
    throw new ConfigError(`${name} must be one of ${allowed.join(', ')}, got "${raw}"`);
  }
  return raw as T;
}

export function parseDatabaseUrl(raw: string): DatabaseLocation {
  if (raw.startsWith('sqlite:')) {
    const path = raw.slice('sqlite:'.length);
    if (path === '') throw new ConfigError('DATABASE_URL "sqlite:" needs a path, e.g. sqlite:./data/gatehouse.db');
    return { kind: 'sqlite', path, groupCommit: true };
  }
  if (/^postgres(ql)?:\/\//.test(raw)) {
    try {
      new URL(raw);
    } catch {
      throw new ConfigError('DATABASE_URL is not a valid postgres:// URL');
    }
    return { kind: 'postgres', url: raw };
  }
  throw new ConfigError('DATABASE_URL must start with sqlite: or postgres:// (or postgresql://)');
}

function publicUrl(env: Env, port: number): string {
  const raw = env.PUBLIC_URL || `http://localhost:${port}`;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError(`PUBLIC_URL must be an absolute URL, got "${raw}"`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new ConfigError('PUBLIC_URL must be http or https');
  if (url.search || url.hash) throw new ConfigError('PUBLIC_URL must not have a query or fragment');
  return url.href.replace(/\/+$/, '');
}

/**
 * WEBAUTHN_RP_ID: a host name that is PUBLIC_URL's own or a parent domain of it (WebAuthn L2
 * §5.1.4: a browser refuses any other); default the host name of PUBLIC_URL, unless that is
 * an IP address — then passkeys are off. `localhost` covers every port of localhost.
 */
function webauthn(env: Env, publicUrl: string): Config['webauthn'] {
  const url = new URL(publicUrl);
  const host = url.hostname.toLowerCase();
  const raw = (env.WEBAUTHN_RP_ID ?? '').trim().toLowerCase();
  if (raw === '') return isIP(host.replace(/^\[|\]$/g, '')) === 0 ? Object.freeze({ rpId: host, origin: url.origin }) : null;
  if (isIP(raw.replace(/^\[|\]$/g, '')) !== 0 || !/^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$/.test(raw)) {
    throw new ConfigError(`WEBAUTHN_RP_ID must be a host name (browsers refuse IP addresses), got "${raw}"`);
  }
  if (host !== raw && !host.endsWith(`.${raw}`))
    throw new ConfigError(`WEBAUTHN_RP_ID must be the host name of PUBLIC_URL or a parent domain of it, got "${raw}"`);
  return Object.freeze({ rpId: raw, origin: url.origin });
}

function redisUrl(env: Env): string | null {
  const raw = env.REDIS_URL;
  if (raw === undefined || raw === '') return null;
  if (!/^rediss?:\/\//.test(raw)) throw new ConfigError('REDIS_URL must start with redis:// or rediss://');
  return raw;
}

function trustProxy(env: Env): false | number | string[] {
  const raw = env.TRUST_PROXY;
  if (raw === undefined || raw === '' || /^(0|false|no|off)$/i.test(raw)) return false;
  if (/^\d+$/.test(raw)) return Number(raw);
  const entries = raw.split(',').map((entry) => entry.trim());
  if (entries.some((entry) => !/^[0-9a-fA-F:.]+(\/\d{1,3})?$/.test(entry))) {
    throw new ConfigError(`TRUST_PROXY must be a hop count or a comma-separated list of proxy addresses or CIDR ranges, got "${raw}"`);
  }
  return entries;
}

/** Long enough not to be guessed, and sendable as a Bearer token (visible ASCII, no spaces). */
function metricsToken(env: Env): string | null {
  const raw = env.METRICS_TOKEN;
  if (raw === undefined || raw === '') return null;
  if (!/^[\x21-\x7e]{16,}$/.test(raw)) throw new ConfigError('METRICS_TOKEN must be at least 16 characters of visible ASCII, without spaces');
  return raw;
}

/**
 * DPOP_NONCES: every instance makes and checks the nonces alike from KEYS_SECRET (oauth/dpop.ts),
 * with no state shared; without it there is nothing they share to make them from.
 */
function dpopNonces(env: Env): boolean {
  const on = boolean(env, 'DPOP_NONCES', false);
  if (on && !env.KEYS_SECRET) throw new ConfigError('DPOP_NONCES=true needs KEYS_SECRET: every instance makes the nonces from it');
  return on;
}

/** KEYS_SECRET: long enough to derive a 256-bit key from without being guessed. */
function keysSecret(env: Env): string | null {
  const raw = env.KEYS_SECRET;
  if (raw === undefined || raw === '') return null;
  if (raw.length < 32) throw new ConfigError('KEYS_SECRET must be at least 32 characters');
  return raw;
}

/** A bare address, or a display name and the address in angle brackets; nothing a header would read as a list, a quote or a comment. */
const MAIL_FROM = /^(?:[^<>\r\n,;:"()]{1,200} )?<?[^\s@<>,;:"()]{1,64}@[^\s@<>,;:"()]{1,255}>?$/;

/** SMTP_URL and MAIL_FROM; the URL is never repeated in a message (it holds the SMTP password). */
function mail(env: Env, issuer: string): Config['mail'] {
  const raw = env.SMTP_URL;
  if (raw === undefined || raw === '') {
    if (env.MAIL_FROM) throw new ConfigError('MAIL_FROM is set but SMTP_URL is not: set SMTP_URL too, or unset MAIL_FROM');
    return null;
  }
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError('SMTP_URL must be a URL such as smtps://user:password@mail.example.com');
  }
  if ((url.protocol !== 'smtp:' && url.protocol !== 'smtps:') || url.hostname === '')
    throw new ConfigError('SMTP_URL must start with smtp:// or smtps:// and name a host');
  const from = env.MAIL_FROM || `Gatehouse <gatehouse@${new URL(issuer).hostname}>`;
  const bracketed = from.includes('<');
  if (!MAIL_FROM.test(from) || bracketed !== from.endsWith('>')) throw new ConfigError(`MAIL_FROM must be an address or Name <address>, got "${from}"`);
  return Object.freeze({ smtpUrl: raw, from });
}

/** Lower-cased host names, each optionally `*.`-prefixed; empty entries (a trailing comma) are dropped. */
function hostPatterns(env: Env, name: string): readonly string[] {
  const entries = (env[name] ?? '')
    .split(',')
    .map((entry) => entry.trim().toLowerCase())
    .filter((entry) => entry !== '');
  const bad = entries.find((entry) => !/^(\*\.)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$/.test(entry));
  if (bad !== undefined) throw new ConfigError(`${name} must be comma-separated host names (*.example.com for subdomains), got "${bad}"`);
  return Object.freeze(entries);
}

export function loadConfig(environment: Env = process.env): Config {
  const env = declaredOnly(environment);
  const port = integer(env, 'PORT', 5000, 0, 65535);
  const issuer = publicUrl(env, port);
  return Object.freeze({
    port,
    host: env.HOST || '127.0.0.1',
    workers: workers(env),
    publicUrl: issuer,
    database: withGroupCommit(parseDatabaseUrl(env.DATABASE_URL || 'sqlite:./data/gatehouse.db'), boolean(env, 'SQLITE_GROUP_COMMIT', true)),
    redisUrl: redisUrl(env),
    trustProxy: trustProxy(env),
    accessTokenTtl: integer(env, 'ACCESS_TOKEN_TTL', 3600, 1),
    jwtAccessTokenTtl: integer(env, 'JWT_ACCESS_TOKEN_TTL', 300, ...ACCESS_TOKEN_TTL_RANGE.jwt),
    refreshTokenTtl: integer(env, 'REFRESH_TOKEN_TTL', 2_592_000, 1),
    authCodeTtl: integer(env, 'AUTH_CODE_TTL', 600, 1, 3600),
    deviceCodeTtl: integer(env, 'DEVICE_CODE_TTL', 600, 10, 86_400),
    refreshGraceSeconds: integer(env, 'REFRESH_GRACE_SECONDS', 60, 0, 3600),
    sessionTtl: integer(env, 'SESSION_TTL', 1_209_600, 60),
    consentTtl: integer(env, 'CONSENT_TTL', 31_536_000, 1),
    requirePkce: boolean(env, 'REQUIRE_PKCE', false),
    requirePar: boolean(env, 'REQUIRE_PAR', false),
    dpopNonces: dpopNonces(env),
    logLevel: oneOf(env, 'LOG_LEVEL', ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const, 'info'),
    purgeIntervalSeconds: integer(env, 'PURGE_INTERVAL_SECONDS', 600, 0),
    auditRetentionDays: integer(env, 'AUDIT_RETENTION_DAYS', 365, 1, 36_500),
    metricsToken: metricsToken(env),
    throttle: Object.freeze({
      loginFailuresPerAccount: integer(env, 'LOGIN_FAILURES_PER_ACCOUNT', 10, 0),
      loginFailuresPerAddress: integer(env, 'LOGIN_FAILURES_PER_ADDRESS', 100, 0),
      loginWindowSeconds: integer(env, 'LOGIN_THROTTLE_WINDOW', 900, 1),
      tokenRequestsPerClient: integer(env, 'TOKEN_REQUESTS_PER_CLIENT', 1200, 0),
      tokenRequestsPerAddress: integer(env, 'TOKEN_REQUESTS_PER_ADDRESS', 600, 0),
    }),
    clientMetadata: Object.freeze({
      enabled: boolean(env, 'CLIENT_METADATA_DOCUMENTS', true),
      allowedHosts: hostPatterns(env, 'CLIENT_METADATA_ALLOWED_HOSTS'),
      allowPrivateAddresses: boolean(env, 'CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES', false),
    }),
    dynamicClientRegistration: boolean(env, 'DYNAMIC_CLIENT_REGISTRATION', false),
    keys: Object.freeze({
      secret: keysSecret(env),
      rotationDays: integer(env, 'SIGNING_KEY_ROTATION_DAYS', 90, 0, 3650),
    }),
    idTokenTtl: integer(env, 'ID_TOKEN_TTL', 3600, 60, 86_400),
    requireSecondFactor: oneOf(env, 'REQUIRE_SECOND_FACTOR', ['none', 'admins', 'all'] as const, 'none'),
    passwordLogin: oneOf(env, 'PASSWORD_LOGIN', ['all', 'admins', 'none'] as const, 'all'),
    webauthn: webauthn(env, issuer),
    mail: mail(env, issuer),
  });
}

/**
 * The host part of user ids, `acct:<username>@<host>` (RFC 7565, SPEC §3): the host name of
 * PUBLIC_URL without its port, so an id stays the same when the port changes.
 */
export function authority(config: Config): string {
  // Parsed once per PUBLIC_URL: every bearer answer names its user by this id.
  if (lastAuthority?.publicUrl !== config.publicUrl) lastAuthority = { publicUrl: config.publicUrl, hostname: new URL(config.publicUrl).hostname };
  return lastAuthority.hostname;
}
let lastAuthority: { publicUrl: string; hostname: string } | undefined;

/** The id other services know a user by (the API's `userid`, a token's `sub`): `acct:<username>@<authority>`. */
export function accountUri(username: string, config: Config): string {
  return `acct:${username}@${authority(config)}`;
}

/**
 * What this deployment's keys and channels in Redis start with: its issuer, so that several
 * deployments (or test servers) can share one Redis without counting each other's login
 * failures, while the instances of one deployment — one PUBLIC_URL — share their counts.
 */
export function redisNamespace(config: Config): string {
  return `gatehouse:${config.publicUrl}`;
}
