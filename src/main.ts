/**
 * The `gatehouse` command line (SPEC §2). Every command honours DATABASE_URL and the other
 * settings, prints JSON with --json, and exits non-zero with one clear line on bad input.
 */
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { SETUP_LINK_TTL, firstRunSetupLink } from './accounts/setup.ts';
import { allUsers, createUser, disableUser, findUserNamed, setPassword } from './accounts/users.ts';
import { AUDIT_EVENT_TYPES, COMMAND_LINE, isAuditEventType, listAuditEvents, type AuditFilter } from './audit.ts';
import { CLIENT_PAGE_SIZE, blockClient, describeClient, lookupClient, listClients, registerClient, removeClient, unblockClient } from './clients/clients.ts';
import { createScope, findResourceNamed, listAllScopes, listResources, parseScopeDefinition, registerResource, removeResource, removeScope } from './clients/resources.ts';
import { isWorker, runPrimary, runsPurge } from './cluster.ts';
import { InputError } from './input-error.ts';
import { ConfigError, loadConfig, type Config } from './config.ts';
import { type AppContext, type ContextLogger } from './context.ts';
import { openContext } from './open-context.ts';
import { isClientId } from './oauth/client-auth.ts';
import { DEVICE_CODE_GRANT_TYPE } from './oauth/device.ts';
import { migrate, openStore, type Store } from './store/database.ts';
import { purge } from './maintenance.ts';

const HELP = `Usage: gatehouse <command> [options]

Commands:
  serve                                   start the server (applies migrations first)
  migrate                                 apply pending database migrations
  user create <username> --email <e> [--admin] [--password-stdin]
  user list
  user disable <username>                 also revokes the user's tokens and sessions
  user set-password <username> [--password-stdin]
                                          also ends the user's sessions
  client create --name <n> --redirect-uri <url> [--redirect-uri <url2> …]
                [--grant-type authorization_code|client_credentials|device_code]
                [--confidential] [--trusted] [--require-pkce|--no-require-pkce] [--scope "<s1 s2>"]
                                          public clients require PKCE unless --no-require-pkce;
                                          device_code (urn:ietf:params:oauth:grant-type:device_code)
                                          and client_credentials clients need no --redirect-uri
  client list [--limit <n>] [--after <client_id>]
                                          includes clients known by metadata documents or dynamic registration;
                                          oldest first, 100 at a time (--limit: 1 to 1000); --after continues
                                          after that client (with --json: after the last client_id printed,
                                          until fewer than the limit come back)
  client delete <client_id>               also revokes everything issued to the client; a <client_id> is
                                          a UUID or a metadata document's https URL, here and below
  client block <client_id or URL prefix>  refuse a metadata-document or dynamically registered client
                                          (or every metadata document under an https URL prefix),
                                          and revoke everything issued to it
  client unblock <client_id or URL prefix>
  resource create --uri <uri> --name <n> [--scope "<name>=<description>" …]
                                          registers a resource server; prints its introspection client (secret once)
  resource list
  resource delete <uri>                   also revokes every grant for it and removes its scopes
  scope create <name> --resource <uri> --description <text>
  scope list
  scope delete <name>                     also revokes the grants that hold it (built-in scopes stay)
  purge                                   delete expired codes, tokens, sessions, consents and audit events
  audit [--user <username>] [--client <client_id>] [--type <event type>] [--limit <n>]
                                          the newest security events (default 50, newest first)

Options:
  --json     print machine-readable JSON
  --help     show this help

Passwords are prompted for (without echo) unless --password-stdin is given.
Settings come from the environment: DATABASE_URL (default sqlite:./data/gatehouse.db),
PORT, HOST, WORKERS, PUBLIC_URL, ACCESS_TOKEN_TTL, REFRESH_TOKEN_TTL, AUTH_CODE_TTL, DEVICE_CODE_TTL,
REFRESH_GRACE_SECONDS, REQUIRE_PKCE, SESSION_TTL, CONSENT_TTL, PURGE_INTERVAL_SECONDS,
AUDIT_RETENTION_DAYS, METRICS_TOKEN, REDIS_URL, TRUST_PROXY, LOG_LEVEL, CLIENT_METADATA_DOCUMENTS,
CLIENT_METADATA_ALLOWED_HOSTS, CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES, DYNAMIC_CLIENT_REGISTRATION.
See README.md.

Audit event types: ${AUDIT_EVENT_TYPES.join(', ')}.`;

class UsageError extends Error {}

