/** `gatehouse client …`: register, list, update, disable, enable, delete, block and unblock OAuth clients. */
import { readFileSync } from 'node:fs';
import { COMMAND_LINE } from '../audit.ts';
import {
  PAGE_SIZE,
  blockClient,
  changeClient,
  clientNamed,
  describeClient,
  disableClient,
  enableClient,
  listClients,
  registerClient,
  removeClient,
  unblockClient,
} from '../clients/clients.ts';
import { parseIdJagAudience, type IdJagAudience } from '../identity/id-jags.ts';
import { lookupClient } from '../oauth/client-auth.ts';
import { postLogoutRedirectUrisOf, redirectUrisOf } from '../protocol/redirect-uri.ts';
import { AUTHORIZATION_CODE_GRANT_TYPE, DEVICE_CODE_GRANT_TYPE, JWT_BEARER_GRANT_TYPE } from '../oauth/grants/types.ts';
import { FAPI2 } from '../oauth/client-rules.ts';
import type { ClientProfile } from '../store/schema.ts';
import { UsageError, command, noArguments, oneArgument, type Command, type Flags } from './command.ts';

/** `--grant-type` values that stand for a longer registered name (SPEC §2). */
const GRANT_TYPE_SHORT_FORMS: ReadonlyMap<string, string> = new Map([
  ['device_code', DEVICE_CODE_GRANT_TYPE],
  ['jwt_bearer', JWT_BEARER_GRANT_TYPE],
]);

/** The options of a client's settings, on `create` and `update`. */
const SETTINGS_OPTIONS = {
  name: { type: 'string', help: 'the name people see on the consent page' },
  'redirect-uri': { type: 'string', multiple: true, help: 'where the code comes back, matched exactly (a loopback http URL: any port)' },
  'grant-type': { type: 'string', help: 'authorization_code (the default), client_credentials, device_code or jwt_bearer' },
  confidential: { type: 'boolean', help: 'a client with a secret, shown once (a public client has none)' },
  trusted: { type: 'boolean', help: 'skip the consent page: only for your own applications' },
  'require-pkce': { type: 'boolean', help: 'refuse code requests without PKCE (on for public clients; --no-require-pkce: off)' },
  scope: { type: 'string', multiple: true, help: 'exactly the scopes it may ask for (default: the built-in and identity scopes)' },
  'post-logout-redirect-uri': { type: 'string', multiple: true, help: 'where logout may send people back to, matched exactly' },
  'backchannel-logout-uri': { type: 'string', help: 'where a logout token is posted when a session it got an ID token in ends' },
  'id-token-alg': { type: 'string', help: 'how its ID tokens and logout tokens are signed: RS256 (the default) or ES256' },
  'jwks-uri': { type: 'string', help: 'the https URL of its public keys: it authenticates with private_key_jwt, no secret' },
  'jwks-file': { type: 'string', help: 'a file holding its public keys (a JWK Set): private_key_jwt, no secret' },
  'require-dpop': { type: 'boolean', help: 'issue its tokens only with a DPoP proof: bound to its key (--no-require-dpop: off)' },
  'require-par': { type: 'boolean', help: 'take its authorization requests only pushed first, POST /oauth/par (--no-require-par: off)' },
  profile: { type: 'string', help: 'fapi2: hold it to the FAPI 2.0 Security Profile (private_key_jwt, PAR, PKCE, DPoP); none: no profile' },
  'token-exchange': { type: 'boolean', help: "exchange a person's access token for a narrower one, RFC 8693 (--no-token-exchange: off)" },
  'id-jag-audience': {
    type: 'string',
    multiple: true,
    help: 'an authorization server it may get ID-JAGs for: <issuer url>, or <issuer url>=<its client ID there> ("": none)',
  },
} as const satisfies Flags;

/** `--id-jag-audience`: the audiences given ("" alone: none); undefined when not given. */
function idJagAudiencesOption(values: string[] | undefined): IdJagAudience[] | undefined {
  return values?.filter((value) => value !== '').map(parseIdJagAudience);
}

/** `--profile`: fapi2, or none to take it away; undefined when not given. */
function profileOption(value: string | undefined): ClientProfile | null | undefined {
  if (value === undefined) return undefined;
  if (value === 'none') return null;
  if (value === FAPI2) return FAPI2;
  throw new UsageError(`--profile: fapi2 or none, got "${value}"`);
}

