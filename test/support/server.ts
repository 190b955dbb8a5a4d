/**
 * A real Gatehouse HTTP server on a loopback port, built by the same `buildApp` as
 * `gatehouse serve`, over a fresh database of the chosen backend.
 */
import { Writable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/app.ts';
import { createPerson } from './accounts.ts';
import { loadConfig, type Config } from '../../src/config.ts';
import { createClient, type ClientInput, type RegisteredClient } from '../../src/clients/clients.ts';
import { migrate, openStore, type Store } from '../../src/store/database.ts';
import type { User } from '../../src/store/schema.ts';
import type { Backend } from './backends.ts';
import { freePort } from './ports.ts';

export interface TestServer {
  url: string;
  config: Config;
  app: FastifyInstance;
  store: Store;
  /** Every log line the server wrote. */
  logs: string[];
  /** Moves the server's clock forward. */
  advance(seconds: number): void;
  createUser(username: string, options?: { admin?: boolean; password?: string }): Promise<User>;
  createClient(input?: Partial<ClientInput>): Promise<RegisteredClient>;
  close(): Promise<void>;
}

export { PASSWORD } from './accounts.ts';

/**
 * With `env.DATABASE_URL` the server opens that existing database (say, one the CLI works
 * on too) and leaves it in place on close; otherwise it gets a fresh one, dropped on close.
 * `hostname`: the host name of PUBLIC_URL and `url` (default 127.0.0.1); `localhost` for
 * passkeys, which browsers refuse on an IP address.
 */
export async function startServer(backend: Backend, env: Record<string, string> = {}, hostname = '127.0.0.1'): Promise<TestServer> {
  const database = env.DATABASE_URL ? { url: env.DATABASE_URL, drop: async () => {} } : await backend.createMigrated();
  const port = await freePort();
  const config = loadConfig({
    DATABASE_URL: database.url,
    PORT: String(port),
    PUBLIC_URL: `http://${hostname}:${port}`,
    LOG_LEVEL: 'info',
    PURGE_INTERVAL_SECONDS: '0',
    ...env,
  });
  const store = openStore(config.database);
  await migrate(store);
  let offset = 0;
  const now = () => Date.now() + offset;
  const logs: string[] = [];
  const logStream = new Writable({
    write(chunk, _encoding, done) {
      logs.push(String(chunk));
      done();
    },
  });
  const app = await buildApp(config, store, { now, logStream });
  await app.listen({ port, host: '127.0.0.1' });
  return {
    url: `http://${hostname}:${port}`,
    config,
    app,
    store,
    logs,
    advance: (seconds) => void (offset += seconds * 1000),
    createUser: (username, options = {}) => createPerson(store.db, username, options, now()),
    createClient: (input = {}) =>
      createClient(
        store.db,
        {
          name: 'Test application',
          grantType: 'authorization_code',
          redirectUris: ['http://127.0.0.1:8765/callback'],
          confidential: false,
          trusted: false,
          requirePkce: false,
          scope: '',
          ...input,
        },
        now(),
        config.keys.secret,
      ),
    async close() {
      await app.close();
      await store.close();
      await database.drop();
    },
  };
}
