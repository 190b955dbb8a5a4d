/**
 * Resource servers and audiences (SPEC §3, RFC 8707). Every access token is for exactly one
 * resource server, named by the `resource` parameter (absent: the built-in resource, the
 * service's own API at PUBLIC_URL). The scopes a request may get are those of that resource
 * that the client is allowed.
 *
 * @see RFC 8707 §2 (the resource parameter), §2.2 (invalid_target)
 */
import type { Kysely } from 'kysely';
import type { Config } from '../config.ts';
import type { AppContext } from '../context.ts';
import type { JoinedTokenSettings } from '../store/codes.ts';
import { isMultiFactor, type Login } from '../login.ts';
import { BUILTIN_RESOURCE_ID, findResourceWithScopes, listScopes, takenScopeNames } from '../store/resources.ts';
import type { Database, Resource, ScopeRow } from '../store/schema.ts';
import { OAuthError, invalidScope } from '../protocol/errors.ts';
import { IDENTITY_SCOPES, IDENTITY_SCOPE_NAMES, grantableScopes, quoted, splitScopes } from './scopes.ts';

export { BUILTIN_RESOURCE_ID };

const LOOPBACK_HOSTS = new Set(['localhost', '127.0.0.1', '[::1]']);
const MAX_URI_LENGTH = 2000;

/**
 * The normalized form of a resource indicator (SPEC §3): scheme and host lower-cased, one
 * trailing `/` removed, nothing else touched, so that comparison is otherwise exact. An
 * error message (for a person) when it is not an absolute `https` URL, or `http` on a
 * loopback host, without query, fragment or user name.
 */
