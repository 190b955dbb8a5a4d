/**
 * Resource server administration (SPEC §2, §4.5): registering, changing and deleting
 * resource servers and their scopes, shared by the CLI and the admin pages. Each change
 * records its own audit event, made by the given actor. Taking scopes away (deleting a scope
 * or a resource server) revokes every grant that holds them, on every instance.
 */
import { dropTokenResource } from '../store/connections.ts';
import { InputError, cut } from '../input-error.ts';
import { randomUUID } from 'node:crypto';
import { madeBy, type Actor } from '../audit.ts';
import { ACCESS_TOKEN_TTL_RANGE, SCOPES } from '../config.ts';
import type { AppContext } from '../context.ts';
import { BUILTIN_RESOURCE_ID, accessTokenTtl, builtinResourceUri, normalizeResourceUri } from '../oauth/resources.ts';
import { isIdentityScope, isScopeToken } from '../oauth/scopes.ts';
import { CLIENT_CREDENTIALS_GRANT_TYPE } from '../oauth/grants/types.ts';
import {
  deleteResource,
  deleteScope,
  findResourceById,
  findResourceByUri,
  findScope,
  insertResource,
  insertScope,
  listResources as listAllResources,
  listResourcePage,
  listScopes,
  takenScopeNames,
  updateResource,
  updateScopeDescription,
} from '../store/resources.ts';
import type { Page, PageCursor } from '../store/clients.ts';
import type { Resource, ScopeRow, SigningAlg, TokenFormat } from '../store/schema.ts';
import { SIGNING_ALGS } from '../identity/key-schedule.ts';
import { mintToken } from '../tokens.ts';

/** A problem with what was asked for, naming the field at fault. */
export class ResourceInputError extends InputError {
  override name = 'ResourceInputError';
}

export interface ScopeInput {
  name: string;
  description: string;
}

/**
 * How a resource server's tokens are to be made (SPEC §2), as written on the command line or
 * a form; absent: unchanged (on registration: the default).
 */
export interface TokenSettingsInput {
  tokenFormat?: string;
  signingAlg?: string;
  /** Whole seconds; '' or 'default': the default of the token format. */
  accessTokenTtl?: string;
  requireSecondFactor?: boolean;
  /** Its tokens only with a DPoP proof (SPEC §4.14). */
  requireDpop?: boolean;
}

export interface ResourceInput extends TokenSettingsInput {
  uri: string;
  name: string;
  scopes: ScopeInput[];
}

/** A resource server as shown anywhere — the CLI, the admin pages. */
export interface ResourceView {
  id: string;
  uri: string;
  name: string;
  builtin: boolean;
  /** Its introspection client; null for the built-in one (or once that client was deleted). */
  client_id: string | null;
  scopes: ScopeInput[];
  token_format: TokenFormat;
  /** The algorithm its JWT access tokens are signed with. */
  signing_alg: SigningAlg;
  /** Its access tokens' lifetime as set, in seconds; null: the default of its format. */
  access_token_ttl: number | null;
  /** The lifetime its access tokens get now, in seconds. */
  access_token_lifetime: number;
  /** Whether its tokens need a login with a second factor (SPEC §4.12; enforced once second factors exist). */
  require_second_factor: boolean;
  /** Whether its tokens are issued only with a DPoP proof, bound to the client's key (SPEC §4.14). */
  require_dpop: boolean;
}

export interface RegisteredResource {
  resource: ResourceView;
  /** The introspection client's secret: only now, it is stored hashed. */
  secret: string;
}

const MAX_NAME = 100;
const MAX_DESCRIPTION = 200;

export const TOKEN_FORMATS: readonly TokenFormat[] = ['opaque', 'jwt'];
type TokenSettingsRow = Pick<Resource, 'token_format' | 'signing_alg' | 'access_token_ttl' | 'require_second_factor' | 'require_dpop'>;
const DEFAULT_SETTINGS: TokenSettingsRow = { token_format: 'opaque', signing_alg: 'ES256', access_token_ttl: null, require_second_factor: 0, require_dpop: 0 };

/**
 * The settings after the change asked for, all checked before anything is written: the
 * lifetime (given now, or kept) against the format the resource server will have.
 */
