/**
 * Client ID metadata documents (SPEC §4.8, draft-ietf-oauth-client-id-metadata-document):
 * a client that no administrator registered names itself by the https URL of a JSON
 * document describing it. This module decides whether a `client_id` is such a URL, fetches
 * the document (through safe-fetch.ts: public addresses only, no redirects, 5 s, 5 KiB),
 * validates it, and caches the outcome by URL.
 *
 * A refusal makes the client unknown; its reason is for the logs and the audit trail, and
 * never quotes the document.
 */
import { LRUCache } from 'lru-cache';
import type { Config } from '../config.ts';
import { normalizeClientName } from './client-names.ts';
import { redirectUriProblem } from './redirect-uri.ts';
import { safeFetch, type HostLookup } from './safe-fetch.ts';

export const METADATA_FETCH_TIMEOUT_MS = 5000;
export const METADATA_MAX_BYTES = 5120;
/** Bounds on how long a fetched document is trusted, whatever its Cache-Control says; seconds. */
export const METADATA_CACHE_MIN_SECONDS = 300;
export const METADATA_CACHE_MAX_SECONDS = 86_400;
/** Without a max-age. */
export const METADATA_CACHE_DEFAULT_SECONDS = 3600;
/** A refused URL is not fetched again for this long, so a hostile one cannot make us fetch on every request. */
export const METADATA_REFUSAL_CACHE_SECONDS = 60;
const CACHE_ENTRIES = 1000;
/**
 * At most this many documents are fetched at once. Every URL not in the cache is a fresh
 * fetch, so a flood of distinct hostile URLs would otherwise start any number of them, each
 * held up to the 5 s deadline: sockets without bound, and DNS look-ups on libuv's thread pool
 * (4 threads), which password hashing needs. Two leave that pool room for logins.
 */
export const METADATA_FETCHES_AT_ONCE = 2;
/** The same bounds as for clients an administrator registers (clients/clients.ts). */
const MAX_URL_LENGTH = 2000;

/** A client known by its metadata document: public, PKCE required, never trusted (SPEC §3). */
export interface MetadataClient {
  /** The document's URL, which is the client ID. */
  readonly id: string;
  readonly name: string;
  readonly redirectUris: readonly string[];
  readonly clientUri: string | null;
  readonly logoUri: string | null;
  /** The scope the document says the client will ask for; informative only (such clients may ask for any scope). */
  readonly scope: string | null;
  /** Epoch milliseconds. */
  readonly fetchedAt: number;
  readonly expiresAt: number;
}

export type MetadataResolution =
  | { readonly ok: true; readonly client: MetadataClient }
  /** `busy`: not fetched because METADATA_FETCHES_AT_ONCE are under way; not remembered, so asking again soon may succeed. */
  | { readonly ok: false; readonly reason: string; readonly busy?: true };

type DocumentFields = Omit<MetadataClient, 'fetchedAt' | 'expiresAt'>;
type Validation = { readonly ok: true; readonly client: DocumentFields } | { readonly ok: false; readonly reason: string };

/**
 * Why `clientId` cannot be a metadata document URL, or null when it is one: https, a path
 * other than `/`, no fragment, no user name or password, and written in the URL's canonical
 * form (so no `.`/`..` segments, no default port, a lower-case host) — the document must
 * repeat it to the letter.
 */
export function metadataUrlProblem(clientId: string): string | null {
  if (!URL.canParse(clientId)) return 'is not a URL';
  const url = new URL(clientId);
  if (url.protocol !== 'https:') return 'is not an https URL';
  if (clientId.includes('#')) return 'has a fragment';
  if (url.username !== '' || url.password !== '') return 'has a user name or password';
  if (url.pathname === '/') return 'has no path';
  if (url.href !== clientId) return `is not in canonical form (${url.href})`;
  if (clientId.length > MAX_URL_LENGTH) return 'is too long';
  return null;
}

export function isMetadataDocumentUrl(clientId: string): boolean {
  return metadataUrlProblem(clientId) === null;
}

/**
 * Whether the allow-list admits `hostname`: an entry matches itself exactly, `*.example.com`
 * matches the subdomains of example.com (at any depth) but not example.com itself; an empty
 * list admits every host.
 */
