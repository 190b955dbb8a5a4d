import { readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';

/**
 * Ports for the servers tests start, and above all for those started as a separate process,
 * which learns its port from PORT before it listens: the port must stay ours between the probe
 * and that process binding it (seconds on a loaded machine). So it is chosen below the
 * ephemeral range, where nothing that listens on port 0 (the tests' helper servers: metadata
 * documents, key sets, mocks) and no outgoing connection is ever given a port. Above it, a
 * test's server once answered on a port another file's server had taken meanwhile, while its
 * own exited with EADDRINUSE.
 */
const HIGHEST = belowEphemeral();
const LOWEST = Math.min(20_000, HIGHEST - 2_000);

/** The port just below the range the kernel hands out for port 0 (Linux's default: 32768–60999). */
function belowEphemeral(): number {
  try {
    const [low] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/);
    if (Number(low) > 3_000) return Number(low) - 1;
    throw new Error(`the ephemeral ports start at ${low}: no room below them for test servers`);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return 32_767; // not Linux: below the others' ranges too (49152 and up)
    throw error;
  }
}

/**
 * The test files of one run (test/run.ts) claim their ports in one directory, a file each,
 * created exclusively: two files never get the same port. Run alone, a file only has itself.
 */
const claimedInRun = process.env.GATEHOUSE_TEST_PORTS;
const claimedHere = new Set<number>();

function claim(port: number): boolean {
  if (claimedHere.has(port)) return false;
  if (claimedInRun) {
    try {
      writeFileSync(join(claimedInRun, String(port)), String(process.pid), { flag: 'wx' });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false;
      throw error;
    }
  }
  claimedHere.add(port);
  return true;
}

/** Whether nothing listens on `port` on loopback right now. */
function listenable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = createServer();
    probe.once('error', () => resolve(false));
    probe.listen(port, '127.0.0.1', () => probe.close(() => resolve(true)));
  });
}

/** A loopback port nobody listens on and no other test of the run will be given, for a server to start on. */
export async function freePort(): Promise<number> {
  for (;;) {
    const port = LOWEST + Math.floor(Math.random() * (HIGHEST - LOWEST + 1));
    if (claim(port) && (await listenable(port))) return port;
  }
}
