/**
 * Shutdown lets the route handlers under way finish before the database closes (SPEC §2:
 * SIGTERM finishes in-flight requests). The server stops listening and waits for its open
 * connections, but a request whose client hung up is no connection any more while its
 * handler may still be reading or writing: without this, the store closed under it and the
 * handler failed with "driver has already been destroyed".
 */
import type { FastifyBaseLogger, FastifyInstance, RouteHandlerMethod } from 'fastify';

/** The longest shutdown waits for handlers; one still running then is logged and cut off. */
const GRACE_MS = 10_000;

/**
 * Counts the handlers of every route added after this call, and on close (before the hooks
 * added earlier, the context's among them: onClose hooks run last-added first) waits until
 * none is running, at most GRACE_MS.
 */
export function finishHandlersOnClose(app: FastifyInstance, log: FastifyBaseLogger): void {
  let running = 0;
  let settledAll: (() => void) | null = null;
  const settle = () => {
    running--;
    if (running === 0) settledAll?.();
  };
  app.addHook('onRoute', (route) => {
    const handler = route.handler as (...args: unknown[]) => unknown;
    // A plain function, not an async one: the count costs no promise of its own per request.
    route.handler = function (this: FastifyInstance, ...args: unknown[]) {
      running++;
      let answer: unknown;
      try {
        answer = handler.apply(this, args);
      } catch (error) {
        settle();
        throw error;
      }
      if (answer instanceof Promise) answer.then(settle, settle);
      else settle();
      return answer;
    } as RouteHandlerMethod;
  });
  app.addHook('onClose', async () => {
    if (running === 0) return;
    const started = running;
    const timedOut = await new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(true), GRACE_MS);
      settledAll = () => {
        clearTimeout(timer);
        resolve(false);
      };
    });
    if (timedOut) log.warn({ handlers: running, waited_ms: GRACE_MS }, 'shutting down with handlers still running');
    else log.info({ handlers: started }, 'the handlers under way have finished');
  });
}