/** The JWK Set in `--jwks-file`; undefined when it is not given. */
function jwksFile(path: string | undefined): string | undefined {
  if (path === undefined) return undefined;
  try {
    return readFileSync(path, 'utf8');
  } catch (error) {
    throw new UsageError(`--jwks-file: cannot read ${path} (${(error as NodeJS.ErrnoException).code ?? 'error'})`);
  }
}

const create = command({
  words: 'client create',
  usage: [
    '--name <n> --redirect-uri <url> [--redirect-uri <url2> …]',
    '[--grant-type authorization_code|client_credentials|device_code|jwt_bearer]',
    '[--confidential] [--trusted] [--require-pkce|--no-require-pkce] [--require-dpop] [--require-par] [--profile fapi2] [--scope "<s1 s2>"]',
    '[--post-logout-redirect-uri <url> …] [--backchannel-logout-uri <url>] [--id-token-alg RS256|ES256]',
    '[--jwks-uri <url> | --jwks-file <path>] [--token-exchange] [--id-jag-audience <issuer url>[=<client_id there>] …]',
  ],
  help: [
    'public clients require PKCE unless --no-require-pkce;',
    'device_code (urn:ietf:params:oauth:grant-type:device_code)',
    'and client_credentials clients need no --redirect-uri;',
    'jwt_bearer (urn:ietf:params:oauth:grant-type:jwt-bearer) makes a',
    "publisher client: confidential, its secret signs h's grant tokens,",
    'no --redirect-uri;',
    'the OpenID Connect settings: where logout may return to (matched',
    'exactly), where back-channel logout tokens are posted, and how',
    'ID tokens are signed (RS256 by default);',
    '--jwks-uri (https) or --jwks-file (a JWK Set of public keys:',
    'RS256, PS256, ES256 or EdDSA) make a confidential client without',
    'a secret that authenticates with private_key_jwt;',
    '--token-exchange and --id-jag-audience need a confidential client',
  ],
  options: SETTINGS_OPTIONS,
  async run(ctx, args, options, print) {
    noArguments(args);
    if (options.name === undefined) throw new UsageError('--name is required');
    if (options['jwks-uri'] !== undefined && options['jwks-file'] !== undefined) throw new UsageError('--jwks-uri and --jwks-file: give one or the other');
    const jwks = jwksFile(options['jwks-file']) ?? null;
    const keyed = jwks !== null || options['jwks-uri'] !== undefined;
    // Keys make a confidential client (private_key_jwt), with no secret.
    const given = options['grant-type'] ?? AUTHORIZATION_CODE_GRANT_TYPE;
    const grantType = GRANT_TYPE_SHORT_FORMS.get(given) ?? given;
    // A publisher client's secret signs its grant tokens (SPEC §2): always confidential.
    const confidential = (options.confidential ?? false) || keyed || grantType === JWT_BEARER_GRANT_TYPE;
    if (options['redirect-uri'] === undefined && grantType === AUTHORIZATION_CODE_GRANT_TYPE) throw new UsageError('--redirect-uri is required');
    const { client, secret } = await registerClient(
      ctx,
      {
        name: options.name,
        grantType,
        redirectUris: options['redirect-uri'] ?? [],
        confidential,
        trusted: options.trusted ?? false,
        // Public clients prove themselves with PKCE unless asked otherwise (legacy clients, SPEC §2).
        requirePkce: options['require-pkce'] ?? !confidential,
        scope: (options.scope ?? []).join(' '),
        postLogoutRedirectUris: options['post-logout-redirect-uri'] ?? [],
        backchannelLogoutUri: options['backchannel-logout-uri'] ?? null,
        idTokenAlg: options['id-token-alg'] ?? 'RS256',
        jwks,
        jwksUri: options['jwks-uri'] ?? null,
        requireDpop: options['require-dpop'] ?? false,
        requirePar: options['require-par'] ?? false,
        profile: profileOption(options.profile) ?? null,
        tokenExchange: options['token-exchange'] ?? false,
        idJagAudiences: idJagAudiencesOption(options['id-jag-audience']) ?? [],
      },
      COMMAND_LINE,
    );
    print(
      { client_id: client.id, ...(secret === null ? {} : { client_secret: secret }) },
      `Created client "${client.name}".\nclient_id: ${client.id}` +
        (secret === null ? '' : `\nclient_secret: ${secret}\n(The secret is shown only once: store it now.)`),
    );
    return 0;
  },
});

