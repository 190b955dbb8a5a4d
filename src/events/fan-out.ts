/**
 * The fan-out: when grants stop being valid on one instance, every instance learns
 * it at once, so live WebSockets using them close (SPEC §4.4). Carried by an existing
 * engine — Redis pub/sub when REDIS_URL is set, else PostgreSQL LISTEN/NOTIFY. Revocations
 * that come while a message is being sent share the next one (`sharedCalls`): on PostgreSQL,
 * which lets one notifying transaction at a time commit, each with its WAL flush, that is one
 * such commit for many revocations, and none inside the revocations' own. The same channel carries
 * other kinds of message: clients whose rows changed, which every instance forgets from its
 * client cache (client-cache.ts); the signing keys changed (`{"keys":true}`), which every
 * instance reloads at once rather than at its next minute's re-read (identity/keys.ts); and
 * the scopes changed (`{"scopes":true}`), which every instance drops from the metadata's
 * catalogue (oauth/resources.ts).
 *
 * On SQLite without Redis, the processes that share the file — the server, its workers
 * (WORKERS=n) and the command line — pass the same messages through a table of the database
 * itself (`databaseTransport`), which each serving process reads twice a second: a key
 * revoked from the command line after a compromise leaves the JWKS and stops signing within
 * that, not at the next minute's re-read.
 *
 * The database remains the source of truth: bearer checks read it, or confirm what they kept
 * against it (bearer-token-cache.ts), on every request, and the
 * WebSocket route re-checks the tokens of its open sockets every second (src/http/ws.ts), so
 * a lost message — or a revocation by another process on SQLite, which does not travel through
 * the database (`databaseTransport` says why) — delays a socket's close by at most that second,
 * and never makes a revoked token work.
 */
import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { Kysely } from 'kysely';
import { redisNamespace, type Config } from '../config.ts';
import type { Store } from '../store/database.ts';
import { appendFanOutMessage, fanOutMessagesAfter, latestFanOutMessage } from '../store/fan-out-messages.ts';
import { listenPostgres } from '../store/notify.ts';
import { jobLog, type JobLogger } from './job-log.ts';
import { sharedCalls } from '../protocol/shared-calls.ts';
import type { Database } from '../store/schema.ts';

/** The PostgreSQL channel (a database is one deployment's); on Redis the channel is namespaced by issuer. */
const CHANNEL = 'gatehouse_revocations';
/**
 * PostgreSQL NOTIFY payloads stop at 8000 bytes: ids (a grant's is 36 characters, a client's
 * up to a 2000-character URL) are sent in chunks of at most this many bytes of JSON.
 */
const MAX_MESSAGE_BYTES = 7000;
/**
 * How often a serving process on SQLite reads the messages other processes left in the
 * database: twice a second, so that a change is acted on within a second even when it lands
 * just after a read. One read of the table's primary key past the last id seen, usually
 * empty; on a timer of its own, never on a request's path.
 */
const DATABASE_POLL_MS = 500;
/** How long a message stays in the database: far longer than any reader takes to read it (a minute's re-read of the keys covers the rest). */
const DATABASE_KEEP_MS = 60_000;

export type RevocationListener = (grantIds: readonly string[]) => void;
export type ClientChangeListener = (clientIds: readonly string[]) => void;
/** What changed as a whole, with no ids: the signing keys, or the scopes of the resource servers. */
export type Change = 'keys' | 'scopes';

export interface FanOut {
  /** Tells every instance, this one included (at once, before the message travels). */
  publish(grantIds: readonly string[]): Promise<void>;
  subscribe(listener: RevocationListener): void;
  /** Tells every instance, this one included (at once), that these clients' rows changed. */
  publishClientChanges(clientIds: readonly string[]): Promise<void>;
  subscribeClientChanges(listener: ClientChangeListener): void;
  /** Tells every instance, this one included (at once), that the signing keys, or the scopes, changed. */
  publishChange(change: Change): Promise<void>;
  subscribeChanges(change: Change, listener: () => void): void;
  /**
   * Starts hearing the other processes where that costs a timer: on SQLite, reading the
   * database's messages (`databaseTransport`). A serving process calls it once it is ready
   * (app.ts); the command line, which only sends, never does. Redis and PostgreSQL deliver
   * from the start.
   */
  listen(): void;
  close(): Promise<void>;
}

/**
 * The wire forms: revoked grants as a bare array of ids (as before clients were cached), changed
 * clients as `{"clients":[…]}`, changed keys as `{"keys":true}`, changed scopes as `{"scopes":true}`.
 */
const encode = { grants: (ids: readonly string[]) => JSON.stringify(ids), clients: (ids: readonly string[]) => JSON.stringify({ clients: ids }) };
const CHANGES: readonly Change[] = ['keys', 'scopes'];

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
  /** Whether revoked grants travel on it: not through the database on SQLite (`databaseTransport` says why). */
  readonly carriesGrants: boolean;
  /** Sends the messages in order; on PostgreSQL in one statement, all or none. */
  send(payloads: readonly string[]): Promise<void>;
  /** Starts receiving, where that is not done from the start. */
  listen?(): void;
  close(): Promise<void>;
}

export type BusLogger = JobLogger;

