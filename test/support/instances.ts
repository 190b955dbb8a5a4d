/**
 * Several real `gatehouse serve` processes on one PostgreSQL database, as behind a load
 * balancer: they share PUBLIC_URL (the issuer) and differ only in the port they listen on.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { createAccount } from '../../src/accounts/users.ts';
import { loadConfig } from '../../src/config.ts';
import { createClient, type ClientInput, type RegisteredClient } from '../../src/clients/clients.ts';
import { migrate, openStore, type Store } from '../../src/store/database.ts';
import { postgres } from './backends.ts';
import { freePort } from './ports.ts';
import { PASSWORD } from './server.ts';

const MAIN = fileURLToPath(new URL('../../src/main.ts', import.meta.url));

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

/** How long an instance may take to answer /_status: on a loaded machine, starting `serve` has taken over 20 seconds. */
const START_SECONDS = 90;

async function waitUntilUp(url: string, child: ChildProcess, output: string[]): Promise<void> {
  for (const deadline = Date.now() + START_SECONDS * 1000; Date.now() < deadline; await new Promise((resolve) => setTimeout(resolve, 100))) {
    if (child.exitCode !== null) throw new Error(`instance exited with ${child.exitCode}: ${output.join('')}`);
    try {
      if ((await fetch(`${url}/_status`, { signal: AbortSignal.timeout(5000) })).ok) return;
    } catch {
      // not listening yet
    }
  }
  throw new Error(`instance at ${url} did not come up within ${START_SECONDS} seconds: ${output.join('')}`);
}

/** Stops the instances (SIGTERM, then SIGKILL if one is still running 30 seconds later): a live child would keep the test process from ever exiting. */
async function stopInstances(children: ChildProcess[]): Promise<void> {
  await Promise.all(
    children.map(async (child) => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
      child.kill('SIGTERM');
      const killer = setTimeout(() => child.kill('SIGKILL'), 30_000);
      await exited;
      clearTimeout(killer);
    }),
  );
}

/** `starting`: called with the database's URL as the instances start, to start other processes beside them. */
export async function startCluster(count: number, env: Record<string, string> = {}, starting?: (databaseUrl: string) => void): Promise<Cluster> {
  const database = await postgres.create();
  const store = openStore(loadConfig({ DATABASE_URL: database.url }).database);
  await migrate(store);
  starting?.(database.url);
  const ports = await Promise.all(Array.from({ length: count }, () => freePort()));
  const publicUrl = `http://127.0.0.1:${ports[0]}`;
  const children: ChildProcess[] = [];
  const started = Promise.all(
    ports.map(async (port) => {
      const output: string[] = [];
      const child = spawn(process.execPath, [MAIN, 'serve'], {
        env: { ...process.env, DATABASE_URL: database.url, PORT: String(port), HOST: '127.0.0.1', PUBLIC_URL: publicUrl, LOG_LEVEL: 'warn', ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      children.push(child);
      child.stdout!.on('data', (chunk) => output.push(String(chunk)));
      child.stderr!.on('data', (chunk) => output.push(String(chunk)));
      const url = `http://127.0.0.1:${port}`;
      await waitUntilUp(url, child, output);
      return { url, process: child };
    }),
  );
  const instances = await started.catch(async (error: unknown) => {
    await stopInstances(children);
    await store.close();
    await database.drop();
    throw error;
  });
  return {
    instances,
    publicUrl,
    store,
    createUser: async (username, options = {}) =>
      void (await createAccount(store.db, { username, email: `${username}@example.com`, password: PASSWORD, isAdmin: options.admin ?? false }, Date.now())),
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
    async close() {
      await stopInstances(children);
      await store.close();
      await database.drop();
    },
  };
}
