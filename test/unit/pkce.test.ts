/** PKCE (src/oauth/pkce.ts): which challenges an authorization request may carry, which verifiers redeem a code. */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { describe, test } from 'node:test';
import { checkChallenge, checkVerifier } from '../../src/oauth/pkce.ts';

/** The example of RFC 7636 Appendix B. */
const RFC_VERIFIER = 'dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk';
const RFC_CHALLENGE = 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM';

const challengeOf = (verifier: string) => createHash('sha256').update(verifier).digest('base64url');

describe('checkChallenge (authorization request)', () => {
  test('a request without PKCE is accepted unless PKCE is required', () => {
    assert.equal(checkChallenge(undefined, undefined, false), null);
    assert.throws(() => checkChallenge(undefined, undefined, true), { error: 'invalid_request', description: /must use PKCE/ });
  });

  test('an S256 challenge is accepted and kept', () => {
    assert.equal(checkChallenge(RFC_CHALLENGE, 'S256', true), RFC_CHALLENGE);
  });

  test('a method without a challenge is refused', () => {
    assert.throws(() => checkChallenge(undefined, 'S256', false), { error: 'invalid_request', description: /without "code_challenge"/ });
  });

  test('"plain" is refused, also when the method is left out (RFC 7636 §4.3 defaults it to plain)', () => {
    assert.throws(() => checkChallenge(RFC_CHALLENGE, 'plain', false), { error: 'invalid_request', description: /must be S256/ });
    assert.throws(() => checkChallenge(RFC_CHALLENGE, undefined, false), { error: 'invalid_request', description: /must be S256/ });
    assert.throws(() => checkChallenge(RFC_CHALLENGE, 's256', false), { error: 'invalid_request' });
  });

  test('a challenge that cannot be a base64url SHA-256 is refused', () => {
    for (const challenge of [
      RFC_CHALLENGE.slice(1),
      `${RFC_CHALLENGE}A`,
      `${RFC_CHALLENGE.slice(1)}=`,
      `${RFC_CHALLENGE.slice(1)}+`,
      RFC_VERIFIER.replace('-', '.'),
    ]) {
      assert.throws(() => checkChallenge(challenge, 'S256', false), { error: 'invalid_request', description: /43 base64url/ }, challenge);
    }
  });
});

describe('checkVerifier (token request)', () => {
  test('the RFC 7636 example verifier matches its challenge', () => {
    assert.doesNotThrow(() => checkVerifier(RFC_CHALLENGE, RFC_VERIFIER));
  });

  test('verifiers of 43 and of 128 characters, using every allowed character, are accepted', () => {
    for (const verifier of ['A'.repeat(43), `${'aZ09-._~'.repeat(15)}abcdefgh`]) {
      assert.doesNotThrow(() => checkVerifier(challengeOf(verifier), verifier));
    }
  });

  test('a verifier that does not match is invalid_grant', () => {
    assert.throws(() => checkVerifier(RFC_CHALLENGE, `${RFC_VERIFIER.slice(0, -1)}l`), { error: 'invalid_grant', description: /does not match/ });
  });

  test('a code issued with PKCE cannot be redeemed without a verifier', () => {
    assert.throws(() => checkVerifier(RFC_CHALLENGE, undefined), { error: 'invalid_grant', description: /is required/ });
  });

  test('a verifier for a code issued without PKCE is refused (a downgrade attempt, RFC 9700 §2.1.1)', () => {
    assert.throws(() => checkVerifier(null, RFC_VERIFIER), { error: 'invalid_grant' });
    assert.doesNotThrow(() => checkVerifier(null, undefined));
  });

  test('a malformed verifier is invalid_request, even before comparing', () => {
    for (const verifier of ['A'.repeat(42), 'A'.repeat(129), `${'A'.repeat(42)}+`, `${'A'.repeat(42)} `, `${'A'.repeat(42)}é`]) {
      assert.throws(() => checkVerifier(challengeOf(verifier), verifier), { error: 'invalid_request', description: /43-128/ }, verifier);
    }
  });
});
