/**
 * Connections to upstream identity providers (SPEC §2 `gatehouse connection`, §4.13,
 * `/admin/connections`): what an administrator registers, validated, stored and audited here
 * for the command line and the admin pages alike (`connection_created`, `connection_updated`,
 * `connection_disabled`, `connection_enabled`, `connection_deleted`, by the given actor).
 *
 * A connection's id is made from its name when it is created and never changes: it is part of
 * the callback URL registered at the provider, `<PUBLIC_URL>/login/connections/<id>/callback`,
 * which an administrator can therefore know before registering. The presets fill in what
 * each provider needs; the provider's client secret is sealed at rest (protocol/seal.ts) and
 * never shown again.
 */
import { madeBy, type Actor } from '../../audit.ts';
import type { AppContext } from '../../context.ts';
import { InputError, cut } from '../../input-error.ts';
import { open, seal } from '../../protocol/seal.ts';
import type { Connection, ConnectionPreset, ConnectionsTable } from '../../store/schema.ts';
import {
  connectionIdTaken,
  countIdentities,
  endConnectionSessions,
  findConnection,
  identitiesOf,
  identitiesOfUsers,
  forgetProviderTokens,
  insertConnection,
  listConnections,
  tokenResourcesOf,
  updateConnection,
  type TokenResource,
} from '../../store/connections.ts';
import type { Updateable } from 'kysely';
import { normalizeResourceUri } from '../../oauth/resources.ts';
import { findResourceByUri } from '../../store/resources.ts';

/** For the admin pages, which read no store module. */
export { tokenResourcesOf };

export type { Connection };

/** A problem with what was asked for, naming the field at fault. */
export class ConnectionInputError extends InputError {
  override name = 'ConnectionInputError';
}

export const CONNECTION_PRESETS: readonly ConnectionPreset[] = ['github', 'google', 'microsoft', 'gitlab', 'orcid'];

/** What each preset fills in: its kind, the scopes it asks for, and where its endpoints are. */
const PRESETS: Record<ConnectionPreset, { label: string; scope: string; takes: 'base_url' | 'tenant' | null }> = {
  github: { label: 'GitHub', scope: 'read:user user:email', takes: 'base_url' },
  google: { label: 'Google', scope: 'openid email profile', takes: null },
  microsoft: { label: 'Microsoft', scope: 'openid email profile', takes: 'tenant' },
  gitlab: { label: 'GitLab', scope: 'openid email profile', takes: 'base_url' },
  orcid: { label: 'ORCID', scope: 'openid', takes: null },
};

/** Where a preset's provider is: the issuer of an OpenID Connect one, or GitHub's three URLs. */
function presetEndpoints(preset: ConnectionPreset, baseUrl: string | null, tenant: string | null) {
  switch (preset) {
    case 'github': {
      // GitHub Enterprise Server serves its REST API under /api/v3 of the same host.
      const [web, api] = baseUrl === null ? ['https://github.com', 'https://api.github.com'] : [baseUrl, `${baseUrl}/api/v3`];
      return {
        kind: 'oauth2' as const,
        issuer: null,
        authorizationUrl: `${web}/login/oauth/authorize`,
        tokenUrl: `${web}/login/oauth/access_token`,
        userinfoUrl: `${api}/user`,
      };
    }
    case 'google':
      return { kind: 'oidc' as const, issuer: 'https://accounts.google.com' };
    case 'microsoft':
      return { kind: 'oidc' as const, issuer: `https://login.microsoftonline.com/${tenant}/v2.0` };
    case 'gitlab':
      return { kind: 'oidc' as const, issuer: baseUrl ?? 'https://gitlab.com' };
    case 'orcid':
      return { kind: 'oidc' as const, issuer: 'https://orcid.org' };
  }
}