export async function openFanOut(config: Config, store: Store, redis: { publisher: Redis; subscriber: Redis } | null, log: BusLogger): Promise<FanOut> {
  const listeners = { grants: new Set<RevocationListener>(), clients: new Set<ClientChangeListener>() };
  const changeListeners = new Map(CHANGES.map((change) => [change, new Set<() => void>()]));
  const changed = (change: Change) => changeListeners.get(change)!.forEach((listener) => listener());
  const deliver = (kind: keyof typeof listeners, ids: readonly string[]) => listeners[kind].forEach((listener) => listener(ids));
  const receive = (payload: string) => {
    let message: unknown = null;
    try {
      message = JSON.parse(payload);
    } catch {
      // malformed: reported below
    }
    const clients = (message as { clients?: unknown } | null)?.clients;
    const change = CHANGES.find((candidate) => (message as Record<string, unknown> | null)?.[candidate] === true);
    if (isIds(message)) deliver('grants', message);
    else if (isIds(clients)) deliver('clients', clients);
    else if (change) changed(change);
    else log.warn({ channel: CHANNEL }, 'ignored a malformed revocation message');
  };

  let transport: Transport | null = null;
  if (redis) transport = await redisTransport(redis, `${redisNamespace(config)}:revocations`, receive);
  else if (config.database.kind === 'postgres')
    transport = { carriesGrants: true, ...(await listenPostgres(config.database.url, store.db, CHANNEL, receive, log)) };
  else if (config.database.path !== ':memory:') transport = await databaseTransport(store.db, receive, log); // no other process opens a database in memory

  const send = (kind: keyof typeof listeners, ids: readonly string[]) => transport!.send([...chunks(ids)].map(encode[kind]));
  // Keyed by each revocation's ids: the batch's ids are sent at once, in as few messages as fit.
  const sendGrants = sharedCalls(async (revocations: ReadonlyArray<readonly string[]>) => {
    await send('grants', [...new Set(revocations.flat())]);
    return new Map<readonly string[], never>();
  });
  const publish = async (kind: keyof typeof listeners, ids: readonly string[]) => {
    if (ids.length === 0) return;
    deliver(kind, ids);
    if (!transport) return;
    if (kind === 'clients') await send(kind, ids);
    else if (transport.carriesGrants) await sendGrants(ids);
  };

  return {
    publish: (grantIds) => publish('grants', grantIds),
    subscribe: (listener) => void listeners.grants.add(listener),
    publishClientChanges: (clientIds) => publish('clients', clientIds),
    subscribeClientChanges: (listener) => void listeners.clients.add(listener),
    publishChange: async (change) => {
      changed(change);
      await transport?.send([JSON.stringify({ [change]: true })]);
    },
    subscribeChanges: (change, listener) => void changeListeners.get(change)!.add(listener),
    listen: () => transport?.listen?.(),
    close: async () => {
      listeners.grants.clear();
      listeners.clients.clear();
      changeListeners.forEach((set) => set.clear());
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
    carriesGrants: true,
    // Fails at once while Redis is unreachable; the caller logs it (context.ts).
    send: async (payloads) => {
      for (const payload of payloads) await publisher.publish(channel, payload);
    },
    // No UNSUBSCRIBE, which would fail with Redis down: closing the connection (services.ts) ends the subscription.
    close: async () => void subscriber.off('message', onMessage),
  };
}

/**
 * The messages between the processes that share one SQLite file, through the file itself
 * (`fan_out_messages`, store/fan-out-messages.ts): a sender adds a row; each serving process
 * reads the rows past the last one it saw every DATABASE_POLL_MS and hands the others'
 * payloads to `receive`, as Redis or LISTEN/NOTIFY would. A table, not `PRAGMA data_version`
 * (which also moves on every commit of another connection: another worker's every token
 * would wake every process to reload everything), and not a bare counter per kind (which
 * would lose which clients changed): the same messages, over another wire.
 *
 * Revoked grants do not travel on it. A revocation is on the path of requests (revocation,
 * logout, refresh reuse), where an extra write would cost every one of them, and nothing of
 * a grant is held in memory: bearer checks read the database, and open WebSockets are
 * re-checked every second. Clients, keys and scopes change rarely: by an administrator's hand,
 * or when a client's metadata document is first recorded or changes.
 */
async function databaseTransport(db: Kysely<Database>, receive: (payload: string) => void, log: BusLogger): Promise<Transport> {
  const origin = randomUUID();
  // Only what comes after this process opened: everything before, it reads when it loads.
  let seen = await latestFanOutMessage(db);
  let timer: NodeJS.Timeout | null = null;
  let reading: Promise<void> | null = null;
  const reads = jobLog(log, 'reading the fan-out messages'); // one line per outage, not two a second
  const read = async () => {
    for (const message of await fanOutMessagesAfter(db, seen)) {
      seen = message.id;
      if (message.origin !== origin) receive(message.payload);
    }
  };
  const poll = () =>
    void (reading ??= read()
      .then(reads.succeeded, reads.failed)
      .finally(() => (reading = null)));
  return {
    carriesGrants: false,
    send: async (payloads) => {
      for (const payload of payloads) {
        const sentAt = Date.now();
        await appendFanOutMessage(db, { origin, payload, sentAt }, sentAt - DATABASE_KEEP_MS);
      }
    },
    listen() {
      timer ??= setInterval(poll, DATABASE_POLL_MS).unref();
    },
    close: async () => {
      if (timer) clearInterval(timer);
      timer = null;
      await reading; // the store closes after this: no read is left running on it
    },
  };
}
