/**
 * `gatehouse connection …`: the upstream identity providers people log in with (SPEC §2,
 * §4.13). What a connection may be is decided in accounts/connections/; here the options
 * become its input — only those given, so that an absent one keeps its default or its value —
 * and the client secret comes from standard input or a prompt, never from an option's value.
 */
import {
  CONNECTION_PRESETS,
  ConnectionInputError,
  allConnections,
  callbackUrl,
  connectionNamed,
  createConnection,
  deleteConnection,
  describeConnection,
  setConnectionEnabled,
  updateConnectionSettings,
  type Connection,
  type ConnectionInput,
} from '../accounts/connections/connections.ts';
import { COMMAND_LINE } from '../audit.ts';
import type { AppContext } from '../context.ts';
import { UsageError, closest, command, noArguments, oneArgument, type Command, type OptionValues } from './command.ts';
import { readClientSecret } from './password.ts';

/** The settings of a connection, on `create` and `update`. */
const CONNECTION_OPTIONS = {
  name: { type: 'string', help: 'the name on the login page (create: the id is made from it, for good)' },
  preset: { type: 'string', help: `the provider, filled in: ${CONNECTION_PRESETS.join(', ')}` },
  issuer: { type: 'string', help: 'any OpenID Connect provider, by its issuer URL (read from its discovery document)' },
  kind: { type: 'string', help: 'oauth2: a provider without OpenID Connect, by the three URLs below' },
  'authorization-url': { type: 'string', help: 'oauth2: its authorization endpoint (https)' },
  'token-url': { type: 'string', help: 'oauth2: its token endpoint (https)' },
  'userinfo-url': { type: 'string', help: "oauth2: where the person's id, e-mail and name are read (https)" },
  'client-id': { type: 'string', help: 'the client ID the provider gave Gatehouse' },
  'client-secret-stdin': { type: 'boolean', help: "read the provider's client secret from standard input (else it is prompted for)" },
  tenant: { type: 'string', help: 'microsoft: the Directory (tenant) ID, a GUID' },
  'base-url': { type: 'string', help: 'github, gitlab: a GitHub Enterprise Server or a self-hosted GitLab' },
  scope: { type: 'string', multiple: true, help: "what to ask the provider for (default: the preset's, or openid email profile)" },
  domains: { type: 'string', help: 'comma-separated e-mail domains whose people it serves (the login page sends them there)' },
  required: { type: 'boolean', help: "those domains' people must log in through it, never with a password" },
  'create-accounts': { type: 'boolean', help: 'new people get an account (the default; --no-create-accounts: refused)' },
  'link-verified-email': { type: 'boolean', help: 'link the account with the same e-mail when the provider says it is verified' },
  'groups-claim': { type: 'string', help: 'the claim whose values become group memberships at each login' },
  'trust-mfa': { type: 'boolean', help: "the provider's multi-factor login counts as a second factor" },
  'allow-private-address': { type: 'boolean', help: 'the provider may be on a loopback or private address' },
  'keep-tokens': { type: 'boolean', help: "keep the provider's tokens, sealed (needs KEYS_SECRET), for --token-resource (--no-keep-tokens: delete them)" },
  'token-resource': {
    type: 'string',
    multiple: true,
    help: 'a resource server that may exchange a person\'s token for their provider token, up to 50 ("": none)',
  },
} as const;

type ConnectionOptions = OptionValues<typeof CONNECTION_OPTIONS>;

/** The options that say where an OpenID Connect or oauth2 provider is, when no preset does. */
const URL_OPTIONS = ['authorization-url', 'token-url', 'userinfo-url'] as const;

