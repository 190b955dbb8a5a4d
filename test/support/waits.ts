/** Waiting in tests: for a condition, or for what a server believes to go stale. */
import { setTimeout as sleep } from 'node:timers/promises';
import { CLIENT_CACHE_TTL_MS } from '../../src/client-cache.ts';

/** Waits until `condition` holds (checked every 50 ms, for at most `seconds`); throws naming `what` if it never does. */
export async function until(what: string, condition: () => boolean | Promise<boolean>, seconds = 30): Promise<void> {
  for (const deadline = Date.now() + seconds * 1000; !(await condition()); await sleep(50)) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
  }
}

/**
 * Waits until a client cached before the call is no longer believed (CLIENT_CACHE_TTL_MS), with
 * a margin: a timer starts from the event loop's cached time, which can be behind the clock the
 * cache dates its entries by, so a timer of exactly the TTL may fire a little early.
 */
export function outlastClientCache(): Promise<void> {
  return sleep(CLIENT_CACHE_TTL_MS + 50);
}
