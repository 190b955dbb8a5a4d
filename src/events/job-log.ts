/**
 * How a job that runs again and again — a queue's deliveries, the re-check of open sockets, the
 * fan-out's reads on SQLite — logs its failures: an outage of the database once when it begins
 * and once when it ends, not at every run while it lasts (twice a second, for the fan-out);
 * any other failure is an error each time.
 */
import { databaseUnavailable } from '../store/database.ts';

export interface JobLogger {
  warn(object: object, message: string): void;
  error(object: object, message: string): void;
}

/** The log of `job`'s runs: `failed` after each that failed, `succeeded` after each that did not. */
export function jobLog(log: JobLogger, job: string): { failed(error: Error): void; succeeded(): void } {
  let databaseDown = false;
  return {
    failed(error) {
      const unavailable = databaseUnavailable(error);
      if (unavailable === null) return log.error({ err: error }, `${job} failed`);
      if (!databaseDown) log.warn({ reason: unavailable.reason }, `${job}: the database is unavailable; trying again`);
      databaseDown = true;
    },
    succeeded() {
      if (databaseDown) log.warn({}, `${job}: the database is back`);
      databaseDown = false;
    },
  };
}