/** The settings the options give; an option not given is absent (not undefined), so it keeps its default or its value. */
function connectionInput(options: ConnectionOptions): ConnectionInput {
  const input: ConnectionInput = {
    name: options.name,
    preset: options.preset,
    issuer: options.issuer,
    kind: options.kind,
    authorizationUrl: options['authorization-url'],
    tokenUrl: options['token-url'],
    userinfoUrl: options['userinfo-url'],
    baseUrl: options['base-url'],
    tenant: options.tenant,
    clientId: options['client-id'],
    scope: options.scope?.join(' '),
    domains: options.domains?.split(','),
    required: options.required,
    createAccounts: options['create-accounts'],
    linkVerifiedEmail: options['link-verified-email'],
    groupsClaim: options['groups-claim'],
    trustMfa: options['trust-mfa'],
    allowPrivateAddress: options['allow-private-address'],
    keepTokens: options['keep-tokens'],
    tokenResources: options['token-resource']?.filter((uri) => uri !== ''),
  };
  return Object.fromEntries(Object.entries(input).filter(([, value]) => value !== undefined));
}

/** Refuses options that name the provider two ways (one of them would be ignored). */
function checkProvider(options: ConnectionOptions): void {
  const urls = URL_OPTIONS.some((option) => options[option] !== undefined);
  if (options.preset !== undefined && (options.issuer !== undefined || options.kind !== undefined || urls))
    throw new UsageError('--preset fills in the provider: give it without --issuer, --kind and the --…-url options');
  if (options.issuer !== undefined && (urls || options.kind === 'oauth2'))
    throw new UsageError('--issuer makes an OpenID Connect connection; an oauth2 one takes --authorization-url, --token-url and --userinfo-url instead');
  if (urls && options.kind !== undefined && options.kind !== 'oauth2')
    throw new UsageError('--authorization-url, --token-url and --userinfo-url go with --kind oauth2');
}

/** The flag each refused setting came from. */
const FLAGS: Readonly<Record<string, string>> = {
  name: '--name',
  preset: '--preset',
  issuer: '--issuer',
  kind: '--kind',
  authorization_url: '--authorization-url',
  token_url: '--token-url',
  userinfo_url: '--userinfo-url',
  client_id: '--client-id',
  client_secret: '--client-secret-stdin',
  tenant: '--tenant',
  base_url: '--base-url',
  scope: '--scope',
  domains: '--domains',
  required: '--required',
  groups_claim: '--groups-claim',
  keep_tokens: '--keep-tokens',
  token_resources: '--token-resource',
};

/** Runs `work`; a refused setting names its flag, unless the message names the flags already. */
async function namingFlags<T>(work: Promise<T>): Promise<T> {
  try {
    return await work;
  } catch (error) {
    const flag = error instanceof ConnectionInputError ? FLAGS[error.field] : undefined;
    if (flag === undefined || (error as Error).message.includes('--')) throw error;
    throw new UsageError(`${flag}: ${(error as Error).message}`);
  }
}

/** The connection with this id, or a refusal that suggests the id meant. */
async function requireConnection(ctx: AppContext, id: string): Promise<Connection> {
  try {
    return await connectionNamed(ctx, id);
  } catch (error) {
    if (!(error instanceof ConnectionInputError)) throw error;
    const meant = closest(
      id,
      (await allConnections(ctx)).map((row) => row.id),
    );
    throw new UsageError(`no connection with the id ${id}; ${meant ? `did you mean ${meant}?` : 'see gatehouse connection list'}`);
  }
}

/** A connection as `list` and `update` print it: one line, tab-separated. */
function line(c: ReturnType<typeof describeConnection>): string {
  return [
    c.id,
    c.name,
    c.preset ?? c.kind,
    c.issuer ?? c.authorization_url,
    c.enabled ? 'enabled' : 'disabled',
    `client_id: ${c.client_id}`,
    `callback: ${c.callback_url}`,
    ...(c.domains.length > 0 ? [`domains: ${c.domains.join(' ')}${c.required ? ' (required)' : ''}`] : []),
    ...(c.create_accounts ? [] : ['no new accounts']),
    ...(c.link_verified_email ? ['links verified email'] : []),
    ...(c.groups_claim === null ? [] : [`groups: ${c.groups_claim}`]),
    ...(c.trust_mfa ? ['trusts MFA'] : []),
    ...(c.allow_private_address ? ['private addresses allowed'] : []),
  ].join('\t');
}