export function normalizeResourceUri(raw: string): { uri: string } | { problem: string } {
  if (raw.length > MAX_URI_LENGTH) return { problem: 'is too long' };
  // eslint-disable-next-line no-control-regex
  if (/[\s\x00-\x1f\x7f]/.test(raw)) return { problem: 'must not contain spaces or control characters' };
  const parts = /^([a-zA-Z][a-zA-Z0-9+.-]*):\/\/([^/?#]*)(.*)$/.exec(raw);
  if (!parts || !URL.canParse(raw)) return { problem: 'must be an absolute URL' };
  if (raw.includes('#')) return { problem: 'must not contain a fragment' };
  if (raw.includes('?')) return { problem: 'must not contain a query' };
  const [, scheme, authority, rest] = parts as unknown as [string, string, string, string];
  if (authority.includes('@')) return { problem: 'must not contain a user name or password' };
  const url = new URL(raw);
  if (url.protocol === 'http:' && !LOOPBACK_HOSTS.has(url.hostname)) return { problem: 'must use https (http is allowed only for loopback hosts)' };
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return { problem: 'must use https (or http for loopback hosts)' };
  const uri = `${scheme.toLowerCase()}://${authority.toLowerCase()}${rest}`;
  return { uri: uri.endsWith('/') ? uri.slice(0, -1) : uri };
}

/** The built-in resource's URI: PUBLIC_URL, in the same normalized form. */
export function builtinResourceUri(ctx: Pick<AppContext, 'config'>): string {
  const normalized = normalizeResourceUri(ctx.config.publicUrl);
  return 'uri' in normalized ? normalized.uri : ctx.config.publicUrl;
}

/**
 * How a resource server's access tokens are made (SPEC §2, §4.9): their format, the
 * algorithm of its JWTs, and their lifetime (null: the format's default).
 */
export type TokenSettings = Pick<Resource, 'token_format' | 'signing_alg' | 'access_token_ttl' | 'require_dpop'>;

/**
 * The lifetime, in seconds, of an access token for this resource server: its own, or the
 * default of its format. The one place a token's lifetime is decided (oauth/issue.ts).
 */
export function accessTokenTtl(
  resource: Pick<TokenSettings, 'token_format' | 'access_token_ttl'>,
  config: Pick<Config, 'accessTokenTtl' | 'jwtAccessTokenTtl'>,
): number {
  return resource.access_token_ttl ?? (resource.token_format === 'jwt' ? config.jwtAccessTokenTtl : config.accessTokenTtl);
}

/** How an access token for a resource server is made, and the audience (`aud`) it names. */
export interface TokenAudience extends TokenSettings {
  /** Normalized; what `aud` says. */
  uri: string;
}

/** The audience read with a code or refresh token (store/codes.ts); null when its resource server was deleted. */
/**
 * Step-up (SPEC §4.12): whether tokens for a code's or grant's resource server are refused to
 * the login that approved it — the resource server requires a second factor (perhaps only since
 * the approval) and the login proved none (or there was no login: an assertion's grant).
 */
export function lacksRequiredSecondFactor(row: Pick<JoinedTokenSettings, 'require_second_factor'>, login: Login | null): boolean {
  return row.require_second_factor === 1 && !isMultiFactor(login?.amr ?? '');
}

export function joinedAudience(row: JoinedTokenSettings, ctx: Pick<AppContext, 'config'>): TokenAudience | null {
  if (row.token_format === null || row.signing_alg === null) return null;
  const uri = row.resource_id === BUILTIN_RESOURCE_ID ? builtinResourceUri(ctx) : row.resource_uri;
  if (uri === null) return null;
  const { token_format, signing_alg, access_token_ttl } = row;
  return { token_format, signing_alg, access_token_ttl, require_dpop: row.require_dpop ?? 0, uri };
}

/** The resource server a request is for, with its scopes and how its tokens are made. */
export interface Audience {
  id: string;
  /** Normalized; what `aud` says. */
  uri: string;
  name: string;
  builtin: boolean;
  scopes: ScopeRow[];
  tokens: TokenAudience;
  /** Its tokens only for a login with a second factor (SPEC §4.12, step-up). */
  requireSecondFactor: boolean;
}

const tokenAudience = (resource: Resource, uri: string): TokenAudience => ({
  token_format: resource.token_format,
  signing_alg: resource.signing_alg,
  access_token_ttl: resource.access_token_ttl,
  require_dpop: resource.require_dpop,
  uri,
});

export const invalidTarget = (description: string, detail?: string) => new OAuthError('invalid_target', description, detail);

/**
 * The audience a request names with `resource` (as parsed: repeated values are an array).
 * Absent: the built-in resource. Several values, a malformed or an unknown one: `invalid_target`.
 */
export async function requestedAudience(ctx: AppContext, resource: string | string[] | undefined): Promise<Audience> {
  if (Array.isArray(resource)) throw invalidTarget('only one "resource" may be requested: a token is for one resource server');
  if (resource === undefined || resource === '') return audienceById(ctx, BUILTIN_RESOURCE_ID);
  const normalized = normalizeResourceUri(resource);
  if (!('uri' in normalized)) throw invalidTarget(`the "resource" parameter ${normalized.problem}`);
  if (normalized.uri === builtinResourceUri(ctx)) return audienceById(ctx, BUILTIN_RESOURCE_ID);
  const stored = await findResourceWithScopes(ctx.db, { uri: normalized.uri });
  if (!stored) throw invalidTarget('the requested resource is unknown to this authorization server');
  const { resource: found, scopes } = stored;
  return {
    id: found.id,
    uri: normalized.uri,
    name: found.name,
    builtin: false,
    scopes,
    tokens: tokenAudience(found, normalized.uri),
    requireSecondFactor: found.require_second_factor === 1,
  };
}

/** The audience a code or grant was issued for; undefined when its resource server is gone. */
export async function audienceById(ctx: AppContext, id: string): Promise<Audience> {
  const stored = await findResourceWithScopes(ctx.db, { id });
  if (!stored) throw invalidTarget('the resource server of this request no longer exists');
  const { resource: found, scopes } = stored;
  const builtin = found.id === BUILTIN_RESOURCE_ID;
  const uri = builtin ? builtinResourceUri(ctx) : found.uri!;
  return {
    id: found.id,
    uri,
    name: found.name,
    builtin,
    scopes,
    tokens: tokenAudience(found, uri),
    requireSecondFactor: found.require_second_factor === 1,
  };
}

/**
 * An issuer URL as ID-JAG audiences are compared (the ones listed for a client with each
 * other, clients/clients.ts; a token exchange's `audience` with them): exactly, as RFC 8414
 * §3.3 compares issuers, but for a trailing `/` and the case of scheme and host, which clients
 * vary.
 */
export function issuerKey(issuer: string): string {
  const normalized = normalizeResourceUri(issuer);
  return 'uri' in normalized ? normalized.uri : issuer;
}

/**
 * At the token endpoint: a `resource` sent with a code or refresh token must be the one it
 * was issued for (RFC 8707 §2.2); checked before anything is consumed or rotated. Also a token
 * exchange's `resource` and `audience`, with its own description of the refusal.
 */
export async function checkSameAudience(
  ctx: AppContext,
  resource: string | string[] | undefined,
  issuedFor: string,
  refusal = '"resource" is not the resource this grant was issued for',
): Promise<void> {
  if (resource === undefined || resource === '') return;
  const audience = await requestedAudience(ctx, resource);
  if (audience.id !== issuedFor) throw invalidTarget(refusal);
}

/** The audit detail naming a resource server other than the built-in one. */
export function resourceDetail(audience: Audience): { resource?: string } {
  return audience.builtin ? {} : { resource: audience.uri };
}

/** The client's kind (SPEC §3): an administrator's, or one known by a metadata document or dynamic registration. */
interface ClientScopesView {
  scopes: string;
  /** Absent until client kinds exist: every such client is an administrator's ('registered'). */
  kind?: string;
}

/** Clients no administrator registered may ask for any scope of the resource (SPEC §3). */
export function mayAskAnyScope(client: ClientScopesView): boolean {
  return (client.kind ?? 'registered') !== 'registered';
}

/** The scopes of the audience the client may have, and the identity scopes it may have (SPEC §3). */
export function allowedScopes(client: ClientScopesView, audience: Audience): string[] {
  const names = [...audience.scopes.map((s) => s.name), ...IDENTITY_SCOPE_NAMES];
  if (mayAskAnyScope(client)) return names;
  const own = splitScopes(client.scopes);
  return names.filter((name) => own.includes(name));
}

/**
 * The scopes a request for `audience` gets (scopes.ts `grantableScopes`): its resource's and
 * identity scopes. `openid` asks for an ID token, which needs a person: a client acting as
 * itself (`person: false`, client_credentials) is refused it.
 */
export function requestScopes(requested: string | undefined, client: ClientScopesView, audience: Audience, person = true): string[] {
  const scopes = grantableScopes(requested, allowedScopes(client, audience), [...audience.scopes.map((s) => s.name), ...IDENTITY_SCOPE_NAMES]);
  if (!person && scopes.includes('openid')) throw invalidScope('"openid" needs a person: a client acting as itself gets no ID token');
  return scopes;
}

/** Every scope's plain-words description, by name, the identity scopes included: for the pages that list scopes. */
export async function scopeDescriptions(ctx: AppContext): Promise<Map<string, string>> {
  return new Map([...(await listScopes(ctx.db)).map((row): [string, string] => [row.name, row.description]), ...IDENTITY_SCOPES]);
}

/**
 * Every scope of every resource server, as the metadata lists them; cached briefly, dropped on
 * change (a change no fan-out message reached is seen within CATALOGUE_TTL_MS).
 */
const catalogues = new WeakMap<object, { names: Promise<string[]>; until: number }>();
const CATALOGUE_TTL_MS = 10_000;

export function scopesSupported(ctx: AppContext): Promise<string[]> {
  const cached = catalogues.get(ctx.db);
  const now = Date.now();
  if (cached && cached.until > now) return cached.names;
  const names = listScopes(ctx.db).then((rows) => [...rows.map((row) => row.name), ...IDENTITY_SCOPE_NAMES]);
  catalogues.set(ctx.db, { names, until: now + CATALOGUE_TTL_MS });
  names.catch(() => catalogues.delete(ctx.db));
  return names;
}

/** After a change of scopes, here or (told by the fan-out) on another instance: AppContext `onScopesChanged`. */
export function forgetScopeCatalogue(db: AppContext['db']): void {
  catalogues.delete(db);
}

/**
 * Why scopes a client or a trusted issuer is given cannot be: the names among them that no
 * resource server defines and that are not identity scopes; null when every one exists.
 */
export async function unknownScopesProblem(db: Kysely<Database>, requested: readonly string[]): Promise<string | null> {
  const known = new Set([...(await takenScopeNames(db, requested)), ...IDENTITY_SCOPE_NAMES]);
  const unknown = requested.filter((s) => !known.has(s));
  return unknown.length === 0 ? null : `Unknown scope ${quoted(unknown)}: see gatehouse scope list`;
}
