/**
 * Trusted issuers without a network, for the unit tests of SPEC §4.11: an issuer's signing
 * key, its public JWK Set served by jose's createLocalJWKSet through a RemoteKeySource (the
 * narrow interface AppContext holds, src/protocol/remote-documents.ts) that fetches nothing,
 * and assertions signed with it.
 */
import { createLocalJWKSet, exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JSONWebKeySet, type JWTPayload } from 'jose';
import type { AppContext } from '../../../src/context.ts';
import type { RemoteKeySource } from '../../../src/protocol/remote-documents.ts';
import { RemoteKeysUnavailable } from '../../../src/oauth/assertions/remote-keys.ts';

export interface SigningKey {
  readonly kid: string;
  readonly alg: 'ES256';
  readonly privateKey: CryptoKey;
  /** The public half as a JWK Set. */
  readonly jwks: JSONWebKeySet;
}

export async function signingKey(kid: string): Promise<SigningKey> {
  const { publicKey, privateKey } = await generateKeyPair('ES256');
  return { kid, alg: 'ES256', privateKey, jwks: { keys: [{ ...(await exportJWK(publicKey)), kid, alg: 'ES256', use: 'sig' }] } };
}

/** A compact JWS of `claims` by `key`, its kid in the header (plus `header`). */
export function sign(key: SigningKey, claims: JWTPayload, header: Record<string, unknown> = {}): Promise<string> {
  return new SignJWT(claims).setProtectedHeader({ alg: key.alg, kid: key.kid, ...header }).sign(key.privateKey);
}

/**
 * `ctx` with its remote key source replaced by local key sets, by issuer: nothing is fetched
 * (an issuer without one, or a key set by URL, is unavailable, as an unreachable one would be).
 */
export function withLocalKeys(ctx: AppContext, byIssuer: Readonly<Record<string, JSONWebKeySet>>): AppContext {
  const remoteKeys: RemoteKeySource = {
    keySet(url) {
      return {
        url,
        getKey: () => {
          throw new RemoteKeysUnavailable(`no network in unit tests (${url})`);
        },
      };
    },
    async issuerKeySet(issuer, jwksUri) {
      const jwks = byIssuer[issuer];
      if (jwks === undefined) throw new RemoteKeysUnavailable(`no local key set for ${issuer}`);
      return { url: jwksUri ?? `${issuer}/jwks`, getKey: createLocalJWKSet(jwks) };
    },
  };
  return { ...ctx, remoteKeys };
}