function settingsAfter(current: TokenSettingsRow, input: TokenSettingsInput, builtin: boolean): TokenSettingsRow {
  const after = { ...current };
  if (input.tokenFormat !== undefined) {
    const format = TOKEN_FORMATS.find((f) => f === input.tokenFormat);
    if (format === undefined) throw new ResourceInputError('token_format', `token format must be ${TOKEN_FORMATS.join(' or ')}, got "${input.tokenFormat}"`);
    // SPEC §4.9: the service's own API checks opaque tokens only.
    if (builtin && format !== current.token_format)
      throw new ResourceInputError('token_format', "the built-in resource's token format cannot be changed: it stays opaque");
    after.token_format = format;
  }
  if (input.signingAlg !== undefined) {
    const alg = SIGNING_ALGS.find((a) => a === input.signingAlg);
    if (alg === undefined) throw new ResourceInputError('signing_alg', `signing algorithm must be ${SIGNING_ALGS.join(' or ')}, got "${input.signingAlg}"`);
    after.signing_alg = alg;
  }
  if (input.accessTokenTtl !== undefined) {
    const written = input.accessTokenTtl.trim();
    after.access_token_ttl = written === '' || written === 'default' ? null : /^\d{1,9}$/.test(written) ? Number(written) : NaN;
  }
  const [min, max] = ACCESS_TOKEN_TTL_RANGE[after.token_format];
  const ttl = after.access_token_ttl;
  if (ttl !== null && !(ttl >= min && ttl <= max)) {
    const given = input.accessTokenTtl === undefined ? `it is ${ttl}: give a new lifetime too` : `got "${input.accessTokenTtl}"`;
    throw new ResourceInputError(
      'access_token_ttl',
      `access token lifetime must be a whole number of seconds from ${min} to ${max} for ${after.token_format} tokens (or default), ${given}`,
    );
  }
  if (input.requireSecondFactor !== undefined) after.require_second_factor = input.requireSecondFactor ? 1 : 0;
  if (input.requireDpop !== undefined) after.require_dpop = input.requireDpop ? 1 : 0;
  return after;
}

/** Parses `name=description`, the CLI's and the admin form's way of writing a scope. */
export function parseScopeDefinition(text: string): ScopeInput {
  const equals = text.indexOf('=');
  if (equals < 0) throw new ResourceInputError('scopes', `write each scope as name=description, got "${cut(text, 100)}"`);
  return { name: text.slice(0, equals).trim(), description: text.slice(equals + 1).trim() };
}

function scopeProblem(scope: ScopeInput): ResourceInputError | null {
  if (!isScopeToken(scope.name) || scope.name.length > MAX_NAME)
    return new ResourceInputError('scopes', `"${cut(scope.name, 100)}" is not a valid scope name (visible ASCII without spaces, quotes or backslashes)`);
  if (isIdentityScope(scope.name))
    return new ResourceInputError('scopes', `${scope.name} is an identity scope of OpenID Connect: it belongs to no resource server`);
  if (scope.description === '' || scope.description.length > MAX_DESCRIPTION)
    return new ResourceInputError('scopes', `the description of ${scope.name} must be 1-${MAX_DESCRIPTION} characters`);
  return null;
}

function nameProblem(name: string): ResourceInputError | null {
  const trimmed = name.trim();
  return trimmed === '' || trimmed.length > MAX_NAME ? new ResourceInputError('name', `Name must be 1-${MAX_NAME} characters`) : null;
}

/** Scope names must be new and unique across resource servers (SPEC §3). */
async function checkNewScopes(ctx: AppContext, scopes: readonly ScopeInput[]): Promise<void> {
  for (const scope of scopes) {
    const problem = scopeProblem(scope);
    if (problem) throw problem;
  }
  const names = scopes.map((s) => s.name);
  const repeated = names.find((name, i) => names.indexOf(name) !== i);
  if (repeated !== undefined) throw new ResourceInputError('scopes', `scope ${repeated} is named twice`);
  const taken = await takenScopeNames(ctx.db, names);
  if (taken.length > 0) throw new ResourceInputError('scopes', `scope ${taken.join(', ')} exists already (scope names are unique across resource servers)`);
}

/** The normalized URI, which must be new (not the built-in resource's either). */
async function newResourceUri(ctx: AppContext, raw: string): Promise<string> {
  const normalized = normalizeResourceUri(raw.trim());
  if (!('uri' in normalized)) throw new ResourceInputError('uri', `URI ${normalized.problem}`);
  if (normalized.uri === builtinResourceUri(ctx) || (await findResourceByUri(ctx.db, normalized.uri))) {
    throw new ResourceInputError('uri', `a resource server with the URI ${normalized.uri} exists already`);
  }
  return normalized.uri;
}

