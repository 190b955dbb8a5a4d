/** `gatehouse resource …`: register, change, list and delete resource servers. */
import { COMMAND_LINE } from '../audit.ts';
import {
  ResourceInputError,
  changeTokenSettings,
  findResourceNamed,
  listResources,
  parseScopeDefinition,
  registerResource,
  removeResource,
  type ResourceView,
  type TokenSettingsInput,
} from '../clients/resources.ts';
import { UsageError, command, noArguments, oneArgument, usageError, type Command, type OptionValues } from './command.ts';

/** The options that set how a resource server's tokens are made, on `create` and `update`. */
const TOKEN_OPTIONS = {
  'token-format': { type: 'string', help: 'its access tokens: opaque (the default) or jwt' },
  'signing-alg': { type: 'string', help: 'how its JWT access tokens are signed: ES256 (the default) or RS256' },
  'access-token-ttl': { type: 'string', help: "its access tokens' lifetime, seconds (60-3600 for jwt, 60-86400 for opaque)" },
  'require-second-factor': { type: 'boolean', help: 'its tokens only for a login with a second factor (--no-…: any login)' },
  'require-dpop': { type: 'boolean', help: "its tokens only with a DPoP proof, bound to the client's key (--no-…: bearer tokens too)" },
} as const;
const TOKEN_USAGE = [
  '[--token-format opaque|jwt] [--signing-alg ES256|RS256]',
  '[--access-token-ttl <s>|default] [--[no-]require-second-factor] [--[no-]require-dpop]',
];

function tokenSettings(options: OptionValues<typeof TOKEN_OPTIONS>): TokenSettingsInput {
  return {
    tokenFormat: options['token-format'],
    signingAlg: options['signing-alg'],
    accessTokenTtl: options['access-token-ttl'],
    requireSecondFactor: options['require-second-factor'],
    requireDpop: options['require-dpop'],
  };
}

/** The flag each refused token setting came from. */
const FLAGS: Readonly<Record<string, string>> = { token_format: '--token-format', signing_alg: '--signing-alg', access_token_ttl: '--access-token-ttl' };

/** Runs `work`; a refused token setting names its flag. */
async function namingFlags<T>(work: Promise<T>): Promise<T> {
  try {
    return await work;
  } catch (error) {
    const flag = error instanceof ResourceInputError ? FLAGS[error.field] : undefined;
    throw flag === undefined ? error : new UsageError(`${flag}: ${(error as Error).message}`);
  }
}

/** The token settings as `list` and `update` print them. */
function settingsJson(r: ResourceView) {
  return {
    token_format: r.token_format,
    signing_alg: r.signing_alg,
    access_token_ttl: r.access_token_ttl,
    access_token_lifetime: r.access_token_lifetime,
    require_second_factor: r.require_second_factor,
    require_dpop: r.require_dpop,
  };
}

function settingsText(r: ResourceView): string {
  const format = r.token_format === 'jwt' ? `jwt ${r.signing_alg}` : 'opaque';
  const lifetime = `${r.access_token_lifetime}s${r.access_token_ttl === null ? ' (default)' : ''}`;
  return `${format}\t${lifetime}${r.require_second_factor ? '\tsecond factor required' : ''}${r.require_dpop ? '\tDPoP required' : ''}`;
}

const create: Command = command({
  words: 'resource create',
  usage: ['--uri <uri> --name <n> [--scope "<name>=<description>" …]', ...TOKEN_USAGE],
  help: [
    'registers a resource server; prints its introspection client (secret once);',
    'its tokens: opaque (default) or jwt, signed ES256 (default) or RS256,',
    'living --access-token-ttl seconds (60-3600 for jwt, 60-86400 for opaque;',
    'default: JWT_ACCESS_TOKEN_TTL or ACCESS_TOKEN_TTL); --require-second-factor:',
    'its tokens only for a login with a passkey or an authenticator app (step-up)',
  ],
  options: {
    uri: { type: 'string', help: "the API's URI: its resource indicator, and the aud of its tokens" },
    name: { type: 'string', help: 'the name consent pages show' },
    scope: { type: 'string', multiple: true, help: '"<name>=<description>": a scope it defines, in plain words for consent pages' },
    ...TOKEN_OPTIONS,
  },
  async run(ctx, args, options, print) {
    noArguments(args);
    if (options.uri === undefined || options.name === undefined) throw usageError(create);
    const scopes = (options.scope ?? []).map(parseScopeDefinition);
    const { resource, secret } = await namingFlags(
      registerResource(ctx, { uri: options.uri, name: options.name, scopes, ...tokenSettings(options) }, COMMAND_LINE),
    );
    print(
      { uri: resource.uri, client_id: resource.client_id, client_secret: secret },
      `Registered resource server "${resource.name}" at ${resource.uri}.\nIts introspection client:\n` +
        `client_id: ${resource.client_id}\nclient_secret: ${secret}\n(The secret is shown only once: store it now.)`,
    );
    return 0;
  },
});

const update: Command = command({
  words: 'resource update',
  usage: ['<uri>', ...TOKEN_USAGE],
  help: [
    'changes how its access tokens are made (those issued keep theirs); the built-in',
    "resource's format cannot be changed; --access-token-ttl default: the format's default;",
    '--no-require-second-factor lets a password login have its tokens again',
  ],
  options: TOKEN_OPTIONS,
  async run(ctx, args, options, print) {
    const uri = oneArgument(update, args);
    const resource = await findResourceNamed(ctx, uri);
    if (!resource) throw new UsageError(`no resource server with the URI ${uri}`);
    const changed = await namingFlags(changeTokenSettings(ctx, resource, tokenSettings(options), COMMAND_LINE));
    print({ uri: changed.uri, ...settingsJson(changed) }, `Resource server ${changed.uri}: ${settingsText(changed).replaceAll('\t', ', ')}.`);
    return 0;
  },
});

const list = command({
  words: 'resource list',
  help: "with each one's token format (and JWT algorithm) and access token lifetime",
  async run(ctx, args, _options, print) {
    noArguments(args);
    const resources = await listResources(ctx);
    const json = resources.map((r) => ({ uri: r.uri, name: r.name, builtin: r.builtin, client_id: r.client_id, scopes: r.scopes, ...settingsJson(r) }));
    print(
      json,
      resources
        .map((r) => `${r.uri}\t${r.name}${r.builtin ? '\t(built in)' : ''}\t${r.scopes.map((s) => s.name).join(' ') || '-'}\t${settingsText(r)}`)
        .join('\n'),
    );
    return 0;
  },
});

const remove: Command = command({
  words: 'resource delete',
  usage: '<uri>',
  help: 'also revokes every grant for it and removes its scopes',
  async run(ctx, args, _options, print) {
    const uri = oneArgument(remove, args);
    const resource = await findResourceNamed(ctx, uri);
    if (!resource) throw new UsageError(`no resource server with the URI ${uri}`);
    await removeResource(ctx, resource, COMMAND_LINE);
    print({ uri: resource.uri, deleted: true }, `Deleted resource server ${resource.uri}; every grant for it is revoked.`);
    return 0;
  },
});

export const RESOURCE_COMMANDS: readonly Command[] = [create, update, list, remove];