export interface ConnectionInput {
  name?: string;
  preset?: string | null;
  issuer?: string | null;
  kind?: string | null;
  authorizationUrl?: string | null;
  tokenUrl?: string | null;
  userinfoUrl?: string | null;
  baseUrl?: string | null;
  tenant?: string | null;
  clientId?: string;
  /** Given on creation; on an update, absent keeps the stored one. */
  clientSecret?: string;
  /** Space-separated; absent: the preset's, or `openid email profile` for OpenID Connect. */
  scope?: string | null;
  domains?: readonly string[];
  required?: boolean;
  createAccounts?: boolean;
  linkVerifiedEmail?: boolean;
  groupsClaim?: string | null;
  trustMfa?: boolean;
  allowPrivateAddress?: boolean;
  /** SPEC §4.15: keep the provider's tokens (needs KEYS_SECRET), and the URIs of the resource servers that may exchange for them. */
  keepTokens?: boolean;
  tokenResources?: readonly string[];
}

/** What may be shown of a connection: everything but its secret. */
export function describeConnection(ctx: AppContext, row: Connection) {
  return {
    id: row.id,
    name: row.name,
    kind: row.kind,
    preset: row.preset,
    issuer: row.issuer,
    authorization_url: row.authorization_url,
    token_url: row.token_url,
    userinfo_url: row.userinfo_url,
    base_url: row.base_url,
    tenant: row.tenant,
    client_id: row.client_id,
    scope: row.scope,
    domains: domainsOf(row),
    required: row.required === 1,
    create_accounts: row.create_accounts === 1,
    link_verified_email: row.link_verified_email === 1,
    groups_claim: row.groups_claim,
    trust_mfa: row.trust_mfa === 1,
    allow_private_address: row.allow_private_address === 1,
    keep_tokens: row.keep_tokens === 1,
    token_resources: tokenResourcesOf(row).map((allowed) => allowed.uri),
    enabled: row.enabled === 1,
    callback_url: callbackUrl(ctx, row.id),
    created_at: row.created_at,
  };
}

/** At most this many resource servers may have a connection's provider tokens: each is looked up when the list is set. */
const MAX_TOKEN_RESOURCES = 50;

/**
 * The vault settings (SPEC §4.15) as stored, from what was asked for (absent: as they are): the
 * provider's tokens are kept only sealed, so only with KEYS_SECRET; each resource server named
 * must be registered, with a client of its own to exchange with.
 */
async function vaultSettings(ctx: AppContext, input: ConnectionInput, current: Connection | null): Promise<Updateable<ConnectionsTable>> {
  const patch: Updateable<ConnectionsTable> = {};
  if (input.keepTokens !== undefined) patch.keep_tokens = input.keepTokens ? 1 : 0;
  if ((patch.keep_tokens ?? current?.keep_tokens ?? 0) === 1 && ctx.config.keys.secret === null)
    throw new ConnectionInputError('keep_tokens', 'Keeping the provider’s tokens needs KEYS_SECRET: they are stored only encrypted under it');
  if (input.tokenResources !== undefined) {
    const notRegistered = (given: string) =>
      new ConnectionInputError('token_resources', `Resource server ${cut(given, 200)} is not registered (see gatehouse resource list)`);
    // Each name as its resource URI: one resource server, however often and however written (the
    // host's case, a trailing slash), is looked up once and counts once.
    const named = new Map<string, string>();
    for (const given of input.tokenResources) {
      const normalized = normalizeResourceUri(given.trim());
      if (!('uri' in normalized)) throw notRegistered(given.trim());
      if (!named.has(normalized.uri)) named.set(normalized.uri, given.trim());
      if (named.size > MAX_TOKEN_RESOURCES) throw new ConnectionInputError('token_resources', `At most ${MAX_TOKEN_RESOURCES} resource servers may be named`);
    }
    const allowed: TokenResource[] = [];
    for (const [uri, given] of named) {
      const resource = await findResourceByUri(ctx.db, uri);
      // The built-in resource has no client of its own to exchange with.
      if (!resource || resource.client_id === null) throw notRegistered(given);
      if (!allowed.some((each) => each.id === resource.id)) allowed.push({ id: resource.id, uri });
    }
    patch.token_resources = JSON.stringify(allowed);
  }
  return patch;
}

/** The URL to register at the provider as the redirect (callback) URL. */
export function callbackUrl(ctx: AppContext, id: string): string {
  return new URL(`/login/connections/${encodeURIComponent(id)}/callback`, ctx.config.publicUrl).href;
}

export function domainsOf(row: Pick<Connection, 'domains'>): string[] {
  return JSON.parse(row.domains) as string[];
}