export function hostAllowed(hostname: string, allowedHosts: readonly string[]): boolean {
  if (allowedHosts.length === 0) return true;
  const host = hostname.toLowerCase().replace(/\.$/, '');
  return allowedHosts.some((entry) => (entry.startsWith('*.') ? host.endsWith(entry.slice(1)) : host === entry));
}

/**
 * How long a document may be cached, in seconds: its `Cache-Control: max-age` (`no-store`
 * and `no-cache` count as 0), bounded to [5 min, 24 h]; 1 h without either.
 */
export function cacheLifetimeSeconds(cacheControl: string | undefined): number {
  const directives = (cacheControl ?? '').toLowerCase().split(',').map((directive) => directive.trim());
  const maxAge = directives.map((directive) => /^max-age\s*=\s*"?(\d+)"?$/.exec(directive)?.[1]).find((value) => value !== undefined);
  const seconds = directives.includes('no-store') || directives.includes('no-cache') ? 0 : maxAge !== undefined ? Number(maxAge) : METADATA_CACHE_DEFAULT_SECONDS;
  return Math.min(METADATA_CACHE_MAX_SECONDS, Math.max(METADATA_CACHE_MIN_SECONDS, seconds));
}

export const isStringArray = (value: unknown): value is string[] => Array.isArray(value) && value.every((item) => typeof item === 'string');
/** RFC 6749 §3.3 scope tokens, space-separated. */
export const SCOPE = /^[\x21\x23-\x5b\x5d-\x7e]+( [\x21\x23-\x5b\x5d-\x7e]+)*$/;

/** An optional https URL field (`client_uri`, `logo_uri`): null when absent, a problem when not an https URL. */
export function optionalHttpsUrl(document: Record<string, unknown>, field: string): { value: string | null } | { problem: string } {
  const value = document[field];
  if (value === undefined) return { value: null };
  if (typeof value !== 'string' || value.length > MAX_URL_LENGTH || !URL.canParse(value) || new URL(value).protocol !== 'https:') {
    return { problem: `${field} is not an https URL` };
  }
  return { value };
}

/** Checks a fetched document against §4.8: the client it describes, or why it is refused. */
export function validateMetadataDocument(url: string, body: string): Validation {
  const refuse = (reason: string): Validation => ({ ok: false, reason: `the metadata document ${reason}` });
  let document: unknown;
  try {
    document = JSON.parse(body);
  } catch {
    return refuse('is not JSON');
  }
  if (typeof document !== 'object' || document === null || Array.isArray(document)) return refuse('is not a JSON object');
  const fields = document as Record<string, unknown>;

  if (fields.client_id !== url) return refuse('has a client_id other than its own URL');
  if (typeof fields.client_name !== 'string') return refuse('has no client_name');
  const named = normalizeClientName(fields.client_name);
  if ('problem' in named) return refuse(`has a client_name that ${named.problem}`);
  const { name } = named;
  const redirectUris = fields.redirect_uris;
  if (!isStringArray(redirectUris) || redirectUris.length === 0) return refuse('has no redirect_uris (a non-empty array of URLs)');
  for (const [index, uri] of redirectUris.entries()) {
    const problem = uri.length > MAX_URL_LENGTH ? 'is too long' : redirectUriProblem(uri);
    if (problem !== null) return refuse(`has an unusable redirect_uris[${index}]: it ${problem}`);
  }
  const clientUri = optionalHttpsUrl(fields, 'client_uri');
  if ('problem' in clientUri) return refuse(`has a ${clientUri.problem}`);
  const logoUri = optionalHttpsUrl(fields, 'logo_uri');
  if ('problem' in logoUri) return refuse(`has a ${logoUri.problem}`);
  // Values other than authorization_code and refresh_token are ignored (§4.8), so only the shape matters.
  for (const field of ['grant_types', 'response_types']) {
    if (fields[field] !== undefined && !isStringArray(fields[field])) return refuse(`has a ${field} that is not an array of strings`);
  }
  const authMethod = fields.token_endpoint_auth_method;
  if (authMethod !== undefined && authMethod !== 'none') return refuse('asks for a token_endpoint_auth_method other than none (only public clients are known this way)');
  if ('client_secret' in fields) return refuse('contains a client_secret');
  const scope = fields.scope;
  if (scope !== undefined && (typeof scope !== 'string' || !SCOPE.test(scope))) return refuse('has a scope that is not a list of scope names');

  return {
    ok: true,
    client: { id: url, name, redirectUris, clientUri: clientUri.value, logoUri: logoUri.value, scope: scope ?? null },
  };
}

