/** `gatehouse resource …`: register, list and delete resource servers. */
import { COMMAND_LINE } from '../audit.ts';
import { findResourceNamed, listResources, parseScopeDefinition, registerResource, removeResource } from '../clients/resources.ts';
import { UsageError, command, noArguments, usageError, type Command } from './command.ts';

const create: Command = command({
  words: 'resource create',
  usage: '--uri <uri> --name <n> [--scope "<name>=<description>" …]',
  help: 'registers a resource server; prints its introspection client (secret once)',
  options: { uri: { type: 'string' }, name: { type: 'string' }, scope: { type: 'string', multiple: true } },
  async run(ctx, args, options, print) {
    noArguments(args);
    if (options.uri === undefined || options.name === undefined) throw usageError(create);
    const scopes = (options.scope ?? []).map(parseScopeDefinition);
    const { resource, secret } = await registerResource(ctx, { uri: options.uri, name: options.name, scopes }, COMMAND_LINE);
    print(
      { uri: resource.uri, client_id: resource.client_id, client_secret: secret },
      `Registered resource server "${resource.name}" at ${resource.uri}.\nIts introspection client:\nclient_id: ${resource.client_id}\nclient_secret: ${secret}\n(The secret is shown only once: store it now.)`,
    );
    return 0;
  },
});

const list = command({
  words: 'resource list',
  async run(ctx, args, _options, print) {
    noArguments(args);
    const resources = await listResources(ctx);
    const json = resources.map((r) => ({ uri: r.uri, name: r.name, builtin: r.builtin, client_id: r.client_id, scopes: r.scopes }));
    print(json, resources.map((r) => `${r.uri}\t${r.name}${r.builtin ? '\t(built in)' : ''}\t${r.scopes.map((s) => s.name).join(' ') || '-'}`).join('\n'));
    return 0;
  },
});

const remove: Command = command({
  words: 'resource delete',
  usage: '<uri>',
  help: 'also revokes every grant for it and removes its scopes',
  async run(ctx, args, _options, print) {
    const [uri, ...extra] = args;
    if (uri === undefined || extra.length > 0) throw usageError(remove);
    const resource = await findResourceNamed(ctx, uri);
    if (!resource) throw new UsageError(`no resource server with the URI ${uri}`);
    await removeResource(ctx, resource, COMMAND_LINE);
    print({ uri: resource.uri, deleted: true }, `Deleted resource server ${resource.uri}; every grant for it is revoked.`);
    return 0;
  },
});

export const RESOURCE_COMMANDS: readonly Command[] = [create, list, remove];
