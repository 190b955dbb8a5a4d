/**
 * The shared engines an instance talks to besides its database: Redis (when REDIS_URL is
 * set) for throttling counters and revocation fan-out, or PostgreSQL LISTEN/NOTIFY for the
 * fan-out alone. `serve`, the CLI and the tests open them the same way.
 */
import { Redis } from 'ioredis';
import type { Config } from './config.ts';
import { openRevocationBus, type BusLogger, type RevocationBus } from './events/revocations.ts';
import type { Store } from './store/database.ts';
import { createThrottle, type Throttle } from './throttle.ts';

export interface Services {
  readonly bus: RevocationBus;
  readonly throttle: Throttle;
  close(): Promise<void>;
}

export async function openServices(config: Config, store: Store, log: BusLogger): Promise<Services> {
  let redis: { publisher: Redis; subscriber: Redis } | null = null;
  if (config.redisUrl) {
    // Commands fail fast instead of queueing while Redis is away: throttling then fails closed.
    const publisher = new Redis(config.redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1 });
    const subscriber = publisher.duplicate();
    await Promise.all([publisher.connect(), subscriber.connect()]);
    redis = { publisher, subscriber };
  }
  const bus = await openRevocationBus(config, store, redis, log);
  return {
    bus,
    throttle: createThrottle(config, redis?.publisher ?? null),
    async close() {
      await bus.close();
      if (redis) await Promise.all([redis.publisher.quit(), redis.subscriber.quit()]);
    },
  };
}
