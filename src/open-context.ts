/**
 * Opens the `AppContext` (context.ts). `gatehouse serve` (through buildApp) and the other CLI
 * commands open it the same way, so a revocation made from the command line is recorded,
 * counted and fanned out exactly like one made on a page.
 */
import { auditTrail } from './audit.ts';
import { bearerTokens } from './bearer-token-cache.ts';
import { createClientCache } from './client-cache.ts';
import type { Config } from './config.ts';
import type { ContextLogger, OpenContext } from './context.ts';
import { composeMail } from './accounts/account-mail.ts';
import { backchannelLogouts } from './identity/backchannel-logout.ts';
import { currentProviderTokens } from './accounts/connections/kept-tokens.ts';
import { mailer } from './mail.ts';
import { KeyRing } from './identity/keys.ts';
import type { Metrics } from './metrics.ts';
import { RemoteKeys } from './oauth/assertions/remote-keys.ts';
import { createClientMetadataResolver } from './oauth/client-metadata.ts';
import { forgetScopeCatalogue } from './oauth/resources.ts';
import { sealStoredSecrets } from './secrets-at-rest.ts';
import { openServices } from './services.ts';
import { isClientBlocked } from './store/clients.ts';
import type { Store } from './store/database.ts';

/**
 * What a command line counts: nothing. It has no `/metrics` for anyone to scrape, and
 * prom-client is not worth loading for a process that lives a second.
 */
const UNCOUNTED: Metrics = {
  contentType: 'text/plain',
  scrape: async () => '',
  requests: () => () => {},
  failure: () => {},
  event: () => {},
  grantsRevoked: () => {},
  purge: () => {},
  countTables: async () => {},
};

export interface ContextOptions {
  /** Epoch milliseconds; tests inject their own clock. */
  now?: () => number;
  /** The server's metrics (metrics.ts `createMetrics`); without them (the command line), nothing is counted. */
  metrics?: Metrics;
}

export async function openContext(config: Config, store: Store, log: ContextLogger, options: ContextOptions = {}): Promise<OpenContext> {
  const { now = Date.now, metrics = UNCOUNTED } = options;
  const services = await openServices(config, store, log);
  const clients = createClientCache(store.db);
  services.bus.subscribeClientChanges((clientIds) => clients.forget(clientIds));
  services.bus.subscribeChanges('scopes', () => forgetScopeCatalogue(store.db));
  const audit = auditTrail(store.db, config, now, log, metrics.event);
  let keys: KeyRing;
  try {
    await sealStoredSecrets(store.db, config.keys.secret, log);
    keys = await KeyRing.open({ config, store, now, audit, services }, log);
  } catch (error) {
    await services.close(); // a KEYS_SECRET that does not open the keys stops start-up: nothing is left open
    throw error;
  }
  const logouts = backchannelLogouts({ config, db: store.db, keys, audit, now, log });
  // A message is composed with the whole context (who the person is now, whether they may use a password).
  const mail = mailer({ config, db: store.db, audit, now, log, compose: (queued) => composeMail(context, queued) });
  const publishing = new Set<Promise<void>>();
  /** Keeps a fan-out message being sent until it is, for close(); a failure is logged, never thrown. */
  const track = (sending: Promise<void>, what: string) => {
    const sent = sending.catch((error: Error) => log.error({ err: error }, `${what} fan-out failed`));
    publishing.add(sent);
    void sent.finally(() => publishing.delete(sent));
  };
  const context: OpenContext = {
    config,
    store,
    db: store.db,
    now,
    services,
    metrics,
    audit,
    keys,
    backchannelLogouts: logouts,
    mail,
    clientMetadata: createClientMetadataResolver(config.clientMetadata, { now, isBlocked: (url) => isClientBlocked(store.db, url) }),
    remoteKeys: new RemoteKeys({ now, allowPrivateAddresses: config.clientMetadata.allowPrivateAddresses }),
    providerTokens: { current: (connection, userId) => currentProviderTokens(context, connection, userId) },
    onGrantsRevoked(grantIds, reason) {
      log.info({ event: 'grants_revoked', reason, grants: grantIds.length }, 'grants revoked');
      metrics.grantsRevoked(grantIds.length, reason);
      track(services.bus.publish(grantIds), 'revocation');
    },
    clients,
    bearerTokens: bearerTokens(store.db),
    // The bus delivers to this instance's subscribers (above) before the message leaves.
    onClientsChanged: (clientIds) => track(services.bus.publishClientChanges(clientIds), 'client change'),
    onScopesChanged: () => track(services.bus.publishChange('scopes'), 'scope change'),
    async close() {
      await Promise.all([logouts.close(), mail.close()]);
      keys.close();
      await Promise.all(publishing);
      await services.close();
    },
  };
  return context;
}
