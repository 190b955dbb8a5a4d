/**
 * `AppContext`: what every layer below the routes gets — settings, the database, the clock,
 * the audit trail, the shared engines (throttling, revocation fan-out) and the metrics. Only
 * the type lives here, at the bottom, so that every layer can name it; `openContext`
 * (open-context.ts, beside app.ts) builds it. Routes receive it as their plugin option
 * `ctx`, and in no other way.
 */
import type { JWK, JWTPayload } from 'jose';
import type { Kysely } from 'kysely';
import type { Audit } from './audit.ts';
import type { BearerTokens } from './bearer-token-cache.ts';
import type { ClientCache } from './client-cache.ts';
import type { Config } from './config.ts';
import type { Metrics } from './metrics.ts';
import type { ClientMetadataResolver, RemoteKeySource } from './protocol/remote-documents.ts';
import type { Services } from './services.ts';
import type { Store } from './store/database.ts';
import type { Connection, Database, SigningAlg } from './store/schema.ts';

export interface AppContext {
  readonly config: Config;
  readonly store: Store;
  readonly db: Kysely<Database>;
  /** Epoch milliseconds; tests inject their own clock. */
  readonly now: () => number;
  /** Told about every grant that stops being valid, so live connections can be closed. */
  readonly onGrantsRevoked: (grantIds: readonly string[], reason: RevocationReason) => void;
  /**
   * Clients by id for the endpoints that read the requesting client on every request
   * (token, revocation, introspection); a second old at most.
   */
  readonly clients: ClientCache;
  /** The bearer check's reads: on PostgreSQL, answers kept in memory and confirmed against the database's counters. */
  readonly bearerTokens: BearerTokens;
  /**
   * Told, once it is committed, about every change to clients' rows or standing (settings,
   * secret, scopes, deletion, block): `clients` forgets them at once, here and on every other
   * instance when the fan-out's message arrives.
   */
  readonly onClientsChanged: (clientIds: readonly string[]) => void;
  /**
   * Told, once it is committed, about every change to the scopes (a resource server or a scope
   * created or deleted): the metadata's `scopes_supported` is read again, here at once and on
   * every other instance when the fan-out's message arrives.
   */
  readonly onScopesChanged: () => void;
  /**
   * Records a security event in the audit trail, after the change it describes (never
   * throws), or with `audit.pending` inside the change's own transaction. The event names
   * users and clients by id: never a token, code, secret or password.
   */
  readonly audit: Audit;
  /** Throttling counters and the revocation fan-out (Redis, LISTEN/NOTIFY or in-process). */
  readonly services: Services;
  readonly metrics: Metrics;
  /** Client ID metadata documents (SPEC §4.8): fetched safely, validated and cached, one cache per process. */
  readonly clientMetadata: ClientMetadataResolver;
  /** Others' public keys (SPEC §4.11): JWK Sets at URLs and discovered `jwks_uri`s, fetched safely and cached, one cache per process. */
  readonly remoteKeys: RemoteKeySource;
  /** The signing keys (SPEC §4.9): what signs and verifies JWTs, and the JWKS. */
  readonly keys: SigningKeys;
  /** Back-channel logout deliveries (SPEC §4.10): woken when a session ends here; delivering on the server only. */
  readonly backchannelLogouts: Deliveries;
  /** Mail (SPEC §4.16): queued in the database, sent by the server in the background (mail.ts). */
  readonly mail: Mail;
  /** People's provider tokens that connections keep (SPEC §4.15), for a token exchange: accounts/connections/kept-tokens.ts. */
  readonly providerTokens: ProviderTokenVault;
}

/** The provider's tokens of a person's login through a connection, as a connection that keeps them stores them (sealed). */
export interface ProviderTokens {
  access_token: string;
  refresh_token: string | null;
  scope: string | null;
  /** When the access token expires, epoch ms; null when the provider did not say. */
  expires_at: number | null;
}

/** Why a person's provider token cannot be had: none is kept, or it expired and the provider would not renew it. */
export type NoProviderToken = 'none_kept' | 'refresh_failed';

export interface ProviderTokenVault {
  /** The person's current provider tokens at the connection: as kept, or refreshed at the provider once expired. */
  current(connection: Connection, userId: string): Promise<ProviderTokens | NoProviderToken>;
}

/** What signs and verifies Gatehouse's own JWTs and publishes the JWKS: this process's key ring (identity/keys.ts). */
export interface SigningKeys {
  /** The public JWK of every next, active and retiring key: the JWKS document. */
  jwks(): { readonly keys: readonly JWK[] };
  /** A compact JWS of `claims` (given whole), signed by the active key of `alg`, its kid in the header. */
  signJwt(alg: SigningAlg, header: { readonly typ: string }, claims: JWTPayload): Promise<string>;
  /** The claims of a JWT this server signed with a key it still publishes, of the `typ` given, unexpired unless `ignoreExpiry`; null for anything else. */
  verifyJwt(
    token: string,
    options: { readonly typ: string; readonly algorithms?: readonly SigningAlg[]; readonly ignoreExpiry?: boolean },
  ): Promise<JWTPayload | null>;
  /** Re-reads the keys: after a change this process made. */
  reload(): Promise<void>;
  /** Runs the scheduled step (rotation, activation, removal) if something is due, then re-reads the keys: what the ring's timer does. */
  refresh(): Promise<void>;
}

/** A queue in the database that every server instance works off (events/deliveries.ts): back-channel logouts, mail. */
export interface Deliveries {
  /** Delivers what is due now, in the background (after a session ended here). Does nothing until started. */
  wake(): void;
  /** Starts delivering on this instance (the server; not the command line). */
  start(): void;
  /** Stops, waiting for the deliveries under way. */
  close(): Promise<void>;
}

/** Mail (mail.ts): without SMTP_URL it is not `enabled`, and nothing is queued. */
export interface Mail extends Deliveries {
  /** Whether mail can be sent (SMTP_URL is set): pages that would send some say to ask an administrator otherwise. */
  readonly enabled: boolean;
}

export type RevocationReason =
  'revoked' | 'refresh_reuse' | 'code_replay' | 'user_disabled' | 'user_deleted' | 'client_deleted' | 'client_blocked' | 'client_disabled' | 'access_removed';

export interface ContextLogger {
  info(object: object, message: string): void;
  warn(object: object, message: string): void;
  error(object: object, message: string): void;
}

export interface OpenContext extends AppContext {
  /** Waits for revocations still being fanned out, then closes the shared engines (not the store). */
  close(): Promise<void>;
}