/** The CLI's own diagnostics go to stderr; routine events (a revocation's fan-out) stay quiet. */
const cliLog: ContextLogger = {
  info: () => {},
  warn: (object, message) => console.error(`gatehouse: ${message}`, object),
  error: (object, message) => console.error(`gatehouse: ${message}`, object),
};

const OPTIONS = {
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
  email: { type: 'string' },
  admin: { type: 'boolean' },
  'password-stdin': { type: 'boolean' },
  name: { type: 'string' },
  'redirect-uri': { type: 'string', multiple: true },
  'grant-type': { type: 'string' },
  confidential: { type: 'boolean' },
  trusted: { type: 'boolean' },
  'require-pkce': { type: 'boolean' },
  scope: { type: 'string', multiple: true },
  uri: { type: 'string' },
  resource: { type: 'string' },
  description: { type: 'string' },
  user: { type: 'string' },
  client: { type: 'string' },
  type: { type: 'string' },
  limit: { type: 'string' },
  after: { type: 'string' },
} as const;

type Options = ReturnType<typeof parseArgs<{ options: typeof OPTIONS; allowPositionals: true; allowNegative: true }>>['values'];

async function main(argv: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({ args: argv, options: OPTIONS, allowPositionals: true, allowNegative: true, strict: true });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  const { values: options, positionals } = parsed;
  const [command, sub, ...rest] = positionals;
  if (options.help || command === undefined || command === 'help') {
    console.log(HELP);
    return command === undefined && !options.help ? 2 : 0;
  }
  const config = loadConfig();
  if (command === 'serve') return serve(config);

  // A mistyped command is refused before anything is opened: no database file is created for it.
  const run = COMMANDS[`${command} ${sub ?? ''}`.trim()];
  if (run === undefined) throw new UsageError(`unknown command "${[command, sub].filter(Boolean).join(' ')}"; see gatehouse --help`);

  const store = openStore(config.database);
  let closeContext = async () => {};
  try {
    await migrate(store);
    // Revocations made here reach running instances' WebSockets through the same fan-out, and
    // changes are audited like the admin pages' ones, made by COMMAND_LINE: no user, no address.
    const ctx = await openContext(config, store, cliLog);
    closeContext = () => ctx.close();
    const print = (json: unknown, text: string) => console.log(options.json ? JSON.stringify(json) : text);
    return await run(ctx, rest, options, print);
  } finally {
    await closeContext();
    await store.close();
  }
}

type Print = (json: unknown, text: string) => void;
type Command = (ctx: AppContext, rest: string[], options: Options, print: Print) => Promise<number>;

