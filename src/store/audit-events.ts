/** The audit trail's rows: written one event at a time, read newest first with filters. */
import type { Kysely, Selectable } from 'kysely';
import { bigint, gated, type Gate } from './chained-writes.ts';
import { prepare } from './prepared.ts';
import type { AuditEventsTable, Database } from './schema.ts';

/**
 * Every kind of event the trail records; the admin page and the CLI filter by these names.
 * Every change of a person's factors is `second_factor_added` or `second_factor_removed`, its
 * detail's `factor` saying which (`app`, `passkey`), so one filter finds them all.
 */
export const AUDIT_EVENT_TYPES = [
  'login_succeeded',
  'login_failed',
  'logout',
  'second_factor_used',
  'second_factor_added',
  'second_factor_removed',
  'second_factor_reset',
  'recovery_codes_generated',
  'passkey_renamed',
  'passkey_sign_count_regressed',
  'backchannel_logout_delivered',
  'backchannel_logout_failed',
  'consent_granted',
  'code_issued',
  'device_authorization_requested',
  'device_approved',
  'device_denied',
  'user_code_failed',
  'token_issued',
  'token_refreshed',
  'token_revoked',
  'access_removed',
  'refresh_reuse_detected',
  'code_replay_detected',
  'user_created',
  'user_disabled',
  'user_enabled',
  'user_deleted',
  'user_promoted',
  'user_updated',
  'group_created',
  'group_deleted',
  'group_member_added',
  'group_member_removed',
  'client_created',
  'client_updated',
  'client_deleted',
  'client_secret_rotated',
  'resource_created',
  'resource_updated',
  'resource_deleted',
  'scope_created',
  'scope_updated',
  'scope_deleted',
  'client_registered',
  'client_recorded',
  'client_document_changed',
  'client_blocked',
  'client_unblocked',
  'client_disabled',
  'client_enabled',
  'key_created',
  'key_activated',
  'key_removed',
  'key_revoked',
  'assertion_refused',
  'issuer_created',
  'issuer_deleted',
  'connection_created',
  'connection_updated',
  'connection_disabled',
  'connection_enabled',
  'connection_deleted',
  'upstream_login',
  'upstream_login_failed',
  'identity_linked',
  'identity_unlinked',
  'mail_sent',
  'mail_failed',
  'password_reset_requested',
  'password_reset',
  'password_changed',
  'email_verification_requested',
  'email_verified',
  'email_change_requested',
  'email_changed',
  'id_jag_issued',
  'provider_token_issued',
  'provider_refresh_refused',
] as const;
export type AuditEventType = (typeof AUDIT_EVENT_TYPES)[number];

/**
 * Types no longer written, which older rows still carry (adding and removing a passkey were
 * `passkey_added` and `passkey_removed` before they became second-factor changes like the
 * app's): a filter may still name them, to find those rows; nothing records them.
 */
export const RETIRED_AUDIT_EVENT_TYPES = ['passkey_added', 'passkey_removed'] as const;
export type RetiredAuditEventType = (typeof RETIRED_AUDIT_EVENT_TYPES)[number];

/** A type a filter may name: one the trail records, or a retired one older rows carry. */
export function isAuditEventType(value: string): value is AuditEventType | RetiredAuditEventType {
  return (AUDIT_EVENT_TYPES as readonly string[]).includes(value) || (RETIRED_AUDIT_EVENT_TYPES as readonly string[]).includes(value);
}

/** Plain facts about an event. Typed as scalars so that nothing structured (a request, a token response) slips in whole. */
export type AuditDetail = Readonly<Record<string, string | number | boolean | null>>;

export interface AuditEvent {
  type: AuditEventType;
  /** The administrator who made a change (null: the command line, or not an admin change). */
  actorId?: string | null;
  /** The user the event is about. */
  userId?: string | null;
  /** The OAuth client the event is about. */
  clientId?: string | null;
  /** The client address of the request that caused it (null: the command line). */
  address?: string | null;
  detail?: AuditDetail;
}

/** An event as stored: stamped with its time and the end of its retention. */
export type AuditEventRow = Omit<Selectable<AuditEventsTable>, 'id'>;

export function auditEventRow(event: AuditEvent, at: number, expiresAt: number): AuditEventRow {
  return {
    at,
    type: event.type,
    actor_id: event.actorId ?? null,
    user_id: event.userId ?? null,
    client_id: event.clientId ?? null,
    address: event.address ?? null,
    detail: event.detail === undefined ? null : JSON.stringify(event.detail),
    expires_at: expiresAt,
  };
}