function view(ctx: AppContext, resource: Resource, scopes: readonly ScopeRow[]): ResourceView {
  const builtin = resource.id === BUILTIN_RESOURCE_ID;
  return {
    id: resource.id,
    uri: builtin ? builtinResourceUri(ctx) : resource.uri!,
    name: resource.name,
    builtin,
    client_id: resource.client_id,
    scopes: scopes.filter((s) => s.resource_id === resource.id).map((s) => ({ name: s.name, description: s.description })),
    token_format: resource.token_format,
    signing_alg: resource.signing_alg,
    access_token_ttl: resource.access_token_ttl,
    access_token_lifetime: accessTokenTtl(resource, ctx.config),
    require_second_factor: resource.require_second_factor === 1,
    require_dpop: resource.require_dpop === 1,
  };
}

/** Every resource server with its scopes, the built-in one first. */
export async function listResources(ctx: AppContext): Promise<ResourceView[]> {
  const scopes = await listScopes(ctx.db);
  return (await listAllResources(ctx.db)).map((resource) => view(ctx, resource, scopes));
}

/** A page of at most `limit` resource servers with their scopes, in creation order (the built-in one first): the admin list. */
export async function listResourceViews(ctx: AppContext, cursor: PageCursor, limit: number): Promise<Page<ResourceView>> {
  const [page, scopes] = await Promise.all([listResourcePage(ctx.db, cursor, limit), listScopes(ctx.db)]);
  return { ...page, rows: page.rows.map((resource) => view(ctx, resource, scopes)) };
}

/** The resource server with this id; undefined when there is none. */
export async function findResource(ctx: AppContext, id: string): Promise<ResourceView | undefined> {
  const resource = await findResourceById(ctx.db, id);
  return resource && view(ctx, resource, await listScopes(ctx.db));
}

/** The resource server with this URI (in any spelling that normalizes to it); undefined when there is none. */
export async function findResourceNamed(ctx: AppContext, uri: string): Promise<ResourceView | undefined> {
  const normalized = normalizeResourceUri(uri.trim());
  if (!('uri' in normalized)) return undefined;
  if (normalized.uri === builtinResourceUri(ctx)) return findResource(ctx, BUILTIN_RESOURCE_ID);
  const resource = await findResourceByUri(ctx.db, normalized.uri);
  return resource && view(ctx, resource, await listScopes(ctx.db));
}

/**
 * Registers a resource server with its scopes and its own confidential client, with which it
 * introspects (it cannot obtain tokens: oauth/grants/client-credentials.ts).
 */
export async function registerResource(ctx: AppContext, input: ResourceInput, actor: Actor): Promise<RegisteredResource> {
  const nameError = nameProblem(input.name);
  if (nameError) throw nameError;
  const uri = await newResourceUri(ctx, input.uri);
  await checkNewScopes(ctx, input.scopes);
  const settings = settingsAfter(DEFAULT_SETTINGS, input, false);
  const now = ctx.now();
  const secret = mintToken('clientSecret');
  const name = input.name.trim();
  const client = {
    id: randomUUID(),
    name: `${name} (introspection)`.slice(0, MAX_NAME),
    grant_type: CLIENT_CREDENTIALS_GRANT_TYPE,
    redirect_uris: '[]',
    secret_hash: secret.hash,
    trusted: 0,
    require_pkce: 0,
    // It obtains no tokens, so it needs no scope.
    scopes: '',
    created_at: now,
  };
  const resource: Resource = { id: randomUUID(), uri, name, client_id: client.id, created_at: now, ...settings };
  await insertResource(ctx.db, resource, client, input.scopes);
  ctx.onScopesChanged();
  await ctx.audit({
    type: 'resource_created',
    ...madeBy(actor),
    clientId: client.id,
    detail: { resource: uri, scope: input.scopes.map((s) => s.name).join(' '), ...settings },
  });
  const scopes = input.scopes.map((s) => ({ ...s, resource_id: resource.id, created_at: now }));
  return { resource: view(ctx, resource, scopes), secret: secret.token };
}

/** Renames a resource server (its URI is its identity: tokens carry it as their audience). */
export async function renameResource(ctx: AppContext, resource: ResourceView, name: string, actor: Actor): Promise<void> {
  const problem = nameProblem(name);
  if (problem) throw problem;
  await updateResource(ctx.db, resource.id, { name: name.trim() });
  await ctx.audit({ type: 'resource_updated', ...madeBy(actor), detail: { resource: resource.uri } });
}