/** Every command but `serve`, by its words; each gets the arguments after them. */
const COMMANDS: Record<string, Command> = {
  async migrate(_ctx, _rest, _options, print) {
    print({ migrated: true }, 'Database is up to date.');
    return 0;
  },
  async purge(ctx, _rest, _options, print) {
    const counts = await purge(ctx);
    if (counts === null) {
      print({ skipped: 'another instance is purging right now' }, 'Another instance is purging right now; nothing to do.');
      return 0;
    }
    print(counts, Object.entries(counts).map(([table, n]) => `${table}: ${n} deleted`).join('\n'));
    return 0;
  },
  audit: (ctx, rest, options, print) => auditCommand(ctx, rest, options, print),
  'user create': (ctx, rest, options, print) => userCreate(ctx, rest, options, print),
  async 'user list'(ctx, rest, _options, print) {
    noArguments(rest);
    const users = (await allUsers(ctx)).map((u) => ({ username: u.username, email: u.email, admin: u.is_admin === 1, disabled: u.disabled === 1 }));
    print(users, users.map((u) => `${u.username}\t${u.email}${u.admin ? '\tadmin' : ''}${u.disabled ? '\tdisabled' : ''}`).join('\n') || 'No users.');
    return 0;
  },
  async 'user disable'(ctx, rest, _options, print) {
    const user = await requireUser(ctx, rest);
    await disableUser(ctx, user, COMMAND_LINE);
    print({ username: user.username, disabled: true }, `Disabled ${user.username}; their tokens and sessions are revoked.`);
    return 0;
  },
  async 'user set-password'(ctx, rest, options, print) {
    const user = await requireUser(ctx, rest);
    await setPassword(ctx, user, await readPassword(options));
    print({ username: user.username, password_changed: true }, `Password changed for ${user.username}.`);
    return 0;
  },
  'client create': (ctx, rest, options, print) => clientCreate(ctx, rest, options, print),
  async 'client list'(ctx, rest, options, print) {
    noArguments(rest);
    const limit = options.limit === undefined ? CLIENT_PAGE_SIZE : Number(options.limit);
    if (!/^\d{1,4}$/.test(options.limit ?? '1') || limit < 1 || limit > 1000) throw new UsageError('--limit must be a whole number from 1 to 1000');
    if (options.after !== undefined && !(await lookupClient(ctx.db, options.after))) throw new UsageError(`--after: there is no client ${options.after}`);
    const page = await listClients(ctx, options.after === undefined ? {} : { after: options.after }, limit);
    const clients = page.rows.map(describeClient);
    const known = { registered: '', metadata_document: '\tmetadata document', dynamic: '\tdynamically registered' };
    const line = (c: (typeof clients)[number]) => `${c.client_id}\t${c.name}\t${c.grant_type}\t${c.redirect_uris.join(' ') || '-'}${known[c.kind]}${c.blocked ? '\tblocked' : ''}`;
    const more = page.next ? `\nMore: gatehouse client list --after ${page.next.after}` : '';
    print(clients, (clients.map(line).join('\n') || 'No clients.') + more);
    return 0;
  },
  async 'client block'(ctx, rest, _options, print) {
    const target = blockArgument(rest, 'block');
    const blocked = await blockClient(ctx, target, COMMAND_LINE);
    const what = blocked.kind === 'client' ? `client ${blocked.client.id}` : `every metadata document under ${blocked.prefix}`;
    print({ blocked: blocked.kind === 'client' ? target : blocked.prefix, kind: blocked.kind }, `Blocked ${what}, and revoked everything issued to it.`);
    return 0;
  },
  async 'client unblock'(ctx, rest, _options, print) {
    const target = blockArgument(rest, 'unblock');
    if (!(await unblockClient(ctx, target, COMMAND_LINE))) throw new UsageError(`${target} is not blocked`);
    print({ unblocked: target }, `Unblocked ${target}.`);
    return 0;
  },
  'resource create': (ctx, rest, options, print) => resourceCreate(ctx, rest, options, print),
  async 'resource list'(ctx, rest, _options, print) {
    noArguments(rest);
    const resources = await listResources(ctx);
    const json = resources.map((r) => ({ uri: r.uri, name: r.name, builtin: r.builtin, client_id: r.client_id, scopes: r.scopes }));
    print(json, resources.map((r) => `${r.uri}\t${r.name}${r.builtin ? '\t(built in)' : ''}\t${r.scopes.map((s) => s.name).join(' ') || '-'}`).join('\n'));
    return 0;
  },
  async 'resource delete'(ctx, rest, _options, print) {
    const [uri, ...extra] = rest;
    if (uri === undefined || extra.length > 0) throw new UsageError('usage: gatehouse resource delete <uri>');
    const resource = await findResourceNamed(ctx, uri);
    if (!resource) throw new UsageError(`no resource server with the URI ${uri}`);
    await removeResource(ctx, resource, COMMAND_LINE);
    print({ uri: resource.uri, deleted: true }, `Deleted resource server ${resource.uri}; every grant for it is revoked.`);
    return 0;
  },
  async 'scope create'(ctx, rest, options, print) {
    const [name, ...extra] = rest;
    if (name === undefined || extra.length > 0 || options.resource === undefined || options.description === undefined) {
      throw new UsageError('usage: gatehouse scope create <name> --resource <uri> --description <text>');
    }
    const resource = await findResourceNamed(ctx, options.resource);
    if (!resource) throw new UsageError(`no resource server with the URI ${options.resource}`);
    await createScope(ctx, resource, { name, description: options.description.trim() }, COMMAND_LINE);
    print({ name, resource: resource.uri, description: options.description.trim() }, `Created scope ${name} on ${resource.uri}.`);
    return 0;
  },
  async 'scope list'(ctx, rest, _options, print) {
    noArguments(rest);
    const scopes = await listAllScopes(ctx);
    print(scopes, scopes.map((s) => `${s.name}\t${s.resource}\t${s.description}`).join('\n'));
    return 0;
  },
  async 'scope delete'(ctx, rest, _options, print) {
    const [name, ...extra] = rest;
    if (name === undefined || extra.length > 0) throw new UsageError('usage: gatehouse scope delete <name>');
    await removeScope(ctx, name, COMMAND_LINE);
    print({ name, deleted: true }, `Deleted scope ${name}; the grants that held it are revoked.`);
    return 0;
  },
  async 'client delete'(ctx, rest, _options, print) {
    const [clientId, ...extra] = rest;
    if (clientId === undefined || extra.length > 0) throw new UsageError('usage: gatehouse client delete <client_id>');
    if (!(await removeClient(ctx, clientId, COMMAND_LINE))) throw new UsageError(`no client with id ${clientId}`);
    print({ client_id: clientId, deleted: true }, `Deleted client ${clientId} and revoked everything issued to it.`);
    return 0;
  },
};

