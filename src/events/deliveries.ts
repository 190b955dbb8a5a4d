/**
 * The loop that works off a queue in the database — back-channel logouts (identity/
 * backchannel-logout.ts) and mail (mail.ts): every server instance delivers what is due,
 * woken at once when it queued something itself, and on a short poll for what others queued
 * (the command line, which delivers nothing) or left to retry. Which instance makes an
 * attempt is the queue's business (one conditional update claims a row); the loop only makes
 * sure that one pass runs at a time and that a wake during a pass is not lost.
 */
import type { ContextLogger, Deliveries } from '../context.ts';
import { jobLog } from './job-log.ts';

/** How often an instance looks for deliveries it was not woken for. */
const POLL_MS = 2000;

/**
 * `deliverDue` delivers everything due (a pass); `what` names the queue in the log line of a
 * pass that failed.
 */
export function deliveryLoop(what: string, deliverDue: () => Promise<void>, log: ContextLogger): Deliveries {
  let timer: NodeJS.Timeout | null = null;
  let running: Promise<void> | null = null;
  let again = false;
  const passes = jobLog(log, `${what} delivery`);

  function wake(): void {
    if (timer === null) return;
    if (running) {
      again = true;
      return;
    }
    running = deliverDue()
      .then(passes.succeeded, passes.failed)
      .finally(() => {
        running = null;
        if (again) {
          again = false;
          wake();
        }
      });
  }

  return {
    wake,
    start() {
      timer ??= setInterval(wake, POLL_MS).unref();
      wake();
    },
    async close() {
      if (timer) clearInterval(timer);
      timer = null;
      await running;
    },
  };
}

/**
 * Works off what `due` finds, a batch at a time, until a batch is short — or until a batch
 * of which this instance could claim nothing (other instances hold it all): looking again at
 * once would find the same rows. `deliver` makes a batch's attempts and says how many rows it claimed.
 */
export async function inBatches<Key>(batch: number, due: (limit: number) => Promise<Key[]>, deliver: (keys: Key[]) => Promise<number>): Promise<void> {
  for (;;) {
    const keys = await due(batch);
    const claimed = await deliver(keys);
    if (keys.length < batch || claimed === 0) return;
  }
}

/** Makes every attempt of a batch side by side, so one slow receiver holds up no other; how many were claimed. */
export async function sideBySide<Key>(keys: Key[], attempt: (key: Key) => Promise<boolean>): Promise<number> {
  return (await Promise.all(keys.map(attempt))).filter(Boolean).length;
}
