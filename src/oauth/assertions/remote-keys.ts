/**
 * Public keys that others publish (SPEC §4.11): a JWK Set at a URL — a `private_key_jwt`
 * client's `jwks_uri`, a trusted issuer's — fetched through the guarded fetch (safe-fetch.ts:
 * https only, public addresses unless the caller allows private ones, no redirects, a
 * deadline, a size cap), cached by `Cache-Control` within [5 min, 24 h], and fetched again
 * at most once a minute when a JWS names a `kid` the cached set does not hold (a key rotated
 * in). Key selection and verification are jose's (`createLocalJWKSet`, `jwtVerify`).
 *
 * And discovery: an issuer that names no `jwks_uri` publishes it in its
 * `/.well-known/openid-configuration` or, failing that, its RFC 8414
 * `/.well-known/oauth-authorization-server` document, whose `issuer` must be the issuer's URL.
 *
 * A fetch that fails is remembered for a short while (a refusal 60 s, no answer 10 s), so an
 * unreachable or hostile URL is not fetched on every request; the caller gets
 * `RemoteKeysUnavailable`, whose `reason` is for the log only.
 */
import { createLocalJWKSet, errors, type JSONWebKeySet, type CompactJWSHeaderParameters, type FlattenedJWSInput, type JWTVerifyGetKey } from 'jose';
import { LRUCache } from 'lru-cache';
import { cacheLifetimeSeconds, safeFetch, type HostLookup } from '../../protocol/safe-fetch.ts';
import type { RemoteFetchOptions, RemoteKeySet, RemoteKeySource } from '../../protocol/remote-documents.ts';

/** The only algorithms an assertion from others may be signed with: asymmetric ones, never HS*, never `none`. */
export const ASSERTION_ALGS = ['RS256', 'PS256', 'ES256', 'EdDSA'] as const;
export type AssertionAlg = (typeof ASSERTION_ALGS)[number];

/** One deadline for resolving, connecting and the whole body of a key set or discovery document. */
export const REMOTE_KEYS_TIMEOUT_MS = 5000;
/** A key set or discovery document longer than this is refused: a few keys take a few KiB. */
export const REMOTE_KEYS_MAX_BYTES = 64 * 1024;
/** An unknown `kid` fetches the set again only when the last fetch began at least this long ago. */
export const UNKNOWN_KID_REFETCH_MS = 60_000;
/** How long a refused fetch, and one that got no answer, is remembered before the URL is tried again. */
export const REMOTE_KEYS_REFUSAL_MS = 60_000;
export const REMOTE_KEYS_UNANSWERED_MS = 10_000;
/** Key sets and discovered `jwks_uri`s kept, by URL, each at most. */
const CACHE_ENTRIES = 1000;

/** The keys could not be had: the verification fails. `reason` names why, for the log; it never quotes the document. */
export class RemoteKeysUnavailable extends Error {
  override name = 'RemoteKeysUnavailable';
  readonly reason: string;
  constructor(reason: string) {
    super(`remote keys unavailable: ${reason}`);
    this.reason = reason;
  }
}

export interface RemoteKeysOptions {
  /** Epoch ms; cache lifetimes and the refetch interval follow it (tests move it on). */
  readonly now: () => number;
  /** Stands in for DNS (tests). */
  readonly lookup?: HostLookup;
  /** Called once per fetch that leaves the process (metrics, tests). */
  readonly onFetch?: (url: string) => void;
}

type Fetched = { ok: true; json: unknown; maxAgeSeconds: number } | { ok: false; reason: string; transient: boolean };

/** GETs a JSON document through the guarded fetch. */
async function fetchJson(url: string, options: RemoteFetchOptions, settings: RemoteKeysOptions, accept: string): Promise<Fetched> {
  if (!URL.canParse(url)) return { ok: false, reason: 'the URL is not a URL', transient: false };
  const parsed = new URL(url);
  if (parsed.protocol !== 'https:') return { ok: false, reason: 'the URL is not https', transient: false };
  if (parsed.hash !== '' || parsed.username !== '' || parsed.password !== '')
    return { ok: false, reason: 'the URL has a fragment or credentials', transient: false };
  settings.onFetch?.(url);
  const fetched = await safeFetch(parsed, {
    allowPrivateAddresses: options.allowPrivateAddress,
    timeoutMs: REMOTE_KEYS_TIMEOUT_MS,
    maxBytes: REMOTE_KEYS_MAX_BYTES,
    accept,
    lookup: settings.lookup,
  });
  if (!fetched.ok) return fetched;
  try {
    return { ok: true, json: JSON.parse(fetched.body.toString('utf8')), maxAgeSeconds: cacheLifetimeSeconds(fetched.headers['cache-control']) };
  } catch {
    return { ok: false, reason: 'the document is not JSON', transient: false };
  }
}