function blockArgument(rest: string[], action: string): string {
  const [target, ...extra] = rest;
  if (target === undefined || extra.length > 0) throw new UsageError(`usage: gatehouse client ${action} <client_id or URL prefix>`);
  return target;
}

function noArguments(rest: string[]): void {
  if (rest.length > 0) throw new UsageError(`unexpected argument "${rest[0]}"`);
}


async function requireUser(ctx: AppContext, rest: string[]) {
  const [username, ...extra] = rest;
  if (username === undefined || extra.length > 0) throw new UsageError('name exactly one user');
  const user = await findUserNamed(ctx, username);
  if (!user) throw new UsageError(`no user named ${username}`);
  return user;
}

async function userCreate(ctx: AppContext, rest: string[], options: Options, print: Print): Promise<number> {
  const [username, ...extra] = rest;
  if (username === undefined || extra.length > 0) throw new UsageError('usage: gatehouse user create <username> --email <e> [--admin] [--password-stdin]');
  if (options.email === undefined) throw new UsageError('--email is required');
  const password = await readPassword(options);
  const user = await createUser(ctx, { username, email: options.email, password, isAdmin: options.admin ?? false }, COMMAND_LINE);
  print({ id: user.id, username: user.username, email: user.email, admin: user.is_admin === 1 }, `Created user ${user.username}${user.is_admin ? ' (administrator)' : ''}.`);
  return 0;
}

/** `--grant-type` values that stand for a longer registered name (SPEC §2). */
const GRANT_TYPE_SHORT_FORMS: ReadonlyMap<string, string> = new Map([['device_code', DEVICE_CODE_GRANT_TYPE]]);

async function clientCreate(ctx: AppContext, rest: string[], options: Options, print: Print): Promise<number> {
  noArguments(rest);
  if (options.name === undefined) throw new UsageError('--name is required');
  const given = options['grant-type'] ?? 'authorization_code';
  const grantType = GRANT_TYPE_SHORT_FORMS.get(given) ?? given;
  if (options['redirect-uri'] === undefined && grantType === 'authorization_code') throw new UsageError('--redirect-uri is required');
  const { client, secret } = await registerClient(
    ctx,
    {
      name: options.name,
      grantType,
      redirectUris: options['redirect-uri'] ?? [],
      confidential: options.confidential ?? false,
      trusted: options.trusted ?? false,
      // Public clients prove themselves with PKCE unless asked otherwise (legacy clients, SPEC §2).
      requirePkce: options['require-pkce'] ?? !(options.confidential ?? false),
      scope: (options.scope ?? []).join(' '),
    },
    COMMAND_LINE,
  );
  print(
    { client_id: client.id, ...(secret === null ? {} : { client_secret: secret }) },
    `Created client "${client.name}".\nclient_id: ${client.id}${secret === null ? '' : `\nclient_secret: ${secret}\n(The secret is shown only once: store it now.)`}`,
  );
  return 0;
}

async function resourceCreate(ctx: AppContext, rest: string[], options: Options, print: Print): Promise<number> {
  noArguments(rest);
  if (options.uri === undefined || options.name === undefined) throw new UsageError('usage: gatehouse resource create --uri <uri> --name <n> [--scope "<name>=<description>" …]');
  const scopes = (options.scope ?? []).map(parseScopeDefinition);
  const { resource, secret } = await registerResource(ctx, { uri: options.uri, name: options.name, scopes }, COMMAND_LINE);
  print(
    { uri: resource.uri, client_id: resource.client_id, client_secret: secret },
    `Registered resource server "${resource.name}" at ${resource.uri}.\nIts introspection client:\nclient_id: ${resource.client_id}\nclient_secret: ${secret}\n(The secret is shown only once: store it now.)`,
  );
  return 0;
}

/** `gatehouse audit`: the newest events matching the filters, newest first. */
async function auditCommand(ctx: AppContext, rest: string[], options: Options, print: Print): Promise<number> {
  noArguments(rest);
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
    const user = await findUserNamed(ctx, options.user);
    if (!user) throw new UsageError(`no user named ${options.user}`);
    filter.userId = user.id;
  }
  if (options.client !== undefined) {
    if (!isClientId(options.client)) throw new UsageError(`${options.client} is not a client ID: give a UUID or the https URL of a client ID metadata document`);
    filter.clientId = options.client;
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
      e.username ?? e.user_id ? `user=${e.username ?? e.user_id}` : null,
      e.client_id ? `client=${e.client_id}` : null,
      e.actor ?? e.actor_id ? `by=${e.actor ?? e.actor_id}` : null,
      `from=${e.address ?? 'command-line'}`,
      ...Object.entries(e.detail ?? {}).map(([name, value]) => `${name}=${value}`),
    ]
      .filter((part) => part !== null)
      .join('  ');
  print(json, json.map(line).join('\n') || 'No matching events.');
  return 0;
}