/**
 * Changes how the resource server's access tokens are made; tokens issued already keep their
 * format and expiry. Bad input changes nothing. Audited with what changed (nothing changed:
 * no write, no event).
 */
export async function changeTokenSettings(ctx: AppContext, resource: ResourceView, input: TokenSettingsInput, actor: Actor): Promise<ResourceView> {
  const current: TokenSettingsRow = {
    token_format: resource.token_format,
    signing_alg: resource.signing_alg,
    access_token_ttl: resource.access_token_ttl,
    require_second_factor: resource.require_second_factor ? 1 : 0,
    require_dpop: resource.require_dpop ? 1 : 0,
  };
  const after = settingsAfter(current, input, resource.builtin);
  const changed = Object.fromEntries(
    Object.entries(after).filter(([key, value]) => current[key as keyof TokenSettingsRow] !== value),
  ) as Partial<TokenSettingsRow>;
  if (Object.keys(changed).length === 0) return resource;
  await updateResource(ctx.db, resource.id, changed);
  await ctx.audit({ type: 'resource_updated', ...madeBy(actor), detail: { resource: resource.uri, ...changed } });
  const flags = { require_second_factor: after.require_second_factor === 1, require_dpop: after.require_dpop === 1 };
  return { ...resource, ...after, access_token_lifetime: accessTokenTtl(after, ctx.config), ...flags };
}

/** Deletes a resource server: every grant for it is revoked, its scopes and its client removed. */
export async function removeResource(ctx: AppContext, resource: ResourceView, actor: Actor): Promise<void> {
  if (resource.builtin) throw new ResourceInputError('uri', 'the built-in resource cannot be deleted');
  const { deleted, grantIds, clientIds } = await deleteResource(ctx.db, resource.id, ctx.now());
  if (deleted) await dropTokenResource(ctx.db, resource.id);
  ctx.onScopesChanged();
  ctx.onClientsChanged(clientIds);
  if (grantIds.length > 0) ctx.onGrantsRevoked(grantIds, 'revoked');
  if (deleted) await ctx.audit({ type: 'resource_deleted', ...madeBy(actor), detail: { resource: resource.uri, grants_revoked: grantIds.length } });
}

/** Adds a scope to a resource server. */
export async function createScope(ctx: AppContext, resource: ResourceView, scope: ScopeInput, actor: Actor): Promise<void> {
  await checkNewScopes(ctx, [scope]);
  await insertScope(ctx.db, { name: scope.name, resource_id: resource.id, description: scope.description, created_at: ctx.now() });
  ctx.onScopesChanged();
  await ctx.audit({ type: 'scope_created', ...madeBy(actor), detail: { scope: scope.name, resource: resource.uri } });
}

const noSuchScope = (name: string) => new ResourceInputError('scopes', `there is no scope named "${cut(name, 100)}"`);

/** Changes a scope's plain-words description. */
export async function describeScope(ctx: AppContext, scope: ScopeInput, actor: Actor): Promise<void> {
  const problem = scopeProblem(scope);
  if (problem) throw problem;
  if (!(await findScope(ctx.db, scope.name))) throw noSuchScope(scope.name);
  await updateScopeDescription(ctx.db, scope.name, scope.description);
  await ctx.audit({ type: 'scope_updated', ...madeBy(actor), detail: { scope: scope.name } });
}

/** Deletes a scope and revokes the grants that hold it. The built-in scopes cannot be deleted. */
export async function removeScope(ctx: AppContext, name: string, actor: Actor): Promise<void> {
  if ((SCOPES as readonly string[]).includes(name)) throw new ResourceInputError('scopes', `${name} is a built-in scope: it cannot be deleted`);
  const scope = await findScope(ctx.db, name);
  if (!scope) throw noSuchScope(name);
  const { grantIds, clientIds } = await deleteScope(ctx.db, name, ctx.now());
  ctx.onScopesChanged();
  ctx.onClientsChanged(clientIds);
  if (grantIds.length > 0) ctx.onGrantsRevoked(grantIds, 'revoked');
  await ctx.audit({ type: 'scope_deleted', ...madeBy(actor), detail: { scope: name, grants_revoked: grantIds.length } });
}

/** Every scope with its resource server's URI, for `gatehouse scope list`. */
export async function listAllScopes(ctx: AppContext): Promise<Array<ScopeInput & { resource: string }>> {
  const resources = await listResources(ctx);
  return resources.flatMap((r) => r.scopes.map((s) => ({ ...s, resource: r.uri })));
}
