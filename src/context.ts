/**
 * `AppContext`: what every layer below the routes gets — settings, the database, the clock,
 * the audit trail, the shared engines (throttling, revocation fan-out) and the metrics.
 * `gatehouse serve` (through buildApp) and the other CLI commands open it the same way, with
 * `openContext`, so a revocation made from the command line is recorded, counted and fanned
 * out exactly like one made on a page. Routes receive it as their plugin option `ctx`, and
 * in no other way.
 */
import type { Kysely } from 'kysely';
import { auditTrail, type Audit } from './audit.ts';
import { createClientCache, type ClientCache } from './client-cache.ts';
import type { Config } from './config.ts';
import { createMetrics, type Metrics } from './metrics.ts';
import { createClientMetadataResolver, type ClientMetadataResolver } from './oauth/client-metadata.ts';
import { openServices, type Services } from './services.ts';
import { isClientBlocked } from './store/clients.ts';
import type { Store } from './store/database.ts';
import type { Database } from './store/schema.ts';

export interface AppContext {
  readonly config: Config;
  readonly store: Store;
  readonly db: Kysely<Database>;
  /** Epoch milliseconds; tests inject their own clock. */
  readonly now: () => number;
  /**
   * Told about every grant that stops being valid, so live connections can be closed; `sentByDatabase`:
   * the revocation's statement has already sent the fan-out message (`services.bus.databaseChannel`).
   */
  readonly onGrantsRevoked: (grantIds: readonly string[], reason: RevocationReason, sentByDatabase?: boolean) => void;
  /**
   * Clients by id for the endpoints that read the requesting client on every request
   * (token, revocation, introspection); a second old at most.
   */
  readonly clients: ClientCache;
  /**
   * Told, once it is committed, about every change to clients' rows or standing (settings,
   * secret, scopes, deletion, block): `clients` forgets them at once, here and on every other
   * instance when the fan-out's message arrives.
   */
  readonly onClientsChanged: (clientIds: readonly string[]) => void;
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
}

export type RevocationReason = 'revoked' | 'refresh_reuse' | 'code_replay' | 'user_disabled' | 'client_deleted' | 'client_blocked' | 'access_removed';

export interface ContextLogger {
  info(object: object, message: string): void;
  warn(object: object, message: string): void;
  error(object: object, message: string): void;
}

export interface OpenContext extends AppContext {
  /** Waits for revocations still being fanned out, then closes the shared engines (not the store). */
  close(): Promise<void>;
}

export async function openContext(config: Config, store: Store, log: ContextLogger, now: () => number = Date.now): Promise<OpenContext> {
  const metrics = createMetrics(store);
  const services = await openServices(config, store, log);
  const clients = createClientCache(store.db);
  services.bus.subscribeClientChanges((clientIds) => clients.forget(clientIds));
  const publishing = new Set<Promise<void>>();
  /** Keeps a fan-out message being sent until it is, for close(); a failure is logged, never thrown. */
  const track = (sending: Promise<void>, what: string) => {
    const sent = sending.catch((error: Error) => log.error({ err: error }, `${what} fan-out failed`));
    publishing.add(sent);
    void sent.finally(() => publishing.delete(sent));
  };
  return {
    config,
    store,
    db: store.db,
    now,
    services,
    metrics,
    audit: auditTrail(store.db, config, now, log, metrics.event),
    clientMetadata: createClientMetadataResolver(config.clientMetadata, { now, isBlocked: (url) => isClientBlocked(store.db, url) }),
    onGrantsRevoked(grantIds, reason, sentByDatabase = false) {
      log.info({ event: 'grants_revoked', reason, grants: grantIds.length }, 'grants revoked');
      metrics.grantsRevoked(grantIds.length, reason);
      track(services.bus.publish(grantIds, sentByDatabase), 'revocation');
    },
    clients,
    // The bus delivers to this instance's subscriber (above) before the message leaves.
    onClientsChanged: (clientIds) => track(services.bus.publishClientChanges(clientIds), 'client change'),
    async close() {
      await Promise.all(publishing);
      await services.close();
    },
  };
}
