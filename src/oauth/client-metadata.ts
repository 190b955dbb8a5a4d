/**
 * Client ID metadata documents (SPEC §4.8, draft-ietf-oauth-client-id-metadata-document):
 * a client that no administrator registered names itself by the https URL of a JSON
 * document describing it. This module decides whether a `client_id` is such a URL, fetches
 * the document (through safe-fetch.ts: public addresses only, no redirects, 5 s, 5 KiB),
 * validates it, and caches the outcome by URL: good documents, and apart from them refusals
 * and fetches that got no answer. Fetches share a few slots fairly (fetch-slots.ts).
 *
 * A refusal makes the client unknown; its reason is for the logs and the audit trail, and
 * never quotes the document.
 */
import { LRUCache } from 'lru-cache';
import type { Config } from '../config.ts';
import { normalizeClientName } from './client-names.ts';
import { holdsNul } from '../protocol/params.ts';
import { SIGNING_ALGS } from '../identity/key-schedule.ts';
import type { SigningAlg } from '../store/schema.ts';
import { redirectUriProblem } from '../protocol/redirect-uri.ts';
import { addressKey } from '../throttle.ts';
import { BUSY, FetchSlots } from './fetch-slots.ts';
import { cacheLifetimeSeconds, safeFetch, type HostLookup } from '../protocol/safe-fetch.ts';
import { jwksShapeProblem, jwksUriProblem } from './assertions/client-keys.ts';
import type { ClientMetadataResolver, MetadataClient, MetadataResolution } from '../protocol/remote-documents.ts';

export const METADATA_FETCH_TIMEOUT_MS = 5000;
export const METADATA_MAX_BYTES = 5120;
/** A refused URL is not fetched again for this long, so a hostile one cannot make us fetch on every request. */
export const METADATA_REFUSAL_CACHE_SECONDS = 60;
/**
 * A fetch that got no definitive answer (a timeout, no connection, a 5xx) is not tried again
 * for this long: remembered apart from refusals, never as one (the client is not unknown,
 * only unreachable for now).
 */
export const METADATA_UNANSWERED_CACHE_SECONDS = 10;
/**
 * At the token endpoint, a client whose document cannot be fetched right now keeps the last
 * good copy for at most this long past its expiry.
 */
export const METADATA_LAST_GOOD_COPY_SECONDS = 86_400;
/** Good documents, and apart from them refusals and unanswered fetches, each this many at most. */
const CACHE_ENTRIES = 1000;
/**
 * How fetches share their slots (fetch-slots.ts). At most this many at once: each is a
 * socket and a TLS handshake held up to the 5 s deadline. DNS look-ups do not count against
 * libuv's thread pool (safe-fetch.ts resolves with c-ares), so the bound is about sockets,
 * not about leaving that pool to password hashing.
 */
export const METADATA_FETCHES_AT_ONCE = 16;
/** Per document host: a slow or hostile host holds this many, never the others' slots. */
export const METADATA_FETCHES_PER_HOST = 2;
/** Per requesting address (IPv6 by /64), running or waiting; beyond, that address is told to try again. */
export const METADATA_FETCHES_PER_ADDRESS = 4;
const METADATA_FETCHES_WAITING = 64;
/** The same bounds as for clients an administrator registers (clients/clients.ts). */
const MAX_URL_LENGTH = 2000;

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
  // `example.com.` is the same host as `example.com` to DNS but another string to every
  // comparison (blocks, consents, the allow-list): refused rather than canonicalised, so that
  // one client has one ID.
  if (url.hostname.endsWith('.')) return 'has a host name ending in a dot';
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

/** The client metadata flags Gatehouse reads, and the setting each one is. */
const CLIENT_FLAGS = {
  /** RFC 9449 §5.2: its tokens only with a DPoP proof. */
  dpop_bound_access_tokens: 'requireDpop',
  /** RFC 9126 §6: its authorization requests only pushed. */
  require_pushed_authorization_requests: 'requirePar',
} as const;

