/**
 * Client rows in memory, for the endpoints that read the requesting client on every call:
 * token, revocation, introspection. Clients change rarely, and every change goes through
 * `AppContext.onClientsChanged`, which forgets the client here at once and on every other
 * instance when the fan-out's message arrives (events/fan-out.ts). A change no message
 * reaches — the CLI in another process on SQLite, workers on SQLite without Redis — is seen
 * within a second: no entry is believed longer.
 *
 * A stale entry cannot issue a token by itself: every write that issues tokens checks the
 * client again in the database (store/grants.ts: it exists, is not blocked, has the scopes
 * the request was decided by), and a presented secret is held to the stored row — its hash and
 * whether the client is switched on, read with the code or token the request redeems or
 * revokes, or on their own where there is none (oauth/client-auth.ts `confirmSecret`). Only
 * clients that exist are kept, so a flood of made-up ids fills nothing.
 */
import type { Kysely } from 'kysely';
import { LRUCache } from 'lru-cache';
import { findClient } from './store/clients.ts';
import type { Client, Database } from './store/schema.ts';

/** The longest a client is believed without hearing of a change: the bound on seeing one that no message carries. */
export const CLIENT_CACHE_TTL_MS = 1000;
/** The clients in use within one such second that are kept; beyond them, only more reads. */
const ENTRIES = 1000;

export interface ClientCache {
  /** The client with this id, from memory if read within the last second; undefined when there is none. */
  find(id: string): Promise<Client | undefined>;
  /**
   * The client as stored now, read from the database (and kept, for `find`): what a presented
   * secret is checked against, where nothing read with the request confirms it (oauth/client-auth.ts).
   */
  findStored(id: string): Promise<Client | undefined>;
  /** Forgets these clients here, and any read of them under way: for a change this process made or heard of. */
  forget(ids: readonly string[]): void;
}

export function createClientCache(db: Kysely<Database>): ClientCache {
  const cache = new LRUCache<string, Client>({ max: ENTRIES, ttl: CLIENT_CACHE_TTL_MS });
  // Reads under way, shared by the requests that ask for the same client meanwhile. A change
  // forgets them too: such a read may have seen the row before the change, so it is not kept.
  const reading = new Map<string, Promise<Client | undefined>>();

  function read(id: string): Promise<Client | undefined> {
    const pending: Promise<Client | undefined> = findClient(db, id).then((client) => {
      if (reading.get(id) !== pending) return client; // forgotten meanwhile
      reading.delete(id);
      if (client) cache.set(id, client);
      return client;
    });
    pending.catch(() => reading.get(id) === pending && reading.delete(id));
    reading.set(id, pending);
    return pending;
  }

  return {
    find: (id) => {
      const client = cache.get(id);
      return client ? Promise.resolve(client) : (reading.get(id) ?? read(id));
    },
    findStored: read,
    forget(ids) {
      for (const id of ids) {
        cache.delete(id);
        reading.delete(id);
      }
    },
  };
}