const list = command({
  words: 'client list',
  usage: '[--limit <n>] [--after <client_id>]',
  help: [
    'includes clients known by metadata documents or dynamic registration;',
    'oldest first, 100 at a time (--limit: 1 to 1000); --after continues',
    'after that client (with --json: after the last client_id printed,',
    'until fewer than the limit come back)',
  ],
  options: {
    limit: { type: 'string', help: 'how many, from 1 to 1000 (default 100)' },
    after: { type: 'string', help: 'start after this client ID (the last one printed)' },
  },
  async run(ctx, args, options, print) {
    noArguments(args);
    const limit = options.limit === undefined ? PAGE_SIZE : Number(options.limit);
    if (!/^\d{1,4}$/.test(options.limit ?? '1') || limit < 1 || limit > 1000) throw new UsageError('--limit must be a whole number from 1 to 1000');
    if (options.after !== undefined && !(await lookupClient(ctx.db, options.after))) throw new UsageError(`--after: there is no client ${options.after}`);
    const page = await listClients(ctx, options.after === undefined ? {} : { after: options.after }, limit);
    const clients = page.rows.map(describeClient);
    const known = { registered: '', metadata_document: '\tmetadata document', dynamic: '\tdynamically registered' };
    const switches = (c: (typeof clients)[number]) => `${c.blocked ? '\tblocked' : ''}${c.disabled ? '\tdisabled' : ''}`;
    const line = (c: (typeof clients)[number]) =>
      `${c.client_id}\t${c.name}\t${c.grant_type}\t${c.redirect_uris.join(' ') || '-'}${known[c.kind]}${switches(c)}`;
    const more = page.next ? `\nMore: gatehouse client list --after ${page.next.after}` : '';
    print(clients, (clients.map(line).join('\n') || 'No clients.') + more);
    return 0;
  },
});

const update: Command = command({
  words: 'client update',
  usage: [
    '<client_id> [--name <n>] [--redirect-uri <url> …] [--[no-]trusted] [--[no-]require-pkce] [--[no-]require-dpop] [--[no-]require-par]',
    '[--profile fapi2|none]',
    '[--scope "<s1 s2>"] [--post-logout-redirect-uri <url> …] [--backchannel-logout-uri <url>]',
    '[--id-token-alg RS256|ES256] [--jwks-uri <url> | --jwks-file <path>]',
    '[--[no-]token-exchange] [--id-jag-audience <issuer url>[=<client_id there>] …]',
  ],
  help: [
    "changes what the admin page's edit form changes, of a client an",
    'administrator registered; what is not given stays as it is.',
    'A list given replaces the list; "" empties an optional one',
    '(--post-logout-redirect-uri "", --backchannel-logout-uri "",',
    '--id-jag-audience "").',
    'The grant type and the client type stay as registered. Taking',
    'a scope away revokes the grants that hold it; a changed redirect',
    'URL or PKCE requirement voids the codes not yet exchanged',
  ],
  options: SETTINGS_OPTIONS,
  async run(ctx, args, options, print) {
    const client = await clientNamed(ctx, oneArgument(update, args));
    if (options['grant-type'] !== undefined) throw new UsageError('--grant-type cannot be changed: register a new client instead');
    if (options.confidential !== undefined) throw new UsageError('--confidential cannot be changed: register a new client instead');
    if (options['jwks-uri'] !== undefined && options['jwks-file'] !== undefined) throw new UsageError('--jwks-uri and --jwks-file: give one or the other');
    const settings = Object.keys(SETTINGS_OPTIONS).filter((name) => name !== 'grant-type' && name !== 'confidential');
    if (settings.every((name) => options[name as keyof typeof options] === undefined))
      throw new UsageError(`nothing to change: give ${settings.map((name) => `--${name}`).join(', ')}`);
    const given = (values: string[] | undefined) => values?.filter((value) => value !== '');
    const scope = options.scope?.join(' ');
    const jwks = jwksFile(options['jwks-file']);
    await changeClient(
      ctx,
      client,
      {
        name: options.name ?? client.name,
        redirectUris: given(options['redirect-uri']) ?? redirectUrisOf(client),
        trusted: options.trusted ?? client.trusted === 1,
        requirePkce: options['require-pkce'] ?? client.require_pkce === 1,
        // Empty means the built-in scopes on creation; kept as it is here unless given.
        scope: scope === undefined || scope.trim() === '' ? client.scopes : scope,
        postLogoutRedirectUris: given(options['post-logout-redirect-uri']) ?? postLogoutRedirectUrisOf(client),
        backchannelLogoutUri: options['backchannel-logout-uri'] === undefined ? undefined : options['backchannel-logout-uri'] || null,
        idTokenAlg: options['id-token-alg'],
        requireDpop: options['require-dpop'],
        requirePar: options['require-par'],
        profile: profileOption(options.profile),
        tokenExchange: options['token-exchange'],
        idJagAudiences: idJagAudiencesOption(options['id-jag-audience']),
        // New keys replace the old ones (a URL or a set: the other goes).
        ...(jwks !== undefined ? { jwks, jwksUri: null } : options['jwks-uri'] !== undefined ? { jwks: null, jwksUri: options['jwks-uri'] } : {}),
      },
      COMMAND_LINE,
    );
    const changed = describeClient(await clientNamed(ctx, client.id));
    print(changed, `Updated client "${changed.name}" (${changed.client_id}).`);
    return 0;
  },
});

