/**
 * Revocation fan-out: when grants stop being valid on one instance, every instance learns
 * it at once, so live WebSockets using them close (SPEC §4.4). Carried by an existing
 * engine — Redis pub/sub when REDIS_URL is set, else PostgreSQL LISTEN/NOTIFY, whose message
 * a revocation sends from its own statement (`databaseChannel`). With SQLite there is one
 * instance, and delivery stays in the process.
 *
 * The database remains the source of truth: bearer checks read it on every request, and the
 * WebSocket route re-checks the tokens of its open sockets every second (src/http/ws.ts), so
 * a lost message — or a revocation by another process, such as the CLI on SQLite — delays a
 * socket's close by at most that second, and never makes a revoked token work.
 */
import type { Redis } from 'ioredis';
import { redisNamespace, type Config } from '../config.ts';
import type { Store } from '../store/database.ts';
import { IDS_PER_MESSAGE, listenPostgres } from '../store/notify.ts';

/** The PostgreSQL channel (a database is one deployment's); on Redis the channel is namespaced by issuer. */
const CHANNEL = 'gatehouse_revocations';

export type RevocationListener = (grantIds: readonly string[]) => void;

export interface RevocationBus {
  /**
   * The channel on which a revocation's own statement can send the message itself, when the
   * fan-out goes through PostgreSQL LISTEN/NOTIFY (no Redis). The message then leaves exactly
   * when the revocation commits, at no extra round trip; `publish` is told so with
   * `sentByDatabase`. Null with Redis (Redis is not the database) and with SQLite (one instance).
   */
  readonly databaseChannel: string | null;
  /**
   * Tells every instance, this one included (at once, before the message travels); `sentByDatabase`:
   * the revocation's statement has sent the message already, so only this instance is told.
   */
  publish(grantIds: readonly string[], sentByDatabase?: boolean): Promise<void>;
  subscribe(listener: RevocationListener): void;
  close(): Promise<void>;
}

interface Transport {
  send(payload: string): Promise<void>;
  close(): Promise<void>;
}

export interface BusLogger {
  warn(object: object, message: string): void;
}

export async function openRevocationBus(config: Config, store: Store, redis: { publisher: Redis; subscriber: Redis } | null, log: BusLogger): Promise<RevocationBus> {
  const listeners = new Set<RevocationListener>();
  const deliver = (grantIds: readonly string[]) => listeners.forEach((listener) => listener(grantIds));
  const receive = (payload: string) => {
    try {
      const ids: unknown = JSON.parse(payload);
      if (Array.isArray(ids) && ids.every((id) => typeof id === 'string')) deliver(ids);
    } catch {
      log.warn({ channel: CHANNEL }, 'ignored a malformed revocation message');
    }
  };

  let transport: Transport | null = null;
  let databaseChannel: string | null = null;
  if (redis) transport = await redisTransport(redis, `${redisNamespace(config)}:revocations`, receive);
  else if (config.database.kind === 'postgres') {
    transport = await listenPostgres(config.database.url, store.db, CHANNEL, receive, log);
    databaseChannel = CHANNEL;
  }

  return {
    databaseChannel,
    async publish(grantIds, sentByDatabase = false) {
      if (grantIds.length === 0) return;
      deliver(grantIds);
      for (let i = 0; transport && !sentByDatabase && i < grantIds.length; i += IDS_PER_MESSAGE) {
        await transport.send(JSON.stringify(grantIds.slice(i, i + IDS_PER_MESSAGE)));
      }
    },
    subscribe: (listener) => void listeners.add(listener),
    close: async () => {
      listeners.clear();
      await transport?.close();
    },
  };
}

async function redisTransport({ publisher, subscriber }: { publisher: Redis; subscriber: Redis }, channel: string, receive: (payload: string) => void): Promise<Transport> {
  const onMessage = (from: string, payload: string) => from === channel && receive(payload);
  subscriber.on('message', onMessage);
  await subscriber.subscribe(channel); // and ioredis subscribes again after each reconnection
  return {
    // Fails at once while Redis is unreachable; the caller logs it (context.ts).
    send: async (payload) => void (await publisher.publish(channel, payload)),
    // No UNSUBSCRIBE, which would fail with Redis down: closing the connection (services.ts) ends the subscription.
    close: async () => void subscriber.off('message', onMessage),
  };
}