const SETTINGS_USAGE = [
  '[--tenant <t>] [--base-url <url>] [--scope "<s>"] [--domains a.example,b.example]',
  '[--[no-]required] [--[no-]create-accounts] [--[no-]link-verified-email]',
  '[--groups-claim <claim>] [--[no-]trust-mfa] [--[no-]allow-private-address]',
  '[--[no-]keep-tokens] [--token-resource <uri> …]',
];

const create: Command = command({
  words: 'connection create',
  usage: [
    `--name <n> (--preset ${CONNECTION_PRESETS.join('|')} | --issuer <url>`,
    '| --kind oauth2 --authorization-url <url> --token-url <url> --userinfo-url <url>)',
    '--client-id <id> [--client-secret-stdin]',
    ...SETTINGS_USAGE,
  ],
  help: [
    'registers an upstream identity provider people log in with, and prints',
    'the callback URL to register at the provider; the id comes from --name',
    'and never changes. --preset fills in the provider: microsoft needs',
    '--tenant (the Directory (tenant) ID, a GUID), github and gitlab take',
    '--base-url (GitHub Enterprise Server, a self-hosted GitLab); --issuer:',
    'any OpenID Connect provider (from its discovery document); --kind oauth2:',
    'a provider without OpenID Connect, by its three URLs (all https). The',
    "provider's client secret is read from standard input with",
    '--client-secret-stdin (else prompted for), sealed at rest, never shown.',
    "--scope: what to ask the provider for (default: the preset's, or openid",
    'email profile); --domains: the email domains whose people it serves (the',
    'login page sends them there); --required: those people cannot use a',
    'password. New people get an account unless --no-create-accounts;',
    '--link-verified-email links an account with the same email when the',
    'provider says it is verified; --groups-claim: the claim whose values',
    "become group memberships at each login; --trust-mfa: the provider's",
    'multi-factor login counts as a second factor; --allow-private-address:',
    'the provider may be on a loopback or private address; --keep-tokens: the',
    "provider's tokens are kept at each login, sealed under KEYS_SECRET, and",
    '--token-resource names the resource servers that may exchange a',
    "person's Gatehouse token for them (token exchange, audience: the id)",
  ],
  options: CONNECTION_OPTIONS,
  async run(ctx, args, options, print) {
    noArguments(args);
    if (options.name === undefined) throw new UsageError('--name is required');
    if (options['client-id'] === undefined) throw new UsageError('--client-id is required');
    checkProvider(options);
    const clientSecret = await readClientSecret(options);
    const row = await namingFlags(createConnection(ctx, { ...connectionInput(options), clientSecret }, COMMAND_LINE));
    const callback = callbackUrl(ctx, row.id);
    print(
      { id: row.id, callback_url: callback },
      `Created connection "${row.name}" (id: ${row.id}).\n\n` +
        `Register this callback (redirect) URL at the provider:\n\n    ${callback}\n\n` +
        'People can log in with it from now on; gatehouse connection disable stops that.',
    );
    return 0;
  },
});

const list = command({
  words: 'connection list',
  help: ["each one's id, name, provider, state, client ID and callback URL, and", 'the options set; --json: every setting but the client secret'],
  async run(ctx, args, _options, print) {
    noArguments(args);
    const connections = (await allConnections(ctx)).map((row) => describeConnection(ctx, row));
    print(connections, connections.map(line).join('\n') || 'No connections.');
    return 0;
  },
});