/** `client disable` and `client enable`. */
function switchCommand(enabled: boolean, help: readonly string[]): Command {
  const self: Command = command({
    words: `client ${enabled ? 'enable' : 'disable'}`,
    usage: '<client_id>',
    help,
    async run(ctx, args, _options, print) {
      const client = await clientNamed(ctx, oneArgument(self, args));
      const changed = enabled ? await enableClient(ctx, client, COMMAND_LINE) : await disableClient(ctx, client, COMMAND_LINE);
      const state = enabled ? 'enabled' : 'disabled';
      const text = !changed
        ? `Client ${client.id} is already ${state}.`
        : enabled
          ? `Enabled client ${client.id}: it may get tokens again (what was revoked stays revoked).`
          : `Disabled client ${client.id}: it is refused from now on, and everything issued to it is revoked.`;
      print({ client_id: client.id, disabled: !enabled }, text);
      return 0;
    },
  });
  return self;
}

const disable = switchCommand(false, [
  'refuse a client of any kind like a blocked one, and revoke',
  'everything issued to it; its settings stay (client enable)',
]);
const enable = switchCommand(true, ['let a disabled client get tokens again']);

const remove: Command = command({
  words: 'client delete',
  usage: '<client_id>',
  help: ['also revokes everything issued to the client; a <client_id> is', "a UUID or a metadata document's https URL, here and below"],
  async run(ctx, args, _options, print) {
    const clientId = oneArgument(remove, args);
    if (!(await removeClient(ctx, clientId, COMMAND_LINE))) throw new UsageError(`no client with id ${clientId}`);
    print({ client_id: clientId, deleted: true }, `Deleted client ${clientId} and revoked everything issued to it.`);
    return 0;
  },
});

const block: Command = command({
  words: 'client block',
  usage: '<client_id or URL prefix>',
  help: [
    'refuse a metadata-document or dynamically registered client',
    '(or every metadata document under an https URL prefix),',
    'and revoke everything issued to it',
  ],
  async run(ctx, args, _options, print) {
    const target = oneArgument(block, args);
    const blocked = await blockClient(ctx, target, COMMAND_LINE);
    const what = blocked.kind === 'client' ? `client ${blocked.client.id}` : `every metadata document under ${blocked.prefix}`;
    print({ blocked: blocked.kind === 'client' ? target : blocked.prefix, kind: blocked.kind }, `Blocked ${what}, and revoked everything issued to it.`);
    return 0;
  },
});

const unblock: Command = command({
  words: 'client unblock',
  usage: '<client_id or URL prefix>',
  async run(ctx, args, _options, print) {
    const target = oneArgument(unblock, args);
    if (!(await unblockClient(ctx, target, COMMAND_LINE))) throw new UsageError(`${target} is not blocked`);
    print({ unblocked: target }, `Unblocked ${target}.`);
    return 0;
  },
});

export const CLIENT_COMMANDS: readonly Command[] = [create, list, remove, update, disable, enable, block, unblock];
