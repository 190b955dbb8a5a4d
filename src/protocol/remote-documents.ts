/**
 * What Gatehouse fetches from others, as the rest of the code sees it: clients known by a
 * client ID metadata document (SPEC §4.8; fetched, validated and cached by
 * oauth/client-metadata.ts) and public key sets (SPEC §4.11; oauth/assertions/remote-keys.ts).
 * The engines' interfaces live here, below context.ts, which holds one of each per process.
 */
import type { JWTVerifyGetKey } from 'jose';
import type { SigningAlg } from '../store/schema.ts';

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
  /** OpenID Connect (SPEC §4.10): `post_logout_redirect_uris`, `backchannel_logout_uri`, `id_token_signed_response_alg`. */
  readonly postLogoutRedirectUris: readonly string[];
  readonly backchannelLogoutUri: string | null;
  readonly idTokenAlg: SigningAlg;
  /**
   * `private_key_jwt` (SPEC §4.11): the document's `jwks` (as JSON text) or `jwks_uri`; both
   * null for a public client. Such a client is confidential and authenticates with them.
   */
  readonly jwks: string | null;
  readonly jwksUri: string | null;
  /** `dpop_bound_access_tokens`: its tokens only with a DPoP proof (SPEC §4.14). */
  readonly requireDpop: boolean;
  /** `require_pushed_authorization_requests`: its authorization requests only pushed (SPEC §4.14). */
  readonly requirePar: boolean;
  /** Epoch milliseconds. */
  readonly fetchedAt: number;
  readonly expiresAt: number;
}

export type MetadataResolution =
  | { readonly ok: true; readonly client: MetadataClient }
  /**
   * `unavailable`: no definitive answer — no fetch slot was free (not remembered), or the
   * fetch got no answer (remembered oauth/client-metadata.ts METADATA_UNANSWERED_CACHE_SECONDS) — so the client is
   * not unknown, and asking again after `retryAfterMs` may succeed. Otherwise a refusal: the
   * client is unknown.
   */
  | { readonly ok: false; readonly reason: string; readonly unavailable?: { readonly retryAfterMs: number } };

export interface ResolveRequest {
  /** The requesting address: its fetches share oauth/client-metadata.ts METADATA_FETCHES_PER_ADDRESS slots. */
  readonly address?: string;
  /**
   * Runs only when a fetch is about to start (not for a cached document) and may throw to
   * prevent it: the caller's budget for fetches (its address's), so that a flood of distinct
   * URLs is refused before it costs lookups and connections.
   */
  readonly beforeFetch?: () => Promise<void>;
  /**
   * When the document cannot be fetched right now (unavailable), answer with the last good
   * copy instead, up to METADATA_LAST_GOOD_COPY_SECONDS (oauth/client-metadata.ts) past its
   * expiry: for the token endpoint, where only the client's standing is at stake. Not for the authorization
   * endpoint, which must see the redirect URLs the document lists now — else a flood that
   * kept the document from being fetched would keep a redirect URL its owner removed alive.
   */
  readonly lastGoodCopy?: boolean;
}

export interface ClientMetadataResolver {
  /** The client `clientId` names, from the cache or freshly fetched; or why it is unknown or unavailable. */
  resolve(clientId: string, request?: ResolveRequest): Promise<MetadataResolution>;
}

export interface RemoteFetchOptions {
  /**
   * Whether the URL may resolve to a loopback, private or otherwise non-public address: a
   * trusted issuer's `--allow-private-address`, or the development setting
   * CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES. Otherwise such an address is refused before connecting.
   */
  readonly allowPrivateAddress: boolean;
}

/** A verifier's view of a key set: pass it to jose's `jwtVerify` as the key. */
export interface RemoteKeySet {
  readonly url: string;
  /** jose's key resolution (`JWTVerifyGetKey`): the key the header names, fetching the set when needed. */
  readonly getKey: JWTVerifyGetKey;
}

/** Others' public keys, fetched through the guarded fetch and cached (oauth/assertions/remote-keys.ts `RemoteKeys`). */
export interface RemoteKeySource {
  /** The key set at `url`. */
  keySet(url: string, options?: RemoteFetchOptions): RemoteKeySet;
  /** The key set of `issuer`: at `jwksUri` when given, else at the one its metadata names. */
  issuerKeySet(issuer: string, jwksUri: string | null, options?: RemoteFetchOptions): Promise<RemoteKeySet>;
}