/** The provider's client secret, opened (protocol/seal.ts). */
export function clientSecretOf(ctx: AppContext, row: Connection): Promise<string> {
  return open('connections', row.id, { value: row.client_secret, encrypted: row.encrypted }, ctx.config.keys.secret);
}

/** The id a connection named `name` gets: its letters and digits, lower case, words joined by `-`. */
export function slugOf(name: string): string {
  const slug = name
    .normalize('NFKD')
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 40)
    .replace(/-+$/, '');
  return slug === '' ? 'connection' : slug;
}

/** Why `url` cannot be a provider URL: an absolute https URL, no fragment, query or credentials. */
function providerUrlProblem(url: string): string | null {
  if (url.length > 2000 || !URL.canParse(url)) return 'must be an absolute https URL';
  const parsed = new URL(url);
  if (parsed.protocol !== 'https:') return 'must be an https URL';
  if (url.includes('#') || url.includes('?') || parsed.username !== '' || parsed.password !== '') return 'must have no query, fragment or credentials';
  return null;
}

/**
 * A provider URL as given (an issuer is compared exactly, its final `/` included: Auth0's has
 * one); a base URL, which paths are appended to, without its final `/`.
 */
function checkedUrl(field: string, label: string, value: string | null | undefined): string | null {
  const url = value?.trim() || null;
  const problem = url === null ? null : providerUrlProblem(url);
  if (problem) throw new ConnectionInputError(field, `${label} ${problem}`);
  return url !== null && field === 'base_url' ? url.replace(/\/+$/, '') : url;
}

const DOMAIN = /^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$/;
const CLAIM = /^[A-Za-z0-9_:.\/-]{1,100}$/;
const SCOPE_TOKEN = /^[\x21\x23-\x5b\x5d-\x7e]+$/;
const TENANT = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const MAX_NAME_LENGTH = 100;

/** Settings common to create and update, validated: the row's columns they set. */
function settingsOf(input: ConnectionInput, current: Connection | null): Updateable<ConnectionsTable> {
  const patch: Updateable<ConnectionsTable> = {};
  if (input.name !== undefined) {
    const name = input.name.trim();
    if (name === '' || name.length > MAX_NAME_LENGTH || /[\p{Cc}\p{Cf}]/u.test(name))
      throw new ConnectionInputError('name', `Name must be 1-${MAX_NAME_LENGTH} characters, none of them control characters`);
    patch.name = name;
  }
  if (input.clientId !== undefined) {
    const clientId = input.clientId.trim();
    if (clientId === '' || clientId.length > 500 || /[\p{Cc}\s]/u.test(clientId))
      throw new ConnectionInputError('client_id', 'Client ID must be 1-500 characters, no spaces');
    patch.client_id = clientId;
  }
  if (input.scope !== undefined && input.scope !== null) {
    const scopes = input.scope.split(' ').filter((s) => s !== '');
    if (scopes.length === 0 || scopes.length > 30 || !scopes.every((s) => SCOPE_TOKEN.test(s)))
      throw new ConnectionInputError('scope', 'Scope must be space-separated scope names');
    patch.scope = scopes.join(' ');
  }
  if (input.domains !== undefined) {
    const domains = [...new Set(input.domains.map((d) => d.trim().toLowerCase()).filter((d) => d !== ''))];
    const bad = domains.find((d) => !DOMAIN.test(d));
    if (bad !== undefined) throw new ConnectionInputError('domains', `"${bad}" is not an email domain`);
    patch.domains = JSON.stringify(domains);
  }
  if (input.groupsClaim !== undefined) {
    const claim = input.groupsClaim?.trim() || null;
    if (claim !== null && !CLAIM.test(claim)) throw new ConnectionInputError('groups_claim', 'Groups claim must be a claim name');
    patch.groups_claim = claim;
  }
  for (const [key, column] of [
    ['required', 'required'],
    ['createAccounts', 'create_accounts'],
    ['linkVerifiedEmail', 'link_verified_email'],
    ['trustMfa', 'trust_mfa'],
    ['allowPrivateAddress', 'allow_private_address'],
  ] as const) {
    if (input[key] !== undefined) patch[column] = input[key] ? 1 : 0;
  }
  const required = patch.required ?? current?.required ?? 0;
  const domains = patch.domains ?? current?.domains ?? '[]';
  if (required === 1 && domains === '[]') throw new ConnectionInputError('required', 'A required connection needs --domains: the people it is required for');
  return patch;
}

