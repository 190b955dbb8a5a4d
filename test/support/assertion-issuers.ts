/**
 * Issuers of signed assertions for the jwt-bearer suites (SPEC §4.11), served over https with
 * certificates from the test CA (./tls.ts), on 127.0.0.1 — so Gatehouse must trust them with
 * `--allow-private-address`:
 * - `startMockIdp`: a real OAuth 2.0 / OIDC server (oauth2-mock-server) with discovery and a
 *   JWKS, whose token endpoint is made to issue ID-JAGs (typ `oauth-id-jag+jwt`, the claims
 *   the draft lists) — an enterprise IdP as a client meets it;
 * - `serveKeys`: a JWK Set of keys made with jose, at a plain path, with misbehaving paths
 *   beside it (`/slow` never answers, `/huge` is over the size cap, `/redirect` redirects).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { exportJWK, generateKeyPair, importJWK, SignJWT, type CryptoKey, type JWK, type JWTPayload } from 'jose';
import { OAuth2Server } from 'oauth2-mock-server';
import { serverCertificate } from './tls.ts';

export interface IdJagClaims {
  sub?: string;
  email?: string;
  client_id: string;
  aud: string;
  resource?: string;
  scope?: string;
  jti?: string;
  lifetime?: number;
}

export interface MockIdp {
  /** Its issuer URL (`https://localhost:<port>`). */
  issuer: string;
  /** Asks its token endpoint for an ID-JAG, as a client of the IdP would (here with client_credentials, reshaped into an ID-JAG). */
  requestIdJag(claims: IdJagClaims): Promise<string>;
  /** Signs with its own key, as it would, but with whatever header and claims a test needs (attacks). */
  sign(header: Record<string, unknown>, claims: JWTPayload): Promise<string>;
  /** Its public key as PEM-free JWK, for key-confusion attempts. */
  publicJwk: JWK;
  close(): Promise<void>;
}

export async function startMockIdp(): Promise<MockIdp> {
  const dir = mkdtempSync(join(tmpdir(), 'gatehouse-idp-'));
  const { key, cert } = serverCertificate(['localhost', '127.0.0.1']);
  writeFileSync(join(dir, 'key.pem'), key);
  writeFileSync(join(dir, 'cert.pem'), cert);
  const idp = new OAuth2Server(join(dir, 'key.pem'), join(dir, 'cert.pem'));
  rmSync(dir, { recursive: true, force: true });
  const signingKey = await idp.issuer.keys.generate('RS256');
  await idp.start(0, '127.0.0.1');
  const issuer = idp.issuer.url!;
  // The claims of the next ID-JAG the token endpoint issues (one request at a time in these tests).
  let pending: IdJagClaims | null = null;
  idp.service.on('beforeTokenSigning', (token: { header: Record<string, unknown>; payload: Record<string, unknown> }) => {
    if (pending === null) return;
    const { lifetime = 300, ...claims } = pending;
    token.header.typ = 'oauth-id-jag+jwt';
    const iat = Math.floor(Date.now() / 1000);
    delete token.payload.nbf;
    delete token.payload.scope;
    Object.assign(token.payload, { jti: crypto.randomUUID(), ...claims, iat, exp: iat + lifetime });
    pending = null;
  });
  const privateJwk = idp.issuer.keys.toJSON(true).find((k) => k.kid === signingKey.kid) as JWK;
  const privateKey = (await importJWK(privateJwk, 'RS256')) as CryptoKey;
  const { d: _d, p: _p, q: _q, dp: _dp, dq: _dq, qi: _qi, ...publicJwk } = privateJwk;
  return {
    issuer,
    async requestIdJag(claims) {
      pending = claims;
      const response = await fetch(`${issuer}/token`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ grant_type: 'client_credentials' }),
      });
      if (response.status !== 200) throw new Error(`the IdP answered ${response.status}`);
      return ((await response.json()) as { access_token: string }).access_token;
    },
    sign: (header, claims) => new SignJWT(claims).setProtectedHeader({ alg: 'RS256', kid: signingKey.kid, ...header } as never).sign(privateKey),
    publicJwk,
    close: () => idp.stop(),
  };
}

export interface KeyServer {
  /** The JWKS URL of the good key set. */
  jwksUri: string;
  /** The same server's other paths: `${origin}/slow`, `/huge`, `/redirect`. */
  origin: string;
  privateKey: CryptoKey;
  kid: string;
  close(): void;
}

/** A JWK Set of one RS256 key made with jose, and paths beside it that misbehave. */
export async function serveKeys(alg: 'RS256' | 'ES256' = 'RS256'): Promise<KeyServer> {
  const { publicKey, privateKey } = await generateKeyPair(alg, { extractable: true });
  const kid = `key-${crypto.randomUUID()}`;
  const jwks = { keys: [{ ...(await exportJWK(publicKey)), kid, alg, use: 'sig' }] };
  const hanging = new Set<import('node:http').ServerResponse>();
  const server = createServer(serverCertificate(['localhost', '127.0.0.1']), (request, response) => {
    if (request.url === '/jwks') return void response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(jwks));
    if (request.url === '/huge') {
      const padding = 'x'.repeat(200 * 1024);
      return void response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ ...jwks, padding }));
    }
    if (request.url === '/redirect') return void response.writeHead(302, { location: '/jwks' }).end();
    if (request.url === '/slow') return void hanging.add(response); // never answers
    response.writeHead(404).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const origin = `https://localhost:${(server.address() as AddressInfo).port}`;
  return {
    jwksUri: `${origin}/jwks`,
    origin,
    privateKey,
    kid,
    close() {
      for (const response of hanging) response.destroy();
      server.closeAllConnections();
      server.close();
    },
  };
}