/** A JWK Set as RFC 7517 §5 shapes it, or null. Members jose does not use are left to it. */
function asJwks(json: unknown): JSONWebKeySet | null {
  if (typeof json !== 'object' || json === null || Array.isArray(json)) return null;
  const keys = (json as { keys?: unknown }).keys;
  if (!Array.isArray(keys) || !keys.every((key) => typeof key === 'object' && key !== null && !Array.isArray(key))) return null;
  return { keys } as JSONWebKeySet;
}

interface CachedSet {
  readonly resolve: JWTVerifyGetKey;
  readonly expiresAt: number;
}

interface Failure {
  readonly reason: string;
  readonly until: number;
}

/**
 * The key set at `url`, with its own cache: the first verification fetches it. Keep the
 * returned object (or ask `RemoteKeys.keySet`, which keeps one per URL): its cache and its
 * once-a-minute refetch rule live in it.
 */
export function remoteKeySet(url: string, options: RemoteFetchOptions, settings: RemoteKeysOptions): RemoteKeySet {
  const { now } = settings;
  let cached: CachedSet | undefined;
  let failure: Failure | undefined;
  let lastFetchStarted = -Infinity;
  let fetching: Promise<CachedSet> | undefined;

  function fetchSet(): Promise<CachedSet> {
    // Concurrent requests share one fetch: a flood of unknown kids costs one request to the URL.
    fetching ??= (async () => {
      lastFetchStarted = now();
      const fetched = await fetchJson(url, options, settings, 'application/jwk-set+json, application/json');
      const jwks = fetched.ok ? asJwks(fetched.json) : null;
      if (!fetched.ok || jwks === null) {
        const reason = fetched.ok ? 'the document is not a JWK Set' : fetched.reason;
        const transient = !fetched.ok && fetched.transient;
        failure = { reason, until: now() + (transient ? REMOTE_KEYS_UNANSWERED_MS : REMOTE_KEYS_REFUSAL_MS) };
        throw new RemoteKeysUnavailable(`the key set at ${url} could not be fetched: ${reason}`);
      }
      failure = undefined;
      cached = { resolve: createLocalJWKSet(jwks), expiresAt: now() + fetched.maxAgeSeconds * 1000 };
      return cached;
    })().finally(() => (fetching = undefined));
    return fetching;
  }

  async function current(): Promise<CachedSet> {
    if (cached && now() < cached.expiresAt) return cached;
    if (fetching) return fetching;
    if (failure && now() < failure.until) throw new RemoteKeysUnavailable(`the key set at ${url} could not be fetched: ${failure.reason}`);
    return fetchSet();
  }

  async function getKey(header: CompactJWSHeaderParameters, token: FlattenedJWSInput) {
    const set = await current();
    try {
      return await set.resolve(header, token);
    } catch (error) {
      if (!(error instanceof errors.JWKSNoMatchingKey)) throw error;
      // A kid (or algorithm) the set does not hold: perhaps a key rotated in since. A fetch under
      // way, or one that finished since this set was read, is used; otherwise the set is fetched
      // again at most once a minute, however many such JWSs arrive.
      if (fetching) return (await fetching).resolve(header, token);
      if (cached && cached !== set) return cached.resolve(header, token);
      if (now() - lastFetchStarted < UNKNOWN_KID_REFETCH_MS) throw error;
      return (await fetchSet()).resolve(header, token);
    }
  }

  return { url, getKey };
}

/**
 * The issuer's `jwks_uri`, read from its `/.well-known/openid-configuration` (OIDC Discovery
 * §4: appended to the issuer's path), else its `/.well-known/oauth-authorization-server`
 * (RFC 8414 §3: inserted before the issuer's path), both fetched like key sets. The document's
 * `issuer` must equal `issuer` exactly, and its `jwks_uri` must be an https URL. Returns the
 * URL and how long (ms from now) the document may be trusted; throws RemoteKeysUnavailable.
 */
