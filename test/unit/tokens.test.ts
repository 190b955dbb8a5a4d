/** Tokens (src/tokens.ts): how secrets are minted, hashed, recognised and sealed. */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { describe, test } from 'node:test';
import { TOKEN_PREFIX, constantTimeEqual, hashIfWellFormed, hashToken, mintToken, openWithToken, sealWithToken, type TokenKind } from '../../src/tokens.ts';

const KINDS = Object.keys(TOKEN_PREFIX) as TokenKind[];

describe('mintToken', () => {
  test('every kind carries its own prefix, so a leaked token is recognisable', () => {
    assert.equal(new Set(Object.values(TOKEN_PREFIX)).size, KINDS.length);
    for (const kind of KINDS) assert.ok(mintToken(kind).token.startsWith(TOKEN_PREFIX[kind]), kind);
  });

  test('after the prefix come 32 random bytes as 43 base64url characters (256 bits)', () => {
    const { token } = mintToken('access');
    const secret = token.slice(TOKEN_PREFIX.access.length);
    assert.match(secret, /^[A-Za-z0-9_-]{43}$/);
    assert.equal(Buffer.from(secret, 'base64url').length, 32);
  });

  test('tokens do not repeat', () => {
    const tokens = new Set(Array.from({ length: 1000 }, () => mintToken('code').token));
    assert.equal(tokens.size, 1000);
  });

  test('the stored hash is the SHA-256 of the whole token and does not contain it', () => {
    const { token, hash } = mintToken('refresh');
    assert.equal(hash, createHash('sha256').update(token).digest('base64url'));
    assert.equal(hash, hashToken(token));
    assert.ok(!hash.includes(token.slice(4)));
  });
});

describe('hashIfWellFormed', () => {
  test('a well-formed token of the expected kind gets its stored hash', () => {
    const minted = mintToken('session');
    assert.equal(hashIfWellFormed('session', minted.token), minted.hash);
  });

  test('a token of another kind is refused before any lookup (an access token is no refresh token)', () => {
    const access = mintToken('access').token;
    assert.equal(hashIfWellFormed('refresh', access), null);
    assert.equal(hashIfWellFormed('session', access), null);
  });

  test('truncated, extended, unprefixed or empty values are refused', () => {
    const { token } = mintToken('access');
    for (const value of [token.slice(0, -1), `${token}A`, token.slice(TOKEN_PREFIX.access.length), `${'x'.repeat(47)}`, '', TOKEN_PREFIX.access]) {
      assert.equal(hashIfWellFormed('access', value), null, value);
    }
  });
});

describe('constantTimeEqual', () => {
  test('compares strings, including ones of different lengths, without throwing', () => {
    assert.equal(constantTimeEqual('secret', 'secret'), true);
    assert.equal(constantTimeEqual('secret', 'secreT'), false);
    assert.equal(constantTimeEqual('secret', 'secret!'), false);
    assert.equal(constantTimeEqual('', ''), true);
  });
});

describe('sealWithToken / openWithToken', () => {
  test('only the same token opens what it sealed', () => {
    const predecessor = mintToken('refresh').token;
    const sealed = sealWithToken(predecessor, 'successor pair');
    assert.ok(!sealed.includes('successor'));
    assert.equal(openWithToken(predecessor, sealed), 'successor pair');
    assert.equal(openWithToken(mintToken('refresh').token, sealed), null);
  });

  test('a tampered or garbage box does not open, and does not throw', () => {
    const token = mintToken('refresh').token;
    const sealed = sealWithToken(token, 'successor pair');
    const flipped = `${sealed.slice(0, -2)}${sealed.at(-2) === 'A' ? 'B' : 'A'}${sealed.at(-1)}`;
    assert.equal(openWithToken(token, flipped), null);
    assert.equal(openWithToken(token, ''), null);
    assert.equal(openWithToken(token, 'not base64url!'), null);
  });
});
