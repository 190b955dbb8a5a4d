/**
 * The fan-out: when grants stop being valid on one instance, every instance learns
 * it at once, so live WebSockets using them close (SPEC §4.4). Carried by an existing
 * engine — Redis pub/sub when REDIS_URL is set, else PostgreSQL LISTEN/NOTIFY, whose message
 * a revocation sends from its own statement (`databaseChannel`). With SQLite there is one
 * instance, and delivery stays in the process. The same channel carries a second kind of
 * message: clients whose rows changed, which every instance forgets from its client cache
 * (client-cache.ts); and a third: the signing keys changed (`{"keys":true}`), which every
 * instance reloads at once rather than at its next minute's re-read (identity/keys.ts).
 *
 * The database remains the source of truth: bearer checks read it on every request, and the
 * WebSocket route re-checks the tokens of its open sockets every second (src/http/ws.ts), so
 * a lost message — or a revocation by another process, such as the CLI on SQLite — delays a
 * socket's close by at most that second, and never makes a revoked token work.
 */
import type { Redis } from 'ioredis';
import { redisNamespace, type Config } from '../config.ts';
import type { Store } from '../store/database.ts';
import { listenPostgres } from '../store/notify.ts';

/** The PostgreSQL channel (a database is one deployment's); on Redis the channel is namespaced by issuer. */
const CHANNEL = 'gatehouse_revocations';
/**
 * PostgreSQL NOTIFY payloads stop at 8000 bytes: ids (a grant's is 36 characters, a client's
 * up to a 2000-character URL) are sent in chunks of at most this many bytes of JSON.
 */
const MAX_MESSAGE_BYTES = 7000;

export type RevocationListener = (grantIds: readonly string[]) => void;
export type ClientChangeListener = (clientIds: readonly string[]) => void;

export interface FanOut {
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
  /** Tells every instance, this one included (at once), that these clients' rows changed. */
  publishClientChanges(clientIds: readonly string[]): Promise<void>;
  subscribeClientChanges(listener: ClientChangeListener): void;
  /** Tells every instance, this one included (at once), that the signing keys changed. */
  publishKeyChanges(): Promise<void>;
  subscribeKeyChanges(listener: () => void): void;
  close(): Promise<void>;
}

/** The wire forms: revoked grants as a bare array of ids (as before clients were cached), changed clients as `{"clients":[…]}`, changed keys as `{"keys":true}`. */
const encode = { grants: (ids: readonly string[]) => JSON.stringify(ids), clients: (ids: readonly string[]) => JSON.stringify({ clients: ids }) };
const KEYS_CHANGED = JSON.stringify({ keys: true });

const isIds = (value: unknown): value is string[] => Array.isArray(value) && value.every((id) => typeof id === 'string');

/** `ids` in chunks whose JSON stays within MAX_MESSAGE_BYTES. */
function* chunks(ids: readonly string[]): Generator<string[]> {
  let chunk: string[] = [];
  let bytes = 0;
  for (const id of ids) {
    const size = Buffer.byteLength(JSON.stringify(id)) + 1;
    if (chunk.length > 0 && bytes + size > MAX_MESSAGE_BYTES) {
      yield chunk;
      chunk = [];
      bytes = 0;
    }
    chunk.push(id);
    bytes += size;
  }
  if (chunk.length > 0) yield chunk;
}

interface Transport {
  send(payload: string): Promise<void>;
  close(): Promise<void>;
}

export interface BusLogger {
  warn(object: object, message: string): void;
}

export async function openFanOut(config: Config, store: Store, redis: { publisher: Redis; subscriber: Redis } | null, log: BusLogger): Promise<FanOut> {
  const listeners = { grants: new Set<RevocationListener>(), clients: new Set<ClientChangeListener>() };
  const keyListeners = new Set<() => void>();
  const keysChanged = () => keyListeners.forEach((listener) => listener());
  const deliver = (kind: keyof typeof listeners, ids: readonly string[]) => listeners[kind].forEach((listener) => listener(ids));
  const receive = (payload: string) => {
    let message: unknown = null;
    try {
      message = JSON.parse(payload);
    } catch {
      // malformed: reported below
    }
    const clients = (message as { clients?: unknown } | null)?.clients;
    if (isIds(message)) deliver('grants', message);
    else if (isIds(clients)) deliver('clients', clients);
    else if ((message as { keys?: unknown } | null)?.keys === true) keysChanged();
    else log.warn({ channel: CHANNEL }, 'ignored a malformed revocation message');
  };

  let transport: Transport | null = null;
  let databaseChannel: string | null = null;
  if (redis) transport = await redisTransport(redis, `${redisNamespace(config)}:revocations`, receive);
  else if (config.database.kind === 'postgres') {
    transport = await listenPostgres(config.database.url, store.db, CHANNEL, receive, log);
    databaseChannel = CHANNEL;
  }

  /** `sentByDatabase`: the change's own statement sent the message (a revocation on PostgreSQL without Redis). */
  const publish = async (kind: keyof typeof listeners, ids: readonly string[], sentByDatabase = false) => {
    if (ids.length === 0) return;
    deliver(kind, ids);
    if (!transport || sentByDatabase) return;
    for (const chunk of chunks(ids)) await transport.send(encode[kind](chunk));
  };

  return {
    databaseChannel,
    publish: (grantIds, sentByDatabase = false) => publish('grants', grantIds, sentByDatabase),
    subscribe: (listener) => void listeners.grants.add(listener),
    publishClientChanges: (clientIds) => publish('clients', clientIds),
    subscribeClientChanges: (listener) => void listeners.clients.add(listener),
    publishKeyChanges: async () => {
      keysChanged();
      await transport?.send(KEYS_CHANGED);
    },
    subscribeKeyChanges: (listener) => void keyListeners.add(listener),
    close: async () => {
      listeners.grants.clear();
      listeners.clients.clear();
      keyListeners.clear();
      await transport?.close();
    },
  };
}

async function redisTransport(
  { publisher, subscriber }: { publisher: Redis; subscriber: Redis },
  channel: string,
  receive: (payload: string) => void,
): Promise<Transport> {
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