/** Where the provider is, validated: the columns that say it, for a new connection or a changed one. */
function providerOf(input: ConnectionInput, current: Connection | null): Updateable<ConnectionsTable> {
  // Naming the provider's URLs leaves the preset; a preset kept keeps its base URL and tenant.
  const leavesPreset = [input.issuer, input.kind, input.authorizationUrl, input.tokenUrl, input.userinfoUrl].some((value) => value);
  if (leavesPreset && input.preset) throw new ConnectionInputError('preset', 'Give a preset or the provider’s URLs, not both');
  const preset = input.preset !== undefined ? input.preset || null : leavesPreset ? null : (current?.preset ?? null);
  if (preset !== null && !(CONNECTION_PRESETS as readonly string[]).includes(preset))
    throw new ConnectionInputError('preset', `Preset must be one of ${CONNECTION_PRESETS.join(', ')}`);
  const samePreset = preset !== null && preset === current?.preset;
  const baseUrl = input.baseUrl !== undefined ? checkedUrl('base_url', 'Base URL', input.baseUrl) : samePreset ? current!.base_url : null;
  const tenant = input.tenant !== undefined ? input.tenant?.trim() || null : samePreset ? current!.tenant : null;
  if (preset !== null) {
    const takes = PRESETS[preset as ConnectionPreset].takes;
    if (baseUrl !== null && takes !== 'base_url') throw new ConnectionInputError('base_url', `The ${preset} preset takes no base URL`);
    if (tenant !== null && takes !== 'tenant') throw new ConnectionInputError('tenant', `The ${preset} preset takes no tenant`);
    // The tenant's id: only then is the issuer its discovery document names the URL it is fetched from.
    if (takes === 'tenant' && (tenant === null || !TENANT.test(tenant)))
      throw new ConnectionInputError('tenant', 'The microsoft preset needs --tenant: the Directory (tenant) ID, a GUID');
    const endpoints = presetEndpoints(preset as ConnectionPreset, baseUrl, tenant);
    return {
      preset: preset as ConnectionPreset,
      base_url: baseUrl,
      tenant,
      kind: endpoints.kind,
      issuer: endpoints.issuer,
      authorization_url: 'authorizationUrl' in endpoints ? endpoints.authorizationUrl : null,
      token_url: 'tokenUrl' in endpoints ? endpoints.tokenUrl : null,
      userinfo_url: 'userinfoUrl' in endpoints ? endpoints.userinfoUrl : null,
    };
  }
  if (baseUrl !== null || tenant !== null) throw new ConnectionInputError('preset', '--base-url and --tenant go with a preset');
  const issuer = input.issuer === undefined ? (current?.issuer ?? null) : checkedUrl('issuer', 'Issuer', input.issuer);
  const kind = input.kind?.trim() || (issuer !== null ? 'oidc' : (current?.kind ?? null));
  if (kind === 'oidc') {
    if (issuer === null) throw new ConnectionInputError('issuer', 'An OpenID Connect connection needs --issuer');
    return { preset: null, base_url: null, tenant: null, kind, issuer, authorization_url: null, token_url: null, userinfo_url: null };
  }
  if (kind !== 'oauth2') throw new ConnectionInputError('kind', 'Give --preset, --issuer, or --kind oauth2 with the provider’s URLs');
  const urls = {
    authorization_url:
      input.authorizationUrl === undefined
        ? (current?.authorization_url ?? null)
        : checkedUrl('authorization_url', 'Authorization URL', input.authorizationUrl),
    token_url: input.tokenUrl === undefined ? (current?.token_url ?? null) : checkedUrl('token_url', 'Token URL', input.tokenUrl),
    userinfo_url: input.userinfoUrl === undefined ? (current?.userinfo_url ?? null) : checkedUrl('userinfo_url', 'User info URL', input.userinfoUrl),
  };
  for (const [field, url] of Object.entries(urls))
    if (url === null) throw new ConnectionInputError(field, 'An oauth2 connection needs --authorization-url, --token-url and --userinfo-url');
  return { preset: null, base_url: null, tenant: null, kind: 'oauth2', issuer: null, ...urls };
}

