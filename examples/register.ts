/**
 * How the examples register themselves with Gatehouse on first start: through Gatehouse's own
 * command line, as an operator would by hand, remembering the answer in a file of their data
 * directory. The command line reads Gatehouse's settings (DATABASE_URL) from the example's
 * environment, so an example runs from the directory Gatehouse runs in.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const REPOSITORY = fileURLToPath(new URL('..', import.meta.url));

/** What `gatehouse client create --json` printed, with the redirect URL it was registered for. */
export interface Registration {
  client_id: string;
  /** Only for a confidential client. */
  client_secret?: string;
  redirect_uri: string;
}

/** Runs Gatehouse's command line in the repository, with this process's environment. */
async function gatehouse(...args: string[]): Promise<unknown> {
  const { stdout } = await promisify(execFile)(process.execPath, [join(REPOSITORY, 'bin/gatehouse.js'), ...args, '--json'], { cwd: REPOSITORY });
  return JSON.parse(stdout);
}

/**
 * The registration remembered in `<dataDir>/client.json` while Gatehouse still knows that
 * client, else a new one: `client create` with `createArgs` (which must register `redirectUri`).
 */
export async function registration(dataDir: string, redirectUri: string, createArgs: string[]): Promise<Registration> {
  const file = join(dataDir, 'client.json');
  let remembered: Registration | null = null;
  try {
    remembered = JSON.parse(readFileSync(file, 'utf8')) as Registration;
  } catch {
    // first start
  }
  if (remembered?.redirect_uri === redirectUri) {
    const clients = (await gatehouse('client', 'list')) as Registration[];
    if (clients.some((client) => client.client_id === remembered.client_id)) return remembered;
    console.log('The remembered client is not registered in this Gatehouse any more: registering again.');
  }
  const created = (await gatehouse('client', 'create', ...createArgs)) as Omit<Registration, 'redirect_uri'>;
  mkdirSync(dataDir, { recursive: true });
  // A confidential client's secret is in here: readable by its owner only.
  writeFileSync(file, `${JSON.stringify({ ...created, redirect_uri: redirectUri }, null, 2)}\n`, { mode: 0o600 });
  console.log(`Registered the example with Gatehouse as client ${created.client_id}.`);
  return { ...created, redirect_uri: redirectUri };
}

/** Says why the registration failed, and what to do instead, then exits. */
export function registrationFailed(error: unknown, redirectUri: string): never {
  const { stderr } = error as { stderr?: string };
  console.error(`Could not register the example with Gatehouse: ${stderr?.trim() || (error as Error).message}`);
  console.error(
    'Run this where Gatehouse runs, with the same DATABASE_URL, or set EXAMPLE_CLIENT_ID to a client registered with the redirect URL ' + redirectUri,
  );
  process.exit(1);
}
