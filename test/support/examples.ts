/**
 * The example applications (examples/*) as `npm run example…` starts them, against a test
 * server, with Gatehouse's settings in their environment so that they register themselves
 * through the command line.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { answers, databaseUrl, startChild, stopChild, type Child } from './processes.ts';
import { freePort } from './ports.ts';
import type { TestServer } from './server.ts';

export interface Example extends Child {
  /** `http://localhost:<port>`, where the example wants to be visited. */
  origin: string;
  dataDir: string;
}

/** Starts `examples/<name>/server.ts` and waits until `readyPath` answers. */
export async function startExample(server: TestServer, name: string, readyPath = '/'): Promise<Example> {
  const port = await freePort();
  const dataDir = mkdtempSync(join(tmpdir(), 'gatehouse-example-'));
  const script = fileURLToPath(new URL(`../../examples/${name}/server.ts`, import.meta.url));
  const env = {
    PATH: process.env.PATH,
    GATEHOUSE_URL: server.url,
    EXAMPLE_PORT: String(port),
    EXAMPLE_DATA_DIR: dataDir,
    DATABASE_URL: databaseUrl(server.config),
  };
  const origin = `http://localhost:${port}`;
  const started = await startChild(`the example ${name}`, script, [], env, answers(`${origin}${readyPath}`));
  return { origin, dataDir, ...started };
}

export async function stopExample(example: Example): Promise<void> {
  await stopChild(example.process);
  rmSync(example.dataDir, { recursive: true, force: true });
}
