/**
 * PostgreSQL LISTEN/NOTIFY on one channel: what the fan-out (events/fan-out.ts)
 * uses to reach the other instances when there is no Redis. Notifications go out through the
 * pool; listening needs a dedicated connection (pooled ones cannot), which is tried again a
 * second after it is lost, and a second after each attempt that fails, until it is back.
 */
import { sql, type Kysely } from 'kysely';
import type { Client } from 'pg';
import { CONNECTION_WAIT_MS, KEEPALIVE_DELAY_MS } from './database.ts';
import type { Database } from './schema.ts';

export interface NotifyChannel {
  /** Sends these payloads in one statement: one commit, all or none. */
  send(payloads: readonly string[]): Promise<void>;
  close(): Promise<void>;
}

export interface ListenerLogger {
  warn(object: object, message: string): void;
}

export async function listenPostgres(
  url: string,
  db: Kysely<Database>,
  channel: string,
  receive: (payload: string) => void,
  log: ListenerLogger,
): Promise<NotifyChannel> {
  let closed = false;
  const { default: pg } = await import('pg');
  let listener: Client | null = null;
  /** A connection listening on the channel. */
  const listen = async (): Promise<Client> => {
    const client = new pg.Client({
      connectionString: url,
      connectionTimeoutMillis: CONNECTION_WAIT_MS,
      keepAlive: true,
      keepAliveInitialDelayMillis: KEEPALIVE_DELAY_MS,
      // Its one query, LISTEN: a connection that opened and then went silent fails the attempt, which is tried again.
      query_timeout: CONNECTION_WAIT_MS,
    });
    client.on('notification', (message) => message.channel === channel && message.payload !== undefined && receive(message.payload));
    client.on('error', (error) => {
      if (listener !== client) return; // an attempt under way fails by its promise (below)
      listener = null;
      log.warn({ err: error.message, channel }, 'the LISTEN connection to PostgreSQL was lost; reconnecting');
      client.end().catch(() => {});
      retry();
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${channel}`);
    } catch (error) {
      client.end().catch(() => {});
      throw error;
    }
    return client;
  };
  let retrying: NodeJS.Timeout | null = null;
  /** Another attempt a second from now, and again a second after each that fails (an attempt gives up after CONNECTION_WAIT_MS). */
  const retry = () => {
    if (closed) return;
    const attempt = () => {
      retrying = null;
      if (closed) return;
      listen().then((client) => {
        if (closed) return void client.end().catch(() => {});
        listener = client;
        log.warn({ channel }, 'the LISTEN connection to PostgreSQL is back');
      }, retry);
    };
    retrying = setTimeout(attempt, 1000).unref();
  };
  listener = await listen();
  return {
    // PostgreSQL lets one notifying transaction commit at a time: one for all of them.
    send: async (payloads) => void (await sql`select pg_notify(${channel}, payload) from unnest(${payloads}::text[]) as payload`.execute(db)),
    close: async () => {
      closed = true;
      if (retrying !== null) clearTimeout(retrying);
      await listener?.end();
    },
  };
}