const update: Command = command({
  words: 'connection update',
  usage: [
    `<id> [--name <n>] [--preset ${CONNECTION_PRESETS.join('|')} | --issuer <url>`,
    '| --kind oauth2 --authorization-url <url> --token-url <url> --userinfo-url <url>]',
    '[--client-id <id>] [--client-secret-stdin]',
    ...SETTINGS_USAGE,
  ],
  help: [
    'changes the settings given and keeps the others (the id, and so the',
    'callback URL, never changes); --client-secret-stdin replaces the client',
    'secret; --domains "" and --groups-claim "" clear them. A new --preset,',
    '--issuer or --kind replaces the provider: give --tenant, --base-url and',
    '--scope again if the new one needs them',
  ],
  options: CONNECTION_OPTIONS,
  async run(ctx, args, options, print) {
    const id = oneArgument(update, args);
    checkProvider(options);
    const input = connectionInput(options);
    if (Object.keys(input).length === 0 && !options['client-secret-stdin'])
      throw new UsageError('nothing to change: give the settings to change (see gatehouse connection update --help)');
    const current = await requireConnection(ctx, id);
    // A provider named another way leaves the preset, and a new preset starts afresh: the
    // tenant or base URL of the old one would otherwise stay, and be refused or misapplied.
    const namesProvider = options.issuer !== undefined || options.kind !== undefined || URL_OPTIONS.some((option) => options[option] !== undefined);
    const leavesPreset = options.preset === undefined && current.preset !== null && namesProvider;
    if (leavesPreset) input.preset = null;
    if (leavesPreset || (options.preset !== undefined && options.preset !== current.preset)) {
      input.baseUrl = options['base-url'] ?? null;
      input.tenant = options.tenant ?? null;
    }
    if (options['client-secret-stdin']) input.clientSecret = await readClientSecret(options);
    const before = describeConnection(ctx, current);
    const after = describeConnection(ctx, await namingFlags(updateConnectionSettings(ctx, current.id, input, COMMAND_LINE)));
    const changed = input.clientSecret !== undefined || JSON.stringify(before) !== JSON.stringify(after);
    const secret = input.clientSecret === undefined ? '' : ' (client secret replaced)';
    print(after, changed ? `Updated connection ${after.id}${secret}:\n${line(after)}` : `Connection ${after.id}: nothing changed.`);
    return 0;
  },
});

/** `connection disable` and `connection enable`. */
function enableCommand(enabled: boolean, help: string | readonly string[]): Command {
  const self: Command = command({
    words: `connection ${enabled ? 'enable' : 'disable'}`,
    usage: '<id>',
    help,
    async run(ctx, args, _options, print) {
      const current = await requireConnection(ctx, oneArgument(self, args));
      const state = enabled ? 'enabled' : 'disabled';
      if ((current.enabled === 1) === enabled) {
        print({ id: current.id, enabled }, `Connection ${current.id} is already ${state}.`);
        return 0;
      }
      await setConnectionEnabled(ctx, current.id, enabled, COMMAND_LINE);
      const ended = enabled ? '' : '; the sessions that came through it are ended';
      print({ id: current.id, enabled }, `Connection ${current.id} is ${state}${ended}.`);
      return 0;
    },
  });
  return self;
}

const disable = enableCommand(false, ['the login page stops offering it; the sessions that came', 'through it end (its settings and links stay)']);
const enable = enableCommand(true, 'people can log in with it again');

const remove: Command = command({
  words: 'connection delete',
  usage: '<id>',
  help: ["also ends its sessions and unlinks people's identities there (their", 'accounts stay)'],
  async run(ctx, args, _options, print) {
    const current = await requireConnection(ctx, oneArgument(remove, args));
    await deleteConnection(ctx, current.id, COMMAND_LINE);
    print({ id: current.id, deleted: true }, `Deleted connection ${current.id}; its sessions are ended and its people's identities there unlinked.`);
    return 0;
  },
});

export const CONNECTION_COMMANDS: readonly Command[] = [create, list, update, disable, enable, remove];