/** The scopes a connection asks for when none were given. */
function defaultScope(provider: Updateable<ConnectionsTable>): string {
  return provider.preset ? PRESETS[provider.preset as ConnectionPreset].scope : provider.kind === 'oidc' ? 'openid email profile' : '';
}

/** Validates and stores a connection, and records who did; its id comes from its name (made unique). */
export async function createConnection(ctx: AppContext, input: ConnectionInput, actor: Actor): Promise<Connection> {
  if (input.name === undefined || input.name.trim() === '') throw new ConnectionInputError('name', 'A connection needs --name');
  if (input.clientId === undefined) throw new ConnectionInputError('client_id', 'A connection needs --client-id');
  const secret = input.clientSecret ?? '';
  if (secret === '' || secret.length > 2000)
    throw new ConnectionInputError('client_secret', 'A connection needs the client secret the provider gave (1-2000 characters)');
  const settings: ConnectionInput = {
    ...input,
    createAccounts: input.createAccounts ?? true,
    linkVerifiedEmail: input.linkVerifiedEmail ?? false,
    required: input.required ?? false,
    trustMfa: input.trustMfa ?? false,
    allowPrivateAddress: input.allowPrivateAddress ?? false,
    domains: input.domains ?? [],
    groupsClaim: input.groupsClaim ?? null,
  };
  const patch = { ...settingsOf(settings, null), ...(await vaultSettings(ctx, { keepTokens: false, tokenResources: [], ...input }, null)) };
  const provider = providerOf(input, null);
  const scope = patch.scope ?? defaultScope(provider);
  if (provider.kind === 'oidc' && !scope.split(' ').includes('openid'))
    throw new ConnectionInputError('scope', 'An OpenID Connect connection’s scope must include openid');
  const base = slugOf(patch.name as string);
  const now = ctx.now();
  for (let n = 1; n < 100; n++) {
    const id = n === 1 ? base : `${base}-${n}`;
    if (await connectionIdTaken(ctx.db, id)) continue;
    const sealed = await seal('connections', id, secret, ctx.config.keys.secret);
    const row = {
      ...(patch as Required<typeof patch>),
      ...(provider as Required<typeof provider>),
      id,
      scope,
      client_secret: sealed.value,
      encrypted: sealed.encrypted,
      enabled: 1,
      created_at: now,
      updated_at: now,
    } satisfies Connection;
    if (!(await insertConnection(ctx.db, row))) continue;
    await ctx.audit({ type: 'connection_created', ...madeBy(actor), detail: { connection: id, kind: row.kind, preset: row.preset } });
    return row;
  }
  throw new ConnectionInputError('name', 'Too many connections have that name');
}

/** A connection by id, or a ConnectionInputError naming it. */
export async function connectionNamed(ctx: AppContext, id: string): Promise<Connection> {
  const row = await findConnection(ctx.db, id);
  if (!row) throw new ConnectionInputError('id', `No connection "${id}"`);
  return row;
}

export function allConnections(ctx: AppContext): Promise<Connection[]> {
  return listConnections(ctx.db);
}

/** The enabled connections, as the login page offers them. */
export async function enabledConnections(ctx: AppContext): Promise<Connection[]> {
  return (await listConnections(ctx.db)).filter((row) => row.enabled === 1);
}

/** The person's identities at connections (enabled or not), with each connection's name, for /account/security. */
export function identitiesOfPerson(ctx: AppContext, userId: string) {
  return identitiesOf(ctx.db, userId);
}

/** The names of the connections each of these people has an identity at (the admin list of users), by user id. */
export function connectionNamesOfUsers(ctx: AppContext, userIds: readonly string[]): Promise<Map<string, string[]>> {
  return identitiesOfUsers(ctx.db, userIds);
}

/** The columns that say which provider a connection's identities belong to. */
const PROVIDER_COLUMNS = ['kind', 'issuer', 'authorization_url', 'token_url', 'userinfo_url', 'base_url', 'tenant'] as const;

