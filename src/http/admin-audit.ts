/**
 * `/admin/audit`: the audit trail for administrators (SPEC §4.6), newest first, filtered
 * by user, client and event type, a page at a time. Registered inside the admin console's
 * plugin (src/http/admin.ts), whose guard admits enabled administrators only.
 */
import type { FastifyInstance } from 'fastify';
import { findUserNamed } from '../accounts/users.ts';
import { PAGE_SIZE } from '../clients/clients.ts';
import { AUDIT_EVENT_TYPES, isAuditEventType, listAuditEvents, type AuditFilter } from '../audit.ts';
import type { AppContext } from '../context.ts';
import { isClientId, isUuid } from '../oauth/client-auth.ts';
import { single, type RawParams } from '../protocol/params.ts';
import { formatTime, page } from './pages.ts';

export default async function auditRoutes(app: FastifyInstance, { ctx }: { ctx: AppContext }) {
  app.get('/admin/audit', page, async (request, reply) => {
    const query = request.query as RawParams;
    const values = {
      user: (single(query, 'user') ?? '').trim().slice(0, 320),
      client: (single(query, 'client') ?? '').trim(), // no cut: a metadata document's client ID is a URL of up to 2000 characters
      type: single(query, 'type') ?? '',
    };
    const before = single(query, 'before');
    const filter: AuditFilter = { limit: PAGE_SIZE + 1 };
    const problems: string[] = [];
    if (values.user !== '') {
      // A user ID finds the events of a person who was deleted, too (no username is a UUID).
      const user = isUuid(values.user) ? { id: values.user } : await findUserNamed(ctx, values.user);
      if (user) filter.userId = user.id;
      else problems.push(`There is no user named "${values.user}".`);
    }
    if (values.client !== '') {
      if (isClientId(values.client)) filter.clientId = values.client;
      else problems.push('A client ID is a UUID such as 3f0c2a1e-…, or the https URL of a client ID metadata document.');
    }
    if (values.type !== '') {
      if (isAuditEventType(values.type)) filter.type = values.type;
      else problems.push('Choose an event type from the list.');
    }
    if (before !== undefined && /^\d{1,15}$/.test(before)) filter.beforeId = Number(before);

    const rows = problems.length > 0 ? [] : await listAuditEvents(ctx.db, filter);
    const more = rows.length > PAGE_SIZE;
    const events = rows.slice(0, PAGE_SIZE).map((e) => ({
      id: e.id,
      at: formatTime(e.at),
      iso: new Date(e.at).toISOString(),
      type: e.type,
      user: e.username ?? e.user_id,
      client: e.client_name ?? e.client_id,
      clientId: e.client_id,
      actor: e.actor_username ?? e.actor_id,
      address: e.address ?? 'command line',
      detail: Object.entries(e.detail ?? {}).map(([name, value]) => `${name}: ${value}`),
    }));
    const next = more ? `/admin/audit?${new URLSearchParams({ ...pruned(values), before: String(events.at(-1)!.id) })}` : null;
    return reply
      .code(problems.length > 0 ? 400 : 200)
      .view('admin-audit.eta', { title: 'Audit trail', wide: true, values, types: AUDIT_EVENT_TYPES, problems, events, next });
  });
}

/** The filters that are set, for the next page's link. */
function pruned(values: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(values).filter(([, value]) => value !== ''));
}
