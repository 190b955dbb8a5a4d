import { setTimeout as sleep } from 'node:timers/promises';

/** Waits until `condition` holds (checked every 50 ms, for at most `seconds`); throws naming `what` if it never does. */
export async function until(what: string, condition: () => boolean | Promise<boolean>, seconds = 30): Promise<void> {
  for (const deadline = Date.now() + seconds * 1000; !(await condition()); await sleep(50)) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
  }
}