/** Changes what `input` gives (absent: as it is) and records which settings changed, never their values. */
export async function updateConnectionSettings(ctx: AppContext, id: string, input: ConnectionInput, actor: Actor): Promise<Connection> {
  const current = await connectionNamed(ctx, id);
  const patch = { ...settingsOf(input, current), ...(await vaultSettings(ctx, input, current)) };
  const movesProvider = [input.preset, input.issuer, input.kind, input.authorizationUrl, input.tokenUrl, input.userinfoUrl, input.baseUrl, input.tenant].some(
    (value) => value !== undefined,
  );
  if (movesProvider) {
    const provider = providerOf(input, current);
    // An identity is (connection, the provider's sub): at another provider the same sub is someone else.
    const elsewhere = PROVIDER_COLUMNS.some((column) => provider[column] !== current[column]);
    if (elsewhere && (await countIdentities(ctx.db, id)) > 0)
      throw new ConnectionInputError(
        'issuer',
        'People have logged in through this connection: another provider’s identities are other people. Create a new connection for it instead',
      );
    Object.assign(patch, provider);
    // Another provider asks for its own scopes unless others are given.
    if (input.scope === undefined && patch.preset !== current.preset) patch.scope = defaultScope(patch) || current.scope;
  }
  const scope = (patch.scope ?? current.scope) as string;
  if ((patch.kind ?? current.kind) === 'oidc' && !scope.split(' ').includes('openid'))
    throw new ConnectionInputError('scope', 'An OpenID Connect connection’s scope must include openid');
  if (input.clientSecret !== undefined) {
    if (input.clientSecret === '' || input.clientSecret.length > 2000)
      throw new ConnectionInputError('client_secret', 'Client secret must be 1-2000 characters');
    const sealed = await seal('connections', id, input.clientSecret, ctx.config.keys.secret);
    Object.assign(patch, { client_secret: sealed.value, encrypted: sealed.encrypted });
  }
  const changed = (Object.keys(patch) as Array<keyof typeof patch & keyof Connection>).filter(
    (column) => column === 'client_secret' || patch[column] !== current[column],
  );
  if (changed.length === 0) return current;
  await updateConnection(ctx.db, id, { ...patch, updated_at: ctx.now() });
  if (patch.keep_tokens === 0) await forgetProviderTokens(ctx.db, { connectionId: id });
  await ctx.audit({ type: 'connection_updated', ...madeBy(actor), detail: { connection: id, changed: changed.filter((c) => c !== 'encrypted').join(' ') } });
  return { ...current, ...(patch as Partial<Connection>) };
}

/**
 * Disables (or enables) a connection. Disabling ends the sessions that came through it, and
 * its people's half-done second steps: whoever logged in there may be the reason it is off.
 */
export async function setConnectionEnabled(ctx: AppContext, id: string, enabled: boolean, actor: Actor): Promise<void> {
  const current = await connectionNamed(ctx, id);
  if ((current.enabled === 1) === enabled) return;
  await updateConnection(ctx.db, id, { enabled: enabled ? 1 : 0, updated_at: ctx.now() });
  if (!enabled && (await endConnectionSessions(ctx.db, id, ctx.now(), { remove: false, address: actor.address })) > 0) ctx.backchannelLogouts.wake();
  await ctx.audit({ type: enabled ? 'connection_enabled' : 'connection_disabled', ...madeBy(actor), detail: { connection: id } });
}

/** Deletes a connection: its sessions end, its people's identities there are unlinked. */
export async function deleteConnection(ctx: AppContext, id: string, actor: Actor): Promise<void> {
  await connectionNamed(ctx, id);
  if ((await endConnectionSessions(ctx.db, id, ctx.now(), { remove: true, address: actor.address })) > 0) ctx.backchannelLogouts.wake();
  await ctx.audit({ type: 'connection_deleted', ...madeBy(actor), detail: { connection: id } });
}

/** The label of a preset, for pages ("Continue with GitHub" needs no more than the name, which defaults to it). */
export function presetLabel(preset: ConnectionPreset): string {
  return PRESETS[preset].label;
}
