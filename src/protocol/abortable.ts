/** `promise`, or a rejection with the signal's reason once `signal` aborts, whichever comes first: how a deadline is put on work that takes none. */
export function abortable<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise((resolve, reject) => {
    signal.addEventListener('abort', () => reject(signal.reason), { once: true });
    promise.then(resolve, reject);
  });
}
