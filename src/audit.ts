/**
 * The audit trail's writer (SPEC §4.6). The protocol code and the domain actions describe
 * each security event as an `AuditEvent` — who, what, from which address — and hand it to
 * `AppContext.audit`; this module stamps the time and the retention, stores it, and
 * lets the metrics count it. A domain action records its own event: its callers (the
 * pages, the command line) only say who they act for, as an `Actor`.
 *
 * Most events are recorded after the change they describe has committed. A failed write is
 * logged, never thrown: the change has happened, and the client must get the answer that
 * matches it. The events of the token operations — code issuance, code and device-code
 * exchange, client_credentials, refresh rotation, a client's revocation — are written
 * instead inside the transaction (SQLite) or statement (PostgreSQL) of their change
 * (`Audit.pending`): the event commits exactly when the change does — no issued token without
 * its event, no event for a rotation that lost its race — and the operation commits once
 * rather than twice. A failure to write such an event rolls the change back with it, so the
 * answer still matches what is stored.
 */
import type { Kysely } from 'kysely';
import type { Config } from './config.ts';
import { auditEventRow, insertAuditEvent, type AuditEvent, type AuditEventRow } from './store/audit-events.ts';
import type { Database } from './store/schema.ts';

/** Who makes a change: the signed-in administrator and the address of their request. */
export interface Actor {
  readonly userId: string | null;
  /** null: the command line. */
  readonly address: string | null;
}

/** Changes made with the `gatehouse` command: no user, no address. */
export const COMMAND_LINE: Actor = { userId: null, address: null };

/** An actor's part of an event about a change they made. */
export function madeBy(actor: Actor): Pick<AuditEvent, 'actorId' | 'address'> {
  return { actorId: actor.userId, address: actor.address };
}

export interface Audit {
  /** Records the event, after the change it describes has committed. Never throws. */
  (event: AuditEvent): Promise<void>;
  /** The event as a row for the transaction of its change; call `committed` once that transaction has committed. */
  pending(event: AuditEvent): PendingAuditEvent;
}

export interface PendingAuditEvent {
  readonly row: AuditEventRow;
  /** Counts the event in the metrics: only events whose change committed are counted. */
  committed(): void;
}

export interface AuditLogger {
  error(object: object, message: string): void;
}

export function auditTrail(db: Kysely<Database>, config: Config, now: () => number, log: AuditLogger, observe?: (event: AuditEvent) => void): Audit {
  const retentionMs = config.auditRetentionDays * 86_400_000;
  const stamped = (event: AuditEvent) => {
    const at = now();
    return auditEventRow(event, at, at + retentionMs);
  };
  const record = async (event: AuditEvent) => {
    observe?.(event);
    try {
      await insertAuditEvent(db, stamped(event));
    } catch (error) {
      log.error({ err: error, audit: event.type }, 'could not record an audit event');
    }
  };
  return Object.assign(record, {
    pending: (event: AuditEvent): PendingAuditEvent => ({ row: stamped(event), committed: () => observe?.(event) }),
  });
}

// The trail as its readers (the admin page, `gatehouse audit`) ask for it.
export { AUDIT_EVENT_TYPES, isAuditEventType, listAuditEvents, type AuditFilter } from './store/audit-events.ts';
