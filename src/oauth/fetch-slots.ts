/**
 * Who may fetch a metadata document now (SPEC §4.8: "fetched fairly"). Every document URL
 * not in a cache is a fetch that a stranger starts, and a hostile host can hold each one for
 * the whole deadline; so fetches run in a few slots, handed out so that nobody can take
 * them all:
 *
 * - at most `atOnce` run at once (sockets and TLS handshakes stay bounded);
 * - at most `perHost` of them to one host, so a slow or hostile host holds only its own and
 *   the others' fetches go on;
 * - a requesting address has at most `perAddress` fetches running or waiting, so one
 *   address's flood is refused (busy) instead of queueing in front of everyone;
 * - a fetch that finds no slot waits at most `maxWaitMs`, in a queue of at most `maxWaiting`;
 *   a freed slot goes to the waiter whose address runs the fewest fetches, the longest
 *   waiting first among those.
 *
 * Hand-written: p-limit and p-queue bound one queue, not limits by host and by address at
 * once with a fair pick between waiters.
 */

export const BUSY = Symbol('busy');

export interface FetchSlotLimits {
  readonly atOnce: number;
  readonly perHost: number;
  readonly perAddress: number;
  readonly maxWaiting: number;
  readonly maxWaitMs: number;
}

interface Waiter {
  readonly host: string;
  readonly address: string;
  readonly start: () => void;
}

const increment = (counts: Map<string, number>, key: string) => counts.set(key, (counts.get(key) ?? 0) + 1);
function decrement(counts: Map<string, number>, key: string): void {
  const count = (counts.get(key) ?? 0) - 1;
  if (count > 0) counts.set(key, count);
  else counts.delete(key); // keys of addresses and hosts no longer fetching are not kept
}

export class FetchSlots {
  readonly #limits: FetchSlotLimits;
  #running = 0;
  /** Fetches running, by host. */
  readonly #hosts = new Map<string, number>();
  /** Fetches running, by requesting address. */
  readonly #runningFor = new Map<string, number>();
  /** Fetches running or waiting, by requesting address. */
  readonly #heldBy = new Map<string, number>();
  readonly #waiting: Waiter[] = [];

  constructor(limits: FetchSlotLimits) {
    this.#limits = limits;
  }

  /** Runs `task` in a slot for `host` on behalf of `address`; BUSY when it gets none (see above). */
  async run<T>(host: string, address: string, task: () => Promise<T>): Promise<T | typeof BUSY> {
    if ((this.#heldBy.get(address) ?? 0) >= this.#limits.perAddress) return BUSY;
    increment(this.#heldBy, address);
    try {
      if (this.#free(host)) this.#take(host, address);
      else if (!(await this.#wait(host, address))) return BUSY;
      try {
        return await task();
      } finally {
        this.#release(host, address);
      }
    } finally {
      decrement(this.#heldBy, address);
    }
  }

  #free(host: string): boolean {
    return this.#running < this.#limits.atOnce && (this.#hosts.get(host) ?? 0) < this.#limits.perHost;
  }

  #take(host: string, address: string): void {
    this.#running++;
    increment(this.#hosts, host);
    increment(this.#runningFor, address);
  }

  #release(host: string, address: string): void {
    this.#running--;
    decrement(this.#hosts, host);
    decrement(this.#runningFor, address);
    this.#handOut();
  }

  /** Resolves true once a slot was taken for it, false when none came within maxWaitMs (or the queue is full). */
  #wait(host: string, address: string): Promise<boolean> {
    if (this.#waiting.length >= this.#limits.maxWaiting) return Promise.resolve(false);
    return new Promise((resolve) => {
      const waiter: Waiter = {
        host,
        address,
        start: () => {
          clearTimeout(timer);
          resolve(true);
        },
      };
      const timer = setTimeout(() => {
        this.#waiting.splice(this.#waiting.indexOf(waiter), 1);
        resolve(false);
      }, this.#limits.maxWaitMs);
      this.#waiting.push(waiter);
    });
  }

  /** Gives free slots to waiters: among those whose host has room, the address running the fewest first. */
  #handOut(): void {
    while (this.#running < this.#limits.atOnce) {
      let chosen = -1;
      for (const [index, waiter] of this.#waiting.entries()) {
        if ((this.#hosts.get(waiter.host) ?? 0) >= this.#limits.perHost) continue;
        if (chosen === -1 || (this.#runningFor.get(waiter.address) ?? 0) < (this.#runningFor.get(this.#waiting[chosen]!.address) ?? 0)) chosen = index;
      }
      if (chosen === -1) return;
      const [waiter] = this.#waiting.splice(chosen, 1);
      this.#take(waiter!.host, waiter!.address);
      waiter!.start();
    }
  }
}