/** The flags of `fields` (absent: false), or the problem with the first that is not a boolean. */
export function clientFlags(fields: Record<string, unknown>): { requireDpop: boolean; requirePar: boolean } | { problem: string } {
  const flags = { requireDpop: false, requirePar: false };
  for (const [name, setting] of Object.entries(CLIENT_FLAGS)) {
    const value = fields[name] ?? false;
    if (typeof value !== 'boolean') return { problem: `${name} must be true or false` };
    flags[setting] = value;
  }
  return flags;
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
  // Its URLs are stored as written (a URL parser percent-encodes NUL but accepts it): refused whole (params.ts holdsNul).
  if (holdsNul(document)) return refuse('contains a NUL character');
  const fields = document as Record<string, unknown>;

  if (fields.client_id !== url) return refuse('has a client_id other than its own URL');
  if (typeof fields.client_name !== 'string') return refuse('has no client_name');
  const named = normalizeClientName(fields.client_name);
  if ('problem' in named) return refuse(`has a client_name that ${named.problem}`);
  const { name } = named;
  const redirectUris = fields.redirect_uris;
  if (!isStringArray(redirectUris) || redirectUris.length === 0) return refuse('has no redirect_uris (a non-empty array of URLs)');

  const postLogoutRedirectUris = fields.post_logout_redirect_uris ?? [];
  if (!isStringArray(postLogoutRedirectUris)) return refuse('has a post_logout_redirect_uris that is not an array of URLs');
  const postLogoutProblem = urlListProblem(postLogoutRedirectUris, 'post_logout_redirect_uris', false);
  if (postLogoutProblem !== null) return refuse(postLogoutProblem);
  // Delivered through the guarded fetch (https, public addresses): nothing else could be used.
  const backchannelLogoutUri = optionalHttpsUrl(fields, 'backchannel_logout_uri');
  if ('problem' in backchannelLogoutUri) return refuse(`has a ${backchannelLogoutUri.problem}`);
  if (backchannelLogoutUri.value?.includes('#')) return refuse('has a backchannel_logout_uri with a fragment');
  const idTokenAlg = fields.id_token_signed_response_alg ?? 'RS256';
  if (!SIGNING_ALGS.includes(idTokenAlg as SigningAlg)) return refuse(`has an id_token_signed_response_alg other than ${SIGNING_ALGS.join(' or ')}`);
  const clientUri = optionalHttpsUrl(fields, 'client_uri');
  if ('problem' in clientUri) return refuse(`has a ${clientUri.problem}`);
  const logoUri = optionalHttpsUrl(fields, 'logo_uri');
  if ('problem' in logoUri) return refuse(`has a ${logoUri.problem}`);
  const flags = clientFlags(fields);
  if ('problem' in flags) return refuse(`has a ${flags.problem}`);
  // Values other than authorization_code and refresh_token are ignored (§4.8), so only the shape matters.
  for (const field of ['grant_types', 'response_types']) {
    if (fields[field] !== undefined && !isStringArray(fields[field])) return refuse(`has a ${field} that is not an array of strings`);
  }
  const authMethod = authMethodOf(fields);
  if (typeof authMethod === 'object') return refuse(authMethod.problem);
  // A private-use scheme (RFC 8252 §7.1) only for a public client: one with keys is a confidential client.
  const redirectProblem = urlListProblem(redirectUris, 'redirect_uris', authMethod === 'none');
  if (redirectProblem !== null) return refuse(redirectProblem);
  let jwks: string | null = null;
  let jwksUri: string | null = null;
  if (authMethod === 'private_key_jwt') {
    if (fields.jwks !== undefined && fields.jwks_uri !== undefined) return refuse('has both jwks and jwks_uri (RFC 7591 §2: one or the other)');
    if (fields.jwks_uri !== undefined) {
      const problem = typeof fields.jwks_uri === 'string' ? jwksUriProblem(fields.jwks_uri) : 'is not a string';
      if (problem !== null) return refuse(`has a jwks_uri that ${problem}`);
      jwksUri = fields.jwks_uri as string;
    } else if (fields.jwks !== undefined) {
      const problem = jwksShapeProblem(fields.jwks);
      if (problem !== null) return refuse(`has a jwks that ${problem}`);
      jwks = JSON.stringify(fields.jwks);
    } else {
      return refuse('asks for private_key_jwt without jwks or jwks_uri');
    }
  }
  if ('client_secret' in fields) return refuse('contains a client_secret');
  const scope = fields.scope;
  if (scope !== undefined && (typeof scope !== 'string' || !SCOPE.test(scope))) return refuse('has a scope that is not a list of scope names');

  return {
    ok: true,
    client: {
      id: url,
      name,
      redirectUris,
      clientUri: clientUri.value,
      logoUri: logoUri.value,
      scope: scope ?? null,
      postLogoutRedirectUris,
      backchannelLogoutUri: backchannelLogoutUri.value,
      idTokenAlg: idTokenAlg as SigningAlg,
      jwks,
      jwksUri,
      ...flags,
    },
  };
}

