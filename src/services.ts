/**
 * The shared engines an instance talks to besides its database: Redis (when REDIS_URL is
 * set) for throttling counters and revocation fan-out, or PostgreSQL LISTEN/NOTIFY for the
 * fan-out alone. `serve`, the CLI and the tests open them the same way.
 *
 * Redis may go away while the server runs (SPEC §5). Then every command fails at once —
 * none waits in a queue for a reconnection — so the throttled endpoints answer 503 at once
 * (throttling fails closed) while the rest of the server, which does not need Redis, goes
 * on; ioredis keeps reconnecting in the background, and the outage is logged as JSON lines
 * through the app's logger.
 */
import type { Redis, RedisOptions } from 'ioredis';
import type { Config } from './config.ts';
import { openFanOut, type BusLogger, type FanOut } from './events/fan-out.ts';
import type { Store } from './store/database.ts';
import { createThrottle, type Throttle } from './throttle.ts';

export interface Services {
  readonly bus: FanOut;
  readonly throttle: Throttle;
  close(): Promise<void>;
}

export interface ServicesLogger extends BusLogger {
  info(object: object, message: string): void;
  error(object: object, message: string): void;
}

const REDIS_OPTIONS: RedisOptions = {
  lazyConnect: true,
  // A command sent while disconnected fails at once instead of waiting for a reconnection,
  // and one in flight when the connection drops fails at once too (no retry on reconnect).
  enableOfflineQueue: false,
  maxRetriesPerRequest: 0,
  // A Redis that stops answering without closing the connection (a network partition) still
  // costs a request at most this long: well within SPEC §5's second.
  commandTimeout: 500,
  connectTimeout: 2000,
  // Reconnect for ever, backing off to one attempt every 2 s.
  retryStrategy: (attempts) => Math.min(attempts * 200, 2000),
};

/** While Redis stays unreachable, at most one log line per connection this often. */
const ERROR_LOG_INTERVAL_MS = 30_000;

export async function openServices(config: Config, store: Store, log: ServicesLogger): Promise<Services> {
  let redis: { publisher: Redis; subscriber: Redis } | null = null;
  if (config.redisUrl) {
    // Loaded only when configured: a command without Redis starts that much sooner.
    const { Redis } = await import('ioredis');
    const publisher = new Redis(config.redisUrl, REDIS_OPTIONS);
    const subscriber = publisher.duplicate();
    logConnectionErrors(publisher, 'commands', log);
    logConnectionErrors(subscriber, 'revocation subscriber', log);
    await Promise.all([publisher.connect(), subscriber.connect()]);
    redis = { publisher, subscriber };
  }
  const bus = await openFanOut(config, store, redis, log);
  return {
    bus,
    throttle: createThrottle(config, redis?.publisher ?? null),
    async close() {
      await bus.close();
      if (redis) await Promise.all([quit(redis.publisher), quit(redis.subscriber)]);
    },
  };
}

/**
 * Logs a connection's errors (ioredis emits one per failed command and reconnection
 * attempt): the first of an outage at once, then at most one line every
 * ERROR_LOG_INTERVAL_MS saying how many more there were; and when the connection is back.
 */
function logConnectionErrors(redis: Redis, connection: string, log: ServicesLogger): void {
  let loggedAt = -Infinity;
  let unlogged = 0;
  let down = false;
  redis.on('error', (error: Error & { code?: string }) => {
    down = true;
    const now = Date.now();
    if (now - loggedAt < ERROR_LOG_INTERVAL_MS) {
      unlogged++;
      return;
    }
    log.error({ connection, error: error.message, code: error.code, errors_since_last_line: unlogged }, 'Redis is unreachable');
    loggedAt = now;
    unlogged = 0;
  });
  redis.on('ready', () => {
    if (!down) return;
    log.info({ connection, errors_since_last_line: unlogged }, 'Redis is reachable again');
    down = false;
    loggedAt = -Infinity;
    unlogged = 0;
  });
}

/** Closes a connection politely when it is up, at once when it is not; never throws. */
async function quit(redis: Redis): Promise<void> {
  if (redis.status === 'ready') {
    try {
      await redis.quit();
      return;
    } catch {
      // went down meanwhile: drop it below
    }
  }
  redis.disconnect();
}
