/**
 * The example applications (examples/*) as `npm run example…` starts them, against a test
 * server, with Gatehouse's settings in their environment so that they register themselves
 * through the command line.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { databaseUrl } from './processes.ts';
import { freePort } from './ports.ts';
import type { TestServer } from './server.ts';

export interface Example {
  /** `http://localhost:<port>`, where the example wants to be visited. */
  origin: string;
  dataDir: string;
  /** Everything it printed so far. */
  output: string[];
  process: ChildProcess;
}

/** Starts `examples/<name>/server.ts` and waits until `readyPath` answers. */
export async function startExample(server: TestServer, name: string, readyPath = '/'): Promise<Example> {
  const port = await freePort();
  const dataDir = mkdtempSync(join(tmpdir(), 'gatehouse-example-'));
  const script = fileURLToPath(new URL(`../../examples/${name}/server.ts`, import.meta.url));
  const child = spawn(process.execPath, [script], {
    env: { PATH: process.env.PATH, GATEHOUSE_URL: server.url, EXAMPLE_PORT: String(port), EXAMPLE_DATA_DIR: dataDir, DATABASE_URL: databaseUrl(server.config) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output: string[] = [];
  child.stdout!.on('data', (chunk) => output.push(String(chunk)));
  child.stderr!.on('data', (chunk) => output.push(String(chunk)));
  const origin = `http://localhost:${port}`;
  for (let attempt = 0; ; attempt++) {
    if (child.exitCode !== null) throw new Error(`the example exited with ${child.exitCode}: ${output.join('')}`);
    try {
      if ((await fetch(`${origin}${readyPath}`)).ok) return { origin, dataDir, output, process: child };
    } catch {
      // not listening yet
    }
    if (attempt > 150) throw new Error(`the example did not come up: ${output.join('')}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

export async function stopExample(example: Example): Promise<void> {
  if (example.process.exitCode === null) {
    example.process.kill('SIGTERM');
    await once(example.process, 'exit');
  }
  rmSync(example.dataDir, { recursive: true, force: true });
}