/**
 * How the document's client authenticates (SPEC §4.8): its `token_endpoint_auth_method`
 * (absent: `none`), or — OpenID Connect RP Metadata Choices 1.0, the shape ChatGPT's
 * documents have — the one the server picks from `token_endpoint_auth_methods_supported`:
 * `private_key_jwt` when listed and the document has keys, else `none` when listed.
 */
function authMethodOf(fields: Record<string, unknown>): 'none' | 'private_key_jwt' | { problem: string } {
  const single = fields.token_endpoint_auth_method;
  const choices = fields.token_endpoint_auth_methods_supported;
  if (single === undefined && choices !== undefined) {
    if (!isStringArray(choices)) return { problem: 'has a token_endpoint_auth_methods_supported that is not an array of strings' };
    const hasKeys = fields.jwks_uri !== undefined || fields.jwks !== undefined;
    if (choices.includes('private_key_jwt') && hasKeys) return 'private_key_jwt';
    if (choices.includes('none')) return 'none';
    return { problem: 'lists in token_endpoint_auth_methods_supported neither none nor private_key_jwt with keys' };
  }
  if (single === undefined || single === 'none' || single === 'private_key_jwt') return single ?? 'none';
  return { problem: 'asks for a token_endpoint_auth_method other than none or private_key_jwt' };
}

/** Why a list of redirect URLs (`field`) is refused, naming the first unusable one; null when every one is usable. */
function urlListProblem(uris: readonly string[], field: string, publicClient: boolean): string | null {
  for (const [index, uri] of uris.entries()) {
    const problem = uri.length > MAX_URL_LENGTH ? 'is too long' : redirectUriProblem(uri, { publicClient });
    if (problem !== null) return `has an unusable ${field}[${index}]: it ${problem}`;
  }
  return null;
}

export interface ClientMetadataOptions {
  /** Epoch milliseconds; cache lifetimes follow it, so tests can move time on. */
  readonly now: () => number;
  /** Whether an administrator blocked or disabled this URL's client (or blocked a prefix of it); asked before the cache, on every call. */
  readonly isBlocked?: (url: string) => boolean | Promise<boolean>;
  /** Stands in for DNS (tests). */
  readonly lookup?: HostLookup;
}

type Failure = { readonly ok: false; readonly reason: string; readonly transient: boolean };

