/** `gatehouse scope …`: create, list, describe and delete the scopes of resource servers. */
import { COMMAND_LINE } from '../audit.ts';
import { createScope, describeScope, findResourceNamed, listAllScopes, removeScope } from '../clients/resources.ts';
import { UsageError, command, noArguments, oneArgument, usageError, type Command } from './command.ts';

const create: Command = command({
  words: 'scope create',
  usage: '<name> --resource <uri> --description <text>',
  options: {
    resource: { type: 'string', help: 'the URI of the resource server it belongs to' },
    description: { type: 'string', help: 'what it allows, in plain words, for consent pages' },
  },
  async run(ctx, args, options, print) {
    const [name, ...extra] = args;
    if (name === undefined || extra.length > 0 || options.resource === undefined || options.description === undefined) throw usageError(create);
    const resource = await findResourceNamed(ctx, options.resource);
    if (!resource) throw new UsageError(`no resource server with the URI ${options.resource}`);
    await createScope(ctx, resource, { name, description: options.description.trim() }, COMMAND_LINE);
    print({ name, resource: resource.uri, description: options.description.trim() }, `Created scope ${name} on ${resource.uri}.`);
    return 0;
  },
});

const list = command({
  words: 'scope list',
  async run(ctx, args, _options, print) {
    noArguments(args);
    const scopes = await listAllScopes(ctx);
    print(scopes, scopes.map((s) => `${s.name}\t${s.resource}\t${s.description}`).join('\n'));
    return 0;
  },
});

const update: Command = command({
  words: 'scope update',
  usage: '<name> --description <text>',
  help: 'the words the consent page shows for it; built-in scopes too',
  options: { description: { type: 'string', help: 'the new words consent pages show for it' } },
  async run(ctx, args, options, print) {
    const name = oneArgument(update, args);
    if (options.description === undefined) throw usageError(update);
    const description = options.description.trim();
    await describeScope(ctx, { name, description }, COMMAND_LINE);
    print({ name, description }, `Scope ${name} now reads: ${description}`);
    return 0;
  },
});

const remove: Command = command({
  words: 'scope delete',
  usage: '<name>',
  help: 'also revokes the grants that hold it (built-in scopes stay)',
  async run(ctx, args, _options, print) {
    const name = oneArgument(remove, args);
    await removeScope(ctx, name, COMMAND_LINE);
    print({ name, deleted: true }, `Deleted scope ${name}; the grants that held it are revoked.`);
    return 0;
  },
});

export const SCOPE_COMMANDS: readonly Command[] = [create, list, update, remove];
