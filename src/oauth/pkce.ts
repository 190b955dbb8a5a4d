/**
 * Proof Key for Code Exchange, S256 only (RFC 7636; "plain" is refused as OAuth 2.1 and
 * RFC 9700 §2.1.1 advise).
 */
import { createHash } from 'node:crypto';
import { constantTimeEqual } from '../tokens.ts';
import { invalidGrant, invalidRequest } from '../protocol/errors.ts';

/** @see RFC 7636 §4.1: 43–128 characters of [A-Z] / [a-z] / [0-9] / "-" / "." / "_" / "~" */
const VERIFIER = /^[A-Za-z0-9\-._~]{43,128}$/;
/** BASE64URL(SHA256(verifier)) is always 43 characters. */
const CHALLENGE = /^[A-Za-z0-9\-_]{43}$/;

/** Validates the PKCE parameters of an authorization request; returns the challenge, if any. */
export function checkChallenge(challenge: string | undefined, method: string | undefined, required: boolean): string | null {
  if (challenge === undefined) {
    if (method !== undefined) throw invalidRequest('"code_challenge_method" was sent without "code_challenge"');
    if (required) throw invalidRequest('this client must use PKCE: send "code_challenge" and "code_challenge_method=S256"');
    return null;
  }
  // RFC 7636 §4.3 defaults a missing method to "plain", which is not supported.
  if (method !== 'S256') throw invalidRequest('"code_challenge_method" must be S256');
  if (!CHALLENGE.test(challenge)) throw invalidRequest('"code_challenge" must be 43 base64url characters (S256)');
  return challenge;
}

/** Checks a token request's verifier against the code's challenge. @see RFC 7636 §4.6 */
export function checkVerifier(challenge: string | null, verifier: string | undefined): void {
  if (challenge === null) {
    if (verifier !== undefined) throw invalidGrant('"code_verifier" was sent but the authorization request had no "code_challenge"');
    return;
  }
  if (verifier === undefined) throw invalidGrant('"code_verifier" is required: the authorization request used PKCE');
  if (!VERIFIER.test(verifier)) throw invalidRequest('"code_verifier" must be 43-128 characters of A-Z a-z 0-9 - . _ ~');
  const computed = createHash('sha256').update(verifier).digest('base64url');
  if (!constantTimeEqual(computed, challenge)) throw invalidGrant('"code_verifier" does not match the "code_challenge"');
}
