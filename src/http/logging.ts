/**
 * How the server logs (SPEC §4.6): one line per answered request, and request loggers made
 * only when a line is written. Used by `buildApp` (src/app.ts).
 */
import { LogController, type FastifyBaseLogger, type FastifyReply, type FastifyRequest } from 'fastify';
import type { Bindings, ChildLoggerOptions, Logger } from 'pino';

/** One log line per request (SPEC §4.6), written when it is answered, instead of Fastify's two. */
export class OneLinePerRequest extends LogController {
  override incomingRequest(): void {}
  override requestCompleted(error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply): void {
    const line = { req: request, res: reply, responseTime: Math.round(reply.elapsedTime * 10) / 10 };
    if (error) reply.log.error({ ...line, err: error }, 'request errored');
    else reply.log.info(line, 'request completed');
  }
}

/**
 * A request's logger that makes pino's child logger (the request id bound to it) only when a
 * line is written: at LOG_LEVEL=warn most requests write none, and making the child costs a
 * measurable share of a bearer check (docs/performance.md). The lines are pino's own.
 */
export class RequestLogger {
  readonly #parent: Logger;
  readonly #bindings: Bindings;
  readonly #options: ChildLoggerOptions;
  /** The lowest level this request writes (its route's, else the server's). */
  readonly #threshold: number;
  #child: FastifyBaseLogger | undefined;
  constructor(parent: Logger, bindings: Bindings, options: ChildLoggerOptions) {
    this.#parent = parent;
    this.#bindings = bindings;
    this.#options = options;
    this.#threshold = parent.levels.values[this.level]!;
  }
  get level(): string {
    return this.#options.level ?? this.#parent.level;
  }
  #write(level: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace', line: unknown[]): void {
    if (this.#parent.levels.values[level]! < this.#threshold) return;
    const child = this.#made();
    (child[level] as (...line: unknown[]) => void).apply(child, line);
  }
  #made(): FastifyBaseLogger {
    return (this.#child ??= this.#parent.child(this.#bindings, this.#options));
  }
  child(bindings: Bindings, options?: ChildLoggerOptions): FastifyBaseLogger {
    return this.#made().child(bindings, options);
  }
  fatal(...line: unknown[]): void {
    this.#write('fatal', line);
  }
  error(...line: unknown[]): void {
    this.#write('error', line);
  }
  warn(...line: unknown[]): void {
    this.#write('warn', line);
  }
  info(...line: unknown[]): void {
    this.#write('info', line);
  }
  debug(...line: unknown[]): void {
    this.#write('debug', line);
  }
  trace(...line: unknown[]): void {
    this.#write('trace', line);
  }
  silent(): void {}
}
