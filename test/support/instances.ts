/**
 * Several real `gatehouse serve` processes on one PostgreSQL database, as behind a load
 * balancer: they share PUBLIC_URL (the issuer) and differ only in the port they listen on.
 */
import type { ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { createPerson } from './accounts.ts';
import { loadConfig } from '../../src/config.ts';
import { createClient, type ClientInput, type RegisteredClient } from '../../src/clients/clients.ts';
import { migrate, openStore, type Store } from '../../src/store/database.ts';
import { postgres } from './backends.ts';
import { freePort } from './ports.ts';
import { answers, startChild, stopChild } from './processes.ts';

const MAIN = fileURLToPath(new URL('../../bin/gatehouse.js', import.meta.url));

export interface Instance {
  url: string;
  process: ChildProcess;
}

export interface Cluster {
  instances: Instance[];
  /** The issuer all instances announce. */
  publicUrl: string;
  store: Store;
  createUser(username: string, options?: { admin?: boolean }): Promise<void>;
  createClient(input?: Partial<ClientInput>): Promise<RegisteredClient>;
  close(): Promise<void>;
}

/**
 * `starting`: called with the database's URL as the instances start, to start other processes beside them.
 * `hostname`: of PUBLIC_URL (`localhost` for passkeys, which browsers refuse on an IP address).
 */
export async function startCluster(
  count: number,
  extraEnv: Record<string, string> = {},
  starting?: (databaseUrl: string) => void,
  hostname = '127.0.0.1',
): Promise<Cluster> {
  const database = await postgres.createMigrated();
  const store = openStore(loadConfig({ DATABASE_URL: database.url }).database);
  await migrate(store);
  starting?.(database.url);
  const ports = await Promise.all(Array.from({ length: count }, () => freePort()));
  const publicUrl = `http://${hostname}:${ports[0]}`;
  const started = await Promise.allSettled(
    ports.map(async (port) => {
      const url = `http://127.0.0.1:${port}`;
      const env = { ...process.env, DATABASE_URL: database.url, PORT: String(port), HOST: '127.0.0.1', PUBLIC_URL: publicUrl, LOG_LEVEL: 'warn', ...extraEnv };
      const { process: child } = await startChild(`the instance at ${url}`, MAIN, ['serve'], env, answers(`${url}/_status`));
      return { url, process: child };
    }),
  );
  const instances = started.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
  const stop = async () => {
    await Promise.all(instances.map(({ process: child }) => stopChild(child)));
    await store.close();
    await database.drop();
  };
  const failed = started.find((result) => result.status === 'rejected');
  if (failed) {
    await stop(); // an instance left running would keep the test process from ever exiting
    throw failed.reason;
  }
  return {
    instances,
    publicUrl,
    store,
    createUser: async (username, options = {}) => void (await createPerson(store.db, username, options, Date.now())),
    createClient: (input = {}) =>
      createClient(
        store.db,
        {
          name: 'Cluster app',
          grantType: 'authorization_code',
          redirectUris: ['http://127.0.0.1:8765/callback'],
          confidential: false,
          trusted: false,
          requirePkce: false,
          scope: '',
          ...input,
        },
        Date.now(),
      ),
    close: stop,
  };
}
