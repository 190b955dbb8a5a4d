/**
 * Scope strings (RFC 6749 §3.3): space-separated, order-insensitive. Which scopes exist is
 * data (each belongs to a resource server, store/resources.ts); this module parses and
 * compares lists and decides what a request gets from what is allowed.
 */
import { cut } from '../input-error.ts';
import { invalidScope } from '../protocol/errors.ts';

/**
 * The identity scopes (SPEC §3, OIDC Core §5.4): they belong to no resource server, may
 * accompany a request for any resource and never change its audience. Each with what the
 * consent page says of it.
 */
export const IDENTITY_SCOPES: ReadonlyMap<string, string> = new Map([
  ['openid', 'Know who you are (your username)'],
  ['profile', 'See your username and display name'],
  ['email', 'See your e-mail address'],
  ['groups', 'See your groups'],
  ['offline_access', "Stay connected when you're away"],
]);
export const IDENTITY_SCOPE_NAMES: readonly string[] = [...IDENTITY_SCOPES.keys()];

export const isIdentityScope = (name: string): boolean => IDENTITY_SCOPES.has(name);

/** RFC 6749 §3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E ). */
const SCOPE_TOKEN = /^[\x21\x23-\x5b\x5d-\x7e]+$/;

/** Whether `value` is shaped like a scope name (whether such a scope exists is another matter). */
export function isScopeToken(value: string): boolean {
  return SCOPE_TOKEN.test(value);
}

/** `invalid_scope` for scopes that do not exist on the resource asked for (of another resource, or none). */
export const unknownScope = (names: readonly string[]) => invalidScope(`unknown scope ${quoted(names)}`);

/** Parses a requested scope string; a name that is not a scope token is `invalid_scope`. */
export function parseScope(raw: string): string[] {
  const names = raw.split(' ').filter((s) => s !== '');
  const malformed = names.filter((s) => !isScopeToken(s));
  if (malformed.length > 0) throw unknownScope(malformed);
  if (names.length === 0) throw invalidScope('the "scope" parameter names no scope');
  return normalizeScopes(names);
}

/** Sorted, without repeats or empty names: the one form scope lists are stored and compared in. */
export function normalizeScopes(scopes: readonly string[]): string[] {
  return [...new Set(scopes)].filter((s) => s !== '').sort();
}

export function splitScopes(stored: string): string[] {
  const scopes = stored.split(' ');
  // Stored lists are written in normal form (joinScopes): checking that costs less than
  // making it again, on every bearer check (docs/performance.md).
  return isNormal(scopes) ? scopes : normalizeScopes(scopes);
}

/** Sorted, without repeats or empty names: what normalizeScopes gives. */
function isNormal(scopes: readonly string[]): boolean {
  for (let i = 0; i < scopes.length; i++) if (scopes[i] === '' || (i > 0 && scopes[i - 1]! >= scopes[i]!)) return false;
  return true;
}

export function joinScopes(scopes: readonly string[]): string {
  return normalizeScopes(scopes).join(' ');
}

/** The scopes of `requested` that `allowed` lacks: the one subset check. */
export function scopesBeyond<S extends string>(requested: readonly S[], allowed: readonly string[]): S[] {
  return requested.filter((s) => !allowed.includes(s));
}

export function isSubset(requested: readonly string[], allowed: readonly string[]): boolean {
  return scopesBeyond(requested, allowed).length === 0;
}

/** The most names `quoted` lists; the rest are counted. */
const NAMES_LISTED = 10;

/**
 * Scope names as a message names them: each in quotes, so that where one starts and ends shows
 * (a page's text too), cut at 100 characters, the first ten of them.
 */
export function quoted(names: readonly string[]): string {
  const listed = names.slice(0, NAMES_LISTED).map((s) => `"${cut(s, 100)}"`);
  return names.length > NAMES_LISTED ? `${listed.join(', ')} and ${names.length - NAMES_LISTED} more` : listed.join(', ');
}

/**
 * The scopes a request gets (SPEC §3): all the allowed scopes of the resource when `scope` is
 * absent (identity scopes are never implied: a client asks for `openid`), else the requested
 * ones, which must all be scopes of the resource or identity scopes (`existing`) and allowed
 * to the client. None at all is `invalid_scope`; identity scopes alone are a valid request.
 */
export function grantableScopes(requested: string | undefined, allowed: readonly string[], existing: readonly string[] = allowed): string[] {
  if (requested === undefined) {
    const resourceScopes = allowed.filter((s) => !isIdentityScope(s));
    if (resourceScopes.length === 0) throw invalidScope('this client may have no scope on this resource');
    return normalizeScopes(resourceScopes);
  }
  const scopes = parseScope(requested);
  const unknown = scopesBeyond(scopes, existing);
  if (unknown.length > 0) throw unknownScope(unknown);
  const refused = scopesBeyond(scopes, allowed);
  if (refused.length > 0) throw invalidScope(`scope ${quoted(refused)} is not allowed for this client`);
  return scopes;
}