export async function discoverJwksUri(
  issuer: string,
  options: RemoteFetchOptions,
  settings: RemoteKeysOptions,
): Promise<{ jwksUri: string; maxAgeMs: number }> {
  if (!URL.canParse(issuer) || new URL(issuer).protocol !== 'https:') throw new RemoteKeysUnavailable('the issuer is not an https URL');
  const url = new URL(issuer);
  if (url.search !== '' || url.hash !== '') throw new RemoteKeysUnavailable('the issuer URL has a query or fragment');
  const path = url.pathname.replace(/\/$/, '');
  const candidates = [`${url.origin}${path}/.well-known/openid-configuration`, `${url.origin}/.well-known/oauth-authorization-server${path}`];
  const problems: string[] = [];
  for (const candidate of candidates) {
    const fetched = await fetchJson(candidate, options, settings, 'application/json');
    if (!fetched.ok) {
      problems.push(`${candidate}: ${fetched.reason}`);
      continue;
    }
    const document = fetched.json as { issuer?: unknown; jwks_uri?: unknown } | null;
    if (typeof document !== 'object' || document === null || document.issuer !== issuer) {
      problems.push(`${candidate}: its issuer is not ${issuer}`);
      continue;
    }
    const jwksUri = document.jwks_uri;
    if (typeof jwksUri !== 'string' || !URL.canParse(jwksUri) || new URL(jwksUri).protocol !== 'https:') {
      problems.push(`${candidate}: it has no https jwks_uri`);
      continue;
    }
    return { jwksUri, maxAgeMs: fetched.maxAgeSeconds * 1000 };
  }
  throw new RemoteKeysUnavailable(`no jwks_uri was discovered for ${issuer} (${problems.join('; ')})`);
}

/**
 * Every key set this process uses, one `RemoteKeySet` per URL and rule (so its cache and
 * refetch interval hold across requests), and discovered `jwks_uri`s by issuer; both bounded
 * (least recently used go first). One per process: AppContext `remoteKeys`.
 */
export class RemoteKeys implements RemoteKeySource {
  readonly #settings: RemoteKeysOptions;
  /** CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES: private addresses for every caller (development and tests). */
  readonly #allowPrivateAlways: boolean;
  readonly #sets = new LRUCache<string, RemoteKeySet>({ max: CACHE_ENTRIES });
  readonly #discovered = new LRUCache<string, { jwksUri: string; expiresAt: number }>({ max: CACHE_ENTRIES });
  readonly #discovering = new Map<string, Promise<string>>();

  constructor(settings: RemoteKeysOptions & { readonly allowPrivateAddresses: boolean }) {
    this.#settings = settings;
    this.#allowPrivateAlways = settings.allowPrivateAddresses;
  }

  #rule(options: RemoteFetchOptions): RemoteFetchOptions {
    return { allowPrivateAddress: options.allowPrivateAddress || this.#allowPrivateAlways };
  }

  /** The key set at `url` (kept per URL and rule). */
  keySet(url: string, options: RemoteFetchOptions = { allowPrivateAddress: false }): RemoteKeySet {
    const rule = this.#rule(options);
    const key = `${rule.allowPrivateAddress ? 'private' : 'public'} ${url}`;
    let set = this.#sets.get(key);
    if (!set) {
      set = remoteKeySet(url, rule, this.#settings);
      this.#sets.set(key, set);
    }
    return set;
  }

  /** The key set of `issuer`: at `jwksUri` when given, else at the one its metadata names (discovered, cached like a document). */
  async issuerKeySet(issuer: string, jwksUri: string | null, options: RemoteFetchOptions = { allowPrivateAddress: false }): Promise<RemoteKeySet> {
    if (jwksUri !== null) return this.keySet(jwksUri, options);
    const rule = this.#rule(options);
    const key = `${rule.allowPrivateAddress ? 'private' : 'public'} ${issuer}`;
    const known = this.#discovered.get(key);
    if (known && this.#settings.now() < known.expiresAt) return this.keySet(known.jwksUri, options);
    let discovering = this.#discovering.get(key);
    if (!discovering) {
      discovering = discoverJwksUri(issuer, rule, this.#settings)
        .then(({ jwksUri: found, maxAgeMs }) => {
          this.#discovered.set(key, { jwksUri: found, expiresAt: this.#settings.now() + maxAgeMs });
          return found;
        })
        .finally(() => this.#discovering.delete(key));
      this.#discovering.set(key, discovering);
    }
    return this.keySet(await discovering, options);
  }
}
