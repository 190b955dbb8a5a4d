/**
 * What checking one DPoP proof costs the server's CPU (issue 36, item 7): Gatehouse's whole
 * check (`verifyProof` in src/oauth/dpop.ts: jose's `jwtVerify`, the claims, the thumbprint and
 * the `jti`'s write, here on an in-memory SQLite database) for proofs by one key — what a client
 * sends — and beside it the signature alone through OpenSSL (`crypto.verify`, the key imported
 * once): the floor no implementation goes below. ES256 proofs, what oauth4webapi and
 * openid-client make by default. Interleaved rounds, medians of µs per proof. Run with
 * `npm run bench:dpop-proof`.
 */
import { createPublicKey, verify } from 'node:crypto';
import { decodeProtectedHeader, type JWK } from 'jose';
import { generateKeyPair, generateProof } from 'dpop';
import { verifyProof } from '../src/oauth/dpop.ts';
import { memoryContext } from '../test/unit/support/context.ts';
import { MicroTimings } from './harness.ts';

const PROOFS = 2000;
const ROUNDS = 7;
const TOKEN_URL = 'https://auth.example/api/token';

const { ctx, clock, close } = await memoryContext();

async function proofs(): Promise<string[]> {
  const keys = await generateKeyPair('ES256');
  return Promise.all(Array.from({ length: PROOFS }, () => generateProof(keys, TOKEN_URL, 'POST')));
}

/** The signature alone: OpenSSL, with the key imported once. */
function signatureOnly(batch: string[]): () => void {
  const key = createPublicKey({ key: decodeProtectedHeader(batch[0]!).jwk as JWK as never, format: 'jwk' });
  const parts = batch.map((proof) => {
    const [header, payload, signature] = proof.split('.');
    return { data: Buffer.from(`${header}.${payload}`), signature: Buffer.from(signature!, 'base64url') };
  });
  return () => {
    for (const { data, signature } of parts) if (!verify('sha256', data, { key, dsaEncoding: 'ieee-p1363' }, signature)) throw new Error('signature');
  };
}

const timings = new MicroTimings(PROOFS);
for (let round = 0; round < ROUNDS; round++) {
  // A new key each round: its first proof imports it, the rest find it (PROOF_KEYS).
  const batch = await proofs();
  clock.now = Date.now();
  await timings.time("Gatehouse's check, jti write included", async () => {
    for (const proof of batch) await verifyProof(ctx, proof, { method: 'POST', urls: [TOKEN_URL] }, 'token');
  });
  await timings.time('the signature alone (OpenSSL)', signatureOnly(batch));
}
timings.report('proof', 'ES256 ');
await close();
