/**
 * `gatehouse` as an operator runs it: the real command in a child process. For the
 * operations suites (audit, purge, crash safety), which share a database with a test
 * server or restart a server on the same database.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { Config } from '../../src/config.ts';

const MAIN = fileURLToPath(new URL('../../bin/gatehouse.js', import.meta.url));

export interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** The DATABASE_URL a command needs to work on this server's database. */
export function databaseUrl(config: Config): string {
  return config.database.kind === 'sqlite' ? `sqlite:${config.database.path}` : config.database.url;
}

/** Runs `gatehouse …` to completion with these settings, feeding it `input` on stdin if given. */
export function gatehouse(args: string[], env: Record<string, string>, input?: string): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [MAIN, ...args], {
      env: { PATH: process.env.PATH, ...env },
      timeout: 30_000,
      stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
    });
    child.stdin?.end(input);
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (chunk) => (stdout += chunk));
    child.stderr!.on('data', (chunk) => (stderr += chunk));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

export interface Serving {
  url: string;
  process: ChildProcess;
  /** Everything it printed so far (JSON log lines on stdout, the setup link on stderr). */
  output: string[];
  /** What it printed on stdout alone: the JSON log. */
  stdout: string[];
  /** Resolves with the exit code (null when killed by a signal). */
  exited: Promise<number | null>;
}

/**
 * Starts `gatehouse serve` and waits until /_status answers, for at most 90 seconds (starting
 * has taken over 20 on a loaded machine); one that does not come up is stopped, so that it
 * does not keep the test process from exiting.
 */
export async function serve(env: Record<string, string>): Promise<Serving> {
  const child = spawn(process.execPath, [MAIN, 'serve'], { env: { PATH: process.env.PATH, HOST: '127.0.0.1', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const output: string[] = [];
  const stdout: string[] = [];
  child.stdout!.on('data', (chunk) => (output.push(String(chunk)), stdout.push(String(chunk))));
  child.stderr!.on('data', (chunk) => output.push(String(chunk)));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const url = `http://127.0.0.1:${env.PORT}`;
  const up = answers(`${url}/_status`);
  for (const deadline = Date.now() + 90_000; Date.now() < deadline; await new Promise((resolve) => setTimeout(resolve, 100))) {
    if (child.exitCode !== null) throw new Error(`gatehouse serve exited with ${child.exitCode}: ${output.join('')}`);
    if (await up()) return { url, process: child, output, stdout, exited };
  }
  await stopChild(child);
  throw new Error(`gatehouse serve did not come up within 90 seconds: ${output.join('')}`);
}

/** A long-running node process a test started: an instance of Gatehouse, an example application. */
export interface Child {
  process: ChildProcess;
  /** Everything it printed so far. */
  output: string[];
}

/** Whether `url` answers 2xx within 5 seconds: a `ready` check for `startChild`. */
export const answers = (url: string) => async () => {
  try {
    return (await fetch(url, { signal: AbortSignal.timeout(5000) })).ok;
  } catch {
    return false; // not listening yet
  }
};

/**
 * Starts `node <script> <args>` with `env`, collecting what it prints, and waits until
 * `ready(output)` holds, checked every 100 ms for at most `seconds` (starting has taken over 20
 * seconds on a loaded machine). If it exits or is not ready in time it is stopped, and the
 * error carries its output: a child left running keeps the test process from ever exiting.
 */
export async function startChild(
  what: string,
  script: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  ready: (output: string) => boolean | Promise<boolean>,
  seconds = 90,
): Promise<Child> {
  const child = spawn(process.execPath, [script, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  const output: string[] = [];
  child.stdout!.on('data', (chunk) => output.push(String(chunk)));
  child.stderr!.on('data', (chunk) => output.push(String(chunk)));
  for (const deadline = Date.now() + seconds * 1000; Date.now() < deadline; await new Promise((resolve) => setTimeout(resolve, 100))) {
    if (child.exitCode !== null) throw new Error(`${what} exited with ${child.exitCode}: ${output.join('')}`);
    if (await ready(output.join(''))) return { process: child, output };
  }
  await stopChild(child);
  throw new Error(`${what} did not come up within ${seconds} seconds: ${output.join('')}`);
}

/** Stops a child (SIGTERM, then SIGKILL if it still runs 30 seconds later) and waits until it has exited. */
export async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const killer = setTimeout(() => child.kill('SIGKILL'), 30_000);
  await exited;
  clearTimeout(killer);
}
