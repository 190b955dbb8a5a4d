/**
 * The audit trail's writer (SPEC §4.6). The protocol code and the admin actions describe
 * each security event as an `AuditEvent` — who, what, from which address — and hand it to
 * `OAuthContext.audit`; this module stamps the time and the retention, stores it, and
 * lets the metrics count it.
 *
 * An event is recorded after the change it describes has committed. A failed write is
 * logged, never thrown: the change has happened, and the client must get the answer that
 * matches it.
 */
import type { Kysely } from 'kysely';
import type { Config } from './config.ts';
import { insertAuditEvent, type AuditEvent } from './store/audit.ts';
import type { Database } from './store/schema.ts';

export type Audit = (event: AuditEvent) => Promise<void>;

export interface AuditLogger {
  error(object: object, message: string): void;
}

export function auditTrail(db: Kysely<Database>, config: Config, now: () => number, log: AuditLogger, observe?: (event: AuditEvent) => void): Audit {
  const retentionMs = config.auditRetentionDays * 86_400_000;
  return async (event) => {
    observe?.(event);
    const at = now();
    try {
      await insertAuditEvent(db, event, at, at + retentionMs);
    } catch (error) {
      log.error({ err: error, audit: event.type }, 'could not record an audit event');
    }
  };
}