export function createClientMetadataResolver(settings: Config['clientMetadata'], options: ClientMetadataOptions): ClientMetadataResolver {
  const { now } = options;

  async function fetchDocument(url: string): Promise<MetadataClient | Failure> {
    const fetched = await safeFetch(new URL(url), {
      allowPrivateAddresses: settings.allowPrivateAddresses,
      timeoutMs: METADATA_FETCH_TIMEOUT_MS,
      maxBytes: METADATA_MAX_BYTES,
      accept: 'application/json',
      lookup: options.lookup,
    });
    if (!fetched.ok) return { ok: false, reason: `the metadata document could not be fetched: ${fetched.reason}`, transient: fetched.transient };
    const validation = validateMetadataDocument(url, fetched.body.toString('utf8'));
    if (!validation.ok) return { ...validation, transient: false };
    const fetchedAt = now();
    const expiresAt = fetchedAt + cacheLifetimeSeconds(fetched.headers['cache-control']) * 1000;
    return { ...validation.client, fetchedAt, expiresAt };
  }

  const slots = new FetchSlots({
    atOnce: METADATA_FETCHES_AT_ONCE,
    perHost: METADATA_FETCHES_PER_HOST,
    perAddress: METADATA_FETCHES_PER_ADDRESS,
    maxWaiting: METADATA_FETCHES_WAITING,
    maxWaitMs: METADATA_FETCH_TIMEOUT_MS,
  });
  /**
   * Good documents by URL. Kept past their expiry (until pushed out, or replaced by a refusal)
   * as the last good copy; fresh while `now() < expiresAt`.
   */
  const documents = new LRUCache<string, MetadataClient>({ max: CACHE_ENTRIES });
  /**
   * Refusals and unanswered fetches by URL, each for its own time: apart from good documents,
   * so that a flood of them pushes out only their like.
   */
  // ttlResolution 0: read the clock on every look-up, so an injected clock is followed exactly.
  const failures = new LRUCache<string, Failure>({ max: CACHE_ENTRIES, perf: { now }, ttlResolution: 0 });
  /** Fetches under way, shared by concurrent requests for the same URL. */
  const fetching = new Map<string, Promise<MetadataClient | Failure | typeof BUSY>>();

  function startFetch(url: string, address: string): Promise<MetadataClient | Failure | typeof BUSY> {
    const host = new URL(url).hostname;
    const fetched = slots
      // resolve() never throws: even a fault of our own here makes the client unknown, not a 500.
      .run(host, addressKey(address), () =>
        fetchDocument(url).catch((error: Error): Failure => ({
          ok: false,
          reason: `the metadata document could not be fetched: ${error.message}`,
          transient: false,
        })),
      )
      .then((outcome) => {
        if (outcome === BUSY) return outcome; // says nothing about the URL: not remembered
        if (!('ok' in outcome)) {
          documents.set(url, outcome);
          failures.delete(url);
        } else if (outcome.transient) {
          failures.set(url, outcome, { ttl: METADATA_UNANSWERED_CACHE_SECONDS * 1000 });
        } else {
          failures.set(url, outcome, { ttl: METADATA_REFUSAL_CACHE_SECONDS * 1000 });
          documents.delete(url); // no longer a good copy to fall back on
        }
        return outcome;
      })
      .finally(() => fetching.delete(url));
    fetching.set(url, fetched);
    return fetched;
  }

  return {
    async resolve(clientId, request = {}) {
      if (!settings.enabled) return { ok: false, reason: 'client ID metadata documents are turned off (CLIENT_METADATA_DOCUMENTS)' };
      const problem = metadataUrlProblem(clientId);
      if (problem !== null) return { ok: false, reason: `the client_id ${problem}` };
      if (!hostAllowed(new URL(clientId).hostname, settings.allowedHosts)) {
        return { ok: false, reason: 'the client_id is on a host outside CLIENT_METADATA_ALLOWED_HOSTS' };
      }
      if (await options.isBlocked?.(clientId)) return { ok: false, reason: 'the client is blocked or disabled' };

      const unavailable = (reason: string, retryAfterMs: number): MetadataResolution => {
        const copy = documents.get(clientId);
        if (request.lastGoodCopy && copy && now() < copy.expiresAt + METADATA_LAST_GOOD_COPY_SECONDS * 1000) return { ok: true, client: copy };
        return { ok: false, reason, unavailable: { retryAfterMs } };
      };
      const answer = (outcome: MetadataClient | Failure | typeof BUSY): MetadataResolution => {
        if (outcome === BUSY)
          return unavailable(`no metadata document fetch could start: too many are under way (for this address, this host or in all)`, 1000);
        if (!('ok' in outcome)) return { ok: true, client: outcome };
        if (outcome.transient) return unavailable(outcome.reason, failures.getRemainingTTL(clientId) || 1000);
        return { ok: false, reason: outcome.reason };
      };

      const cached = documents.get(clientId);
      if (cached && now() < cached.expiresAt) return { ok: true, client: cached };
      const failure = failures.get(clientId);
      if (failure) return answer(failure);
      const underWay = fetching.get(clientId);
      if (underWay) {
        const shared = await underWay;
        // Another address found no slot: that says nothing about this request's own chances.
        if (shared !== BUSY) return answer(shared);
      }
      await request.beforeFetch?.();
      // Looked up again after the await: a fetch started meanwhile is shared, not repeated.
      return answer(await (fetching.get(clientId) ?? startFetch(clientId, request.address ?? '')));
    },
  };
}
