/** Scope strings (RFC 6749 §3.3): space-separated, order-insensitive, from the known set. */
import { SCOPES, type Scope } from '../config.ts';
import { invalidScope } from './errors.ts';

export function isScope(value: string): value is Scope {
  return (SCOPES as readonly string[]).includes(value);
}

/** Parses a requested scope string; unknown scopes are `invalid_scope`. */
export function parseScope(raw: string): Scope[] {
  const names = raw.split(' ').filter((s) => s !== '');
  const unknown = names.filter((s) => !isScope(s));
  if (unknown.length > 0) throw invalidScope(`unknown scope ${unknown.map((s) => `"${s}"`).join(', ')}`);
  if (names.length === 0) throw invalidScope('the "scope" parameter names no scope');
  return normalizeScopes(names as Scope[]);
}

/** Sorted, without repeats: the one form scope lists are stored and compared in. */
export function normalizeScopes(scopes: readonly string[]): Scope[] {
  return [...new Set(scopes)].filter(isScope).sort();
}

export function splitScopes(stored: string): Scope[] {
  return normalizeScopes(stored.split(' '));
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

/**
 * The scopes a request gets: all the allowed ones when `scope` is absent, else the
 * requested ones, which must all be allowed.
 */
export function grantableScopes(requested: string | undefined, allowed: readonly Scope[]): Scope[] {
  if (requested === undefined) return [...allowed];
  const scopes = parseScope(requested);
  const refused = scopesBeyond(scopes, allowed);
  if (refused.length > 0) throw invalidScope(`scope ${refused.map((s) => `"${s}"`).join(', ')} is not allowed for this client`);
  return scopes;
}

/** Plain-words descriptions shown on the consent page. */
export const SCOPE_DESCRIPTIONS: Record<Scope, string> = {
  'annotation:read': 'Read your annotations, including private ones',
  'annotation:write': 'Create, edit and delete annotations as you',
};