/**
 * The INSERT of an audit row; on PostgreSQL, `gate` makes it part of the statement of the
 * change it describes (chained-writes.ts), so the row is written exactly when the change is.
 */
export const insertAuditRowQuery = (db: Kysely<Database>, p: AuditEventRow, gate?: Gate) =>
  db
    .insertInto('audit_events')
    .columns(['at', 'type', 'actor_id', 'user_id', 'client_id', 'address', 'detail', 'expires_at'])
    .expression(
      gated(
        db.selectNoFrom((eb) => [
          bigint(eb, p.at).as('at'),
          eb.val(p.type).as('type'),
          eb.val(p.actor_id).as('actor_id'),
          eb.val(p.user_id).as('user_id'),
          eb.val(p.client_id).as('client_id'),
          eb.val(p.address).as('address'),
          eb.val(p.detail).as('detail'),
          bigint(eb, p.expires_at).as('expires_at'),
        ]),
        gate,
      ),
    );

const insertAuditRow = prepare((db, p: AuditEventRow) => insertAuditRowQuery(db, p));

/**
 * An audit row's fields under names of their own, for the arguments of a statement that
 * writes other rows too: a code's `expires_at` is not its audit row's.
 */
export type AuditArgs = { [K in keyof AuditEventRow as `audit_${K}`]: AuditEventRow[K] };

export function auditArgs(row: AuditEventRow): AuditArgs {
  const { at, type, actor_id, user_id, client_id, address, detail, expires_at } = row;
  return {
    audit_at: at,
    audit_type: type,
    audit_actor_id: actor_id,
    audit_user_id: user_id,
    audit_client_id: client_id,
    audit_address: address,
    audit_detail: detail,
    audit_expires_at: expires_at,
  };
}

/** The audit row of such a statement, as `insertAuditRowQuery` takes it. */
export function auditRowOf(p: AuditArgs): AuditEventRow {
  return {
    at: p.audit_at,
    type: p.audit_type,
    actor_id: p.audit_actor_id,
    user_id: p.audit_user_id,
    client_id: p.audit_client_id,
    address: p.audit_address,
    detail: p.audit_detail,
    expires_at: p.audit_expires_at,
  };
}

/** Inserts the row, on `trx`'s connection when given: inside the transaction of the change it describes. */
export async function insertAuditEvent(db: Kysely<Database>, row: AuditEventRow, trx?: Kysely<Database>): Promise<void> {
  await insertAuditRow.execute(db, row, trx);
}

export interface AuditFilter {
  /** Events about this user, or made by them as an administrator. */
  userId?: string;
  clientId?: string;
  type?: AuditEventType | RetiredAuditEventType;
  /** Only events older than this id: the next page. */
  beforeId?: number;
  limit: number;
}

export interface AuditRow {
  id: number;
  at: number;
  type: string;
  actor_id: string | null;
  actor_username: string | null;
  user_id: string | null;
  username: string | null;
  client_id: string | null;
  client_name: string | null;
  address: string | null;
  detail: AuditDetail | null;
}

/** The newest events matching the filter, newest first, with the names of the users and clients they mention. */
export async function listAuditEvents(db: Kysely<Database>, filter: AuditFilter): Promise<AuditRow[]> {
  let query = db
    .selectFrom('audit_events as e')
    .leftJoin('users as u', 'u.id', 'e.user_id')
    .leftJoin('users as a', 'a.id', 'e.actor_id')
    .leftJoin('clients as c', 'c.id', 'e.client_id')
    .select([
      'e.id',
      'e.at',
      'e.type',
      'e.actor_id',
      'a.username as actor_username',
      'e.user_id',
      'u.username',
      'e.client_id',
      'c.name as client_name',
      'e.address',
      'e.detail',
    ])
    .orderBy('e.id', 'desc')
    .limit(filter.limit);
  const { userId, clientId, type, beforeId } = filter;
  if (userId !== undefined) query = query.where((eb) => eb.or([eb('e.user_id', '=', userId), eb('e.actor_id', '=', userId)]));
  if (clientId !== undefined) query = query.where('e.client_id', '=', clientId);
  if (type !== undefined) query = query.where('e.type', '=', type);
  if (beforeId !== undefined) query = query.where('e.id', '<', beforeId);
  const rows = await query.execute();
  return rows.map((row) => ({ ...row, detail: row.detail === null ? null : (JSON.parse(row.detail) as AuditDetail) }));
}