async function readPassword(options: Options): Promise<string> {
  if (options['password-stdin']) {
    const chunks: Buffer[] = [];
    for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks).toString('utf8').replace(/\r?\n$/, '');
  }
  if (!process.stdin.isTTY) throw new UsageError('no terminal to prompt for the password: pass it on standard input with --password-stdin');
  const first = await prompt('Password: ');
  const second = await prompt('Repeat password: ');
  if (first !== second) throw new UsageError('the passwords do not match');
  return first;
}

/** Asks on the terminal without echoing what is typed. */
function prompt(question: string): Promise<string> {
  return new Promise((resolve) => {
    const rl = createInterface({ input: process.stdin, output: process.stdout, terminal: true });
    const output = rl as unknown as { _writeToOutput: (s: string) => void };
    rl.question(question, (answer) => {
      rl.close();
      process.stdout.write('\n');
      resolve(answer);
    });
    output._writeToOutput = () => {};
  });
}

/**
 * `gatehouse serve`: one process that serves, or with WORKERS=n a primary that migrates,
 * prints the setup link, closes the database and forks n workers (src/cluster.ts), each of
 * which serves like the single process.
 */
async function serve(config: Config): Promise<number> {
  if (isWorker) return serveHere(config, null);
  const store = openStore(config.database);
  await migrate(store);
  if (config.workers === 1) return serveHere(config, store);
  const { pino } = await import('pino');
  const log = pino({ level: config.logLevel });
  try {
    await printSetupLink({ config, db: store.db, now: Date.now });
  } finally {
    await store.close();
  }
  log.info({ workers: config.workers }, `Gatehouse is starting ${config.workers} workers on ${config.publicUrl} (database: ${config.database.kind})`);
  return runPrimary(config.workers, log);
}

/** On stderr, apart from the JSON log on stdout: the link is for the person at the terminal, not a log event. */
async function printSetupLink(ctx: Parameters<typeof firstRunSetupLink>[0]): Promise<void> {
  const setupLink = await firstRunSetupLink(ctx);
  if (setupLink) console.error(`\nNo administrator exists yet. Open this link within ${SETUP_LINK_TTL / 60} minutes to create the first one (it works once):\n\n  ${setupLink}\n\nOr from the command line: gatehouse user create <username> --email <email> --admin\n`);
}

/** Serves from this process until SIGTERM or SIGINT; `store` is the migrated database, or null in a worker (which opens its own). */
async function serveHere(config: Config, migrated: Store | null): Promise<number> {
  const store = migrated ?? openStore(config.database);
  // Loaded here only: the HTTP stack is most of the start-up time of the other commands.
  const { buildApp } = await import('./app.ts');
  const app = await buildApp(config, store, { purges: runsPurge() }); // which also schedules the purge (src/http/ops.ts)
  await app.listen({ port: config.port, host: config.host });
  app.log.info(`Gatehouse is listening on ${config.publicUrl} (database: ${config.database.kind})`);
  if (migrated) await printSetupLink(app.gatehouse);

  return new Promise((resolve) => {
    let stopping = false;
    const stop = async (signal: string) => {
      // A worker gets Ctrl-C twice, from the terminal and passed on by the primary: the second changes nothing.
      if (stopping) return;
      stopping = true;
      app.log.info(`${signal}: finishing in-flight requests, then exiting`);
      try {
        await app.close(); // stops accepting, waits for in-flight requests
        await store.close();
        resolve(0);
      } catch (error) {
        // Logged like everything else (a JSON line), not thrown as a stack trace.
        app.log.error({ error: (error as Error).message }, 'shutdown failed');
        resolve(1);
      }
    };
    process.on('SIGTERM', () => void stop('SIGTERM'));
    process.on('SIGINT', () => void stop('SIGINT'));
  });
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    const known = error instanceof ConfigError || error instanceof UsageError || error instanceof InputError;
    console.error(`gatehouse: ${known ? (error as Error).message : `unexpected error: ${(error as Error).message}`}`);
    process.exit(known ? 2 : 1);
  },
);
