/** `gatehouse audit`: the newest security events matching the filters, newest first. */
import { findUserNamed } from '../accounts/users.ts';
import { AUDIT_EVENT_TYPES, isAuditEventType, listAuditEvents, type AuditFilter } from '../audit.ts';
import { isClientId, isUuid } from '../oauth/client-auth.ts';
import { UsageError, command, noArguments } from './command.ts';

export const AUDIT = command({
  words: 'audit',
  usage: '[--user <username or user ID>] [--client <client_id>] [--type <event type>] [--limit <n>]',
  help: 'the newest security events (default 50, newest first)',
  // --client is repeatable for `issuer create`; options mean the same for every command (cli/index.ts), so here one is allowed.
  options: {
    user: { type: 'string', help: 'events about this user, or made by them as an administrator' },
    client: { type: 'string', multiple: true, help: 'events about this client: its client ID (once)' },
    type: { type: 'string', help: 'events of this type (gatehouse --help lists the types)' },
    limit: { type: 'string', help: 'how many, from 1 to 99999 (default 50)' },
  },
  async run(ctx, args, options, print) {
    noArguments(args);
    const filter: AuditFilter = { limit: 50 };
    if (options.limit !== undefined) {
      if (!/^\d{1,5}$/.test(options.limit) || Number(options.limit) < 1) throw new UsageError('--limit must be a whole number from 1 to 99999');
      filter.limit = Number(options.limit);
    }
    if (options.type !== undefined) {
      if (!isAuditEventType(options.type)) throw new UsageError(`unknown event type "${options.type}"; the types are ${AUDIT_EVENT_TYPES.join(', ')}`);
      filter.type = options.type;
    }
    if (options.user !== undefined) {
      // A user ID finds the events of a person who was deleted, too (no username is a UUID).
      const user = isUuid(options.user) ? { id: options.user } : await findUserNamed(ctx, options.user);
      if (!user) throw new UsageError(`no user named ${options.user}`);
      filter.userId = user.id;
    }
    const [client, ...more] = options.client ?? [];
    if (more.length > 0) throw new UsageError('--client may be given once');
    if (client !== undefined) {
      if (!isClientId(client)) throw new UsageError(`${client} is not a client ID: give a UUID or the https URL of a client ID metadata document`);
      filter.clientId = client;
    }
    const events = await listAuditEvents(ctx.db, filter);
    const json = events.map((e) => ({
      id: e.id,
      at: new Date(e.at).toISOString(),
      type: e.type,
      actor_id: e.actor_id,
      actor: e.actor_username,
      user_id: e.user_id,
      username: e.username,
      client_id: e.client_id,
      client_name: e.client_name,
      address: e.address,
      detail: e.detail,
    }));
    const line = (e: (typeof json)[number]) =>
      [
        e.at,
        e.type,
        (e.username ?? e.user_id) ? `user=${e.username ?? e.user_id}` : null,
        e.client_id ? `client=${e.client_id}` : null,
        (e.actor ?? e.actor_id) ? `by=${e.actor ?? e.actor_id}` : null,
        `from=${e.address ?? 'command-line'}`,
        ...Object.entries(e.detail ?? {}).map(([name, value]) => `${name}=${value}`),
      ]
        .filter((part) => part !== null)
        .join('  ');
    print(json, json.map(line).join('\n') || 'No matching events.');
    return 0;
  },
});