export interface ClientMetadataOptions {
  /** Epoch milliseconds; cache lifetimes follow it, so tests can move time on. */
  readonly now: () => number;
  /** Whether an administrator blocked this URL (or a prefix of it); asked before the cache, on every call. */
  readonly isBlocked?: (url: string) => boolean | Promise<boolean>;
  /** Stands in for DNS (tests). */
  readonly lookup?: HostLookup;
}

export interface ClientMetadataResolver {
  /**
   * The client `clientId` names, from the cache or freshly fetched; or why it is unknown.
   * `beforeFetch` runs only when a fetch is about to start (not for a cached document) and may
   * throw to prevent it: the caller's budget for fetches (its address's), so that a flood of
   * distinct URLs is refused before it costs lookups and connections.
   */
  resolve(clientId: string, beforeFetch?: () => Promise<void>): Promise<MetadataResolution>;
}

export function createClientMetadataResolver(settings: Config['clientMetadata'], options: ClientMetadataOptions): ClientMetadataResolver {
  const { now } = options;

  async function fetchDocument(url: string): Promise<MetadataResolution> {
    const fetched = await safeFetch(new URL(url), {
      allowPrivateAddresses: settings.allowPrivateAddresses,
      timeoutMs: METADATA_FETCH_TIMEOUT_MS,
      maxBytes: METADATA_MAX_BYTES,
      accept: 'application/json',
      lookup: options.lookup,
    });
    if (!fetched.ok) return { ok: false, reason: `the metadata document could not be fetched: ${fetched.reason}` };
    const validation = validateMetadataDocument(url, fetched.body.toString('utf8'));
    if (!validation.ok) return validation;
    const fetchedAt = now();
    const expiresAt = fetchedAt + cacheLifetimeSeconds(fetched.headers['cache-control']) * 1000;
    return { ok: true, client: { ...validation.client, fetchedAt, expiresAt } };
  }

  /** The URLs being fetched now. */
  const fetching = new Set<string>();

  // One entry per URL, good or refused; concurrent requests for a URL share one fetch (lru-cache's `fetch`).
  const cache = new LRUCache<string, MetadataResolution>({
    max: CACHE_ENTRIES,
    perf: { now },
    ttlResolution: 0, // read the clock on every look-up, so an injected clock is followed exactly
    fetchMethod: async (url, _stale, { options: entry }) => {
      // resolve() never throws: even a fault of our own here makes the client unknown, not a 500.
      fetching.add(url);
      const resolution = await fetchDocument(url)
        .catch((error: Error): MetadataResolution => ({ ok: false, reason: `the metadata document could not be fetched: ${error.message}` }))
        .finally(() => fetching.delete(url));
      entry.ttl = resolution.ok ? resolution.client.expiresAt - resolution.client.fetchedAt : METADATA_REFUSAL_CACHE_SECONDS * 1000;
      return resolution;
    },
  });

  return {
    async resolve(clientId, beforeFetch) {
      if (!settings.enabled) return { ok: false, reason: 'client ID metadata documents are turned off (CLIENT_METADATA_DOCUMENTS)' };
      const problem = metadataUrlProblem(clientId);
      if (problem !== null) return { ok: false, reason: `the client_id ${problem}` };
      if (!hostAllowed(new URL(clientId).hostname, settings.allowedHosts)) {
        return { ok: false, reason: 'the client_id is on a host outside CLIENT_METADATA_ALLOWED_HOSTS' };
      }
      if (await options.isBlocked?.(clientId)) return { ok: false, reason: 'the client is blocked' };
      if (!cache.has(clientId) && !fetching.has(clientId)) await beforeFetch?.();
      // Checked and counted with no await in between, so simultaneous requests cannot all pass.
      if (!cache.has(clientId) && !fetching.has(clientId) && fetching.size >= METADATA_FETCHES_AT_ONCE) {
        return { ok: false, reason: `${METADATA_FETCHES_AT_ONCE} metadata documents are being fetched already`, busy: true };
      }
      return (await cache.fetch(clientId)) ?? { ok: false, reason: 'the metadata document fetch was abandoned' };
    },
  };
}
