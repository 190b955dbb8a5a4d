/** `promise`, or a rejection with the signal's reason once `signal` aborts, whichever comes first: how a deadline is put on work that takes none. */
export function abortable<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason as Error);
  let onAbort: () => void = () => {};
  const aborted = new Promise<never>((_, reject) => {
    onAbort = () => reject(signal.reason as Error);
    signal.addEventListener('abort', onAbort, { once: true });
  });
  // Once settled, the listener goes: a signal that outlives the work does not keep it.
  return Promise.race([promise, aborted]).finally(() => signal.removeEventListener('abort', onAbort));
}
