/**
 * A client's (or an issuer's) key set served over https with a certificate from the test CA
 * (./tls.ts), on 127.0.0.1 — so the server under test needs CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES=true
 * (or the issuer's --allow-private-address) to reach it. Besides the set itself it serves the
 * hostile variants the suites attack with, and counts the requests each path got.
 *
 * - `/jwks/<name>`: the set named `name` (see `publish`), `Cache-Control` as set
 * - `/slow`: headers, then nothing (the deadline passes)
 * - `/huge`: a JWK Set far larger than any accepted
 * - `/redirect`: a 302 to `/jwks/main`
 */
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, type CryptoKey, type JWK } from 'jose';
import { serverCertificate } from './tls.ts';

export interface SigningKey {
  kid: string;
  alg: 'RS256' | 'PS256' | 'ES256' | 'EdDSA';
  privateKey: CryptoKey;
  publicJwk: JWK;
}

export async function signingKey(alg: SigningKey['alg'], kid: string): Promise<SigningKey> {
  const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true });
  return { kid, alg, privateKey, publicJwk: { ...(await exportJWK(publicKey)), kid, alg, use: 'sig' } };
}

export const jwksOf = (...keys: SigningKey[]) => ({ keys: keys.map((key) => key.publicJwk) });

export interface JwksServer {
  origin: string;
  /** The URL of the set named `name`. */
  url(name: string): string;
  /** Serves `keys` as the set `name` from now on. */
  publish(name: string, keys: SigningKey[], cacheControl?: string): void;
  /** Serves `json` at `path` (say, a discovery document under /.well-known/). */
  serve(path: string, json: unknown, cacheControl?: string): void;
  /** How many requests `path` got. */
  requests(path: string): number;
  close(): void;
}

export async function startJwksServer(): Promise<JwksServer> {
  const sets = new Map<string, { body: string; cacheControl?: string }>();
  const documents = new Map<string, { body: string; cacheControl?: string }>();
  const counts = new Map<string, number>();
  const hanging = new Set<import('node:http').ServerResponse>();
  const server = createServer(serverCertificate(['127.0.0.1']), (request, response) => {
    const path = new URL(request.url ?? '/', 'https://127.0.0.1').pathname;
    counts.set(path, (counts.get(path) ?? 0) + 1);
    if (path === '/slow') {
      response.writeHead(200, { 'content-type': 'application/json' });
      hanging.add(response);
      return; // never ends: the fetch's deadline does
    }
    if (path === '/huge') {
      const padding = 'A'.repeat(200_000);
      return void response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: [], padding }));
    }
    if (path === '/redirect') return void response.writeHead(302, { location: `${origin}/jwks/main` }).end();
    const set = path.startsWith('/jwks/') ? sets.get(path.slice('/jwks/'.length)) : documents.get(path);
    if (!set) return void response.writeHead(404).end();
    response.writeHead(200, { 'content-type': 'application/jwk-set+json', ...(set.cacheControl ? { 'cache-control': set.cacheControl } : {}) }).end(set.body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const origin = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    origin,
    url: (name) => `${origin}/jwks/${name}`,
    publish: (name, keys, cacheControl) => void sets.set(name, { body: JSON.stringify(jwksOf(...keys)), cacheControl }),
    serve: (path, json, cacheControl) => void documents.set(path, { body: JSON.stringify(json), cacheControl }),
    requests: (path) => counts.get(path) ?? 0,
    close() {
      for (const response of hanging) response.destroy();
      server.closeAllConnections();
      server.close();
    },
  };
}
