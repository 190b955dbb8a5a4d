/**
 * Prometheus metrics (SPEC §4.6), served at `GET /metrics`. One registry per app, so that
 * several apps in one process (the tests) keep separate counts. Protocol events are
 * counted from the audit trail's events, so the counters and the trail cannot disagree.
 *
 * A scrape only reads what is already in memory. Table sizes take a scan of every table, so
 * they are counted in the background (`countTables`, scheduled by http/ops.ts) and a scrape
 * reports the last count: many scrapes at once cost the database nothing.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { AuditEvent } from './store/audit-events.ts';
import type { Store } from './store/database.ts';
import type { PurgeCounts } from './store/purge.ts';
import { countTableRows } from './store/stats.ts';

export interface Metrics {
  /** The exposition format's media type, and the metrics in it: what `GET /metrics` answers. */
  readonly contentType: string;
  scrape(): Promise<string>;
  /**
   * What counts the finished requests of one method and route: `route` is the route pattern,
   * never the raw URL (which may carry a code). Taken once per route, so that a request costs
   * no label objects of its own.
   */
  requests(method: string, route: string): (status: number, seconds: number) => void;
  /** An error answered to a client, by its OAuth error code. */
  failure(error: string, status: number): void;
  /** A security event, as recorded in the audit trail. */
  event(event: AuditEvent): void;
  /** `reason`: the revocation's (context.ts `RevocationReason`), as the label's value. */
  grantsRevoked(count: number, reason: string): void;
  /** One scheduled or manual purge run: its counts, or null when another instance held the lock. */
  purge(counts: PurgeCounts | null, failed?: boolean): void;
  /** Counts the rows of every table now, for the scrapes until the next count. */
  countTables(): Promise<void>;
}

export function createMetrics(store: Store): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const registers = [registry];

  const requests = new Counter({
    name: 'gatehouse_http_requests_total',
    help: 'HTTP requests answered, by route and status',
    labelNames: ['method', 'route', 'status'],
    registers,
  });
  const latency = new Histogram({
    name: 'gatehouse_http_request_duration_seconds',
    help: 'Time to answer an HTTP request, by route',
    labelNames: ['method', 'route'],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers,
  });
  const failures = new Counter({
    name: 'gatehouse_request_failures_total',
    help: 'Requests refused or failed, by OAuth error code',
    labelNames: ['error', 'status'],
    registers,
  });
  const issued = new Counter({ name: 'gatehouse_tokens_issued_total', help: 'Token responses issued, by grant type', labelNames: ['grant_type'], registers });
  const refreshed = new Counter({
    name: 'gatehouse_tokens_refreshed_total',
    help: 'Refresh token rotations (including repeats within the grace window)',
    registers,
  });
  const revoked = new Counter({
    name: 'gatehouse_grants_revoked_total',
    help: 'Grants revoked (each takes all its tokens), by reason',
    labelNames: ['reason'],
    registers,
  });
  const reuse = new Counter({ name: 'gatehouse_refresh_reuse_detected_total', help: 'Refresh token reuse detections (each revokes a grant)', registers });
  const replays = new Counter({ name: 'gatehouse_code_replays_detected_total', help: 'Authorization code replays detected', registers });
  const logins = new Counter({ name: 'gatehouse_logins_total', help: 'Login attempts, by outcome', labelNames: ['outcome'], registers });
  const devices = new Counter({
    name: 'gatehouse_device_authorizations_total',
    help: 'Device authorization requests, and the answers people gave them',
    labelNames: ['outcome'],
    registers,
  });
  const userCodeFailures = new Counter({
    name: 'gatehouse_user_code_failures_total',
    help: 'Wrong, expired or used user codes entered at /device (throttled like failed logins)',
    registers,
  });
  const purgeRuns = new Counter({
    name: 'gatehouse_purge_runs_total',
    help: 'Purge runs, by outcome (skipped: another instance was purging)',
    labelNames: ['outcome'],
    registers,
  });
  const purged = new Counter({ name: 'gatehouse_purged_rows_total', help: 'Expired rows deleted by purge, by table', labelNames: ['table'], registers });
  // Counted by the store where statements leave for the database (store/database.ts); read at each scrape.
  let statementsReported = 0;
  new Counter({
    name: 'gatehouse_database_statements_total',
    help: 'Statements sent to the database, BEGIN and COMMIT included (on PostgreSQL, each is a round trip)',
    registers,
    collect() {
      const sent = store.statements();
      this.inc(sent - statementsReported);
      statementsReported = sent;
    },
  });
  const tableRows = new Gauge({
    name: 'gatehouse_table_rows',
    help: 'Rows per table, as of the last background count (at most a minute old)',
    labelNames: ['table'],
    registers,
  });

  const eventCounters: Partial<Record<AuditEvent['type'], (event: AuditEvent) => void>> = {
    token_issued: (event) => issued.inc({ grant_type: String(event.detail?.grant_type ?? 'unknown') }),
    token_refreshed: () => refreshed.inc(),
    refresh_reuse_detected: () => reuse.inc(),
    code_replay_detected: () => replays.inc(),
    login_succeeded: () => logins.inc({ outcome: 'succeeded' }),
    login_failed: () => logins.inc({ outcome: 'failed' }),
    device_authorization_requested: () => devices.inc({ outcome: 'requested' }),
    device_approved: () => devices.inc({ outcome: 'approved' }),
    device_denied: () => devices.inc({ outcome: 'denied' }),
    user_code_failed: () => userCodeFailures.inc(),
  };

  return {
    contentType: registry.contentType,
    scrape: () => registry.metrics(),
    requests(method, route) {
      const observe = latency.labels({ method, route }).observe;
      const counters = new Map<number, () => void>();
      return (status, seconds) => {
        let count = counters.get(status);
        if (count === undefined) counters.set(status, (count = requests.labels({ method, route, status }).inc));
        count();
        observe(seconds);
      };
    },
    failure: (error, status) => failures.inc({ error, status }),
    event: (event) => eventCounters[event.type]?.(event),
    grantsRevoked: (count, reason) => revoked.inc({ reason }, count),
    purge(counts, failed = false) {
      purgeRuns.inc({ outcome: failed ? 'failed' : counts === null ? 'skipped' : 'completed' });
      for (const [table, n] of Object.entries(counts ?? {})) if (n > 0) purged.inc({ table }, n);
    },
    async countTables() {
      for (const [table, n] of Object.entries(await countTableRows(store.db))) tableRows.set({ table }, n);
    },
  };
}
