/** Tokens (src/tokens.ts): how secrets are minted, hashed, recognised and sealed. */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { describe, test } from 'node:test';
import {
  TOKEN_PREFIX,
  constantTimeEqual,
  drawRandomBytes,
  hashIfWellFormed,
  hashToken,
  mintToken,
  openWithToken,
  sealWithToken,
  type TokenKind,
} from '../../src/tokens.ts';

const KINDS = Object.keys(TOKEN_PREFIX) as TokenKind[];

describe('drawRandomBytes', () => {
  test('draws of any size are fresh across many refills of the pool, and each stays as it was drawn', () => {
    const first = drawRandomBytes(32);
    const kept = Buffer.from(first);
    const seen = new Set<string>();
    for (let i = 0; i < 3000; i++) {
      const size = [12, 16, 32][i % 3]!;
      const bytes = drawRandomBytes(size);
      assert.equal(bytes.length, size);
      seen.add(bytes.toString('hex'));
    }
    assert.equal(seen.size, 3000, 'no draw repeats another, across the pool’s edges');
    assert.deepEqual(first, kept, 'a draw is a copy: wiping it from the pool and refilling the pool leave it alone');
    assert.notDeepEqual(first, Buffer.alloc(32));
  });

  test('a draw larger than the pool, or of no whole positive size, is refused, never shortened', () => {
    for (const size of [4097, 0, -1, 1.5, Number.NaN]) assert.throws(() => drawRandomBytes(size), RangeError, String(size));
    assert.equal(drawRandomBytes(32).length, 32, 'a refused draw leaves the pool as it was');
    assert.notDeepEqual(drawRandomBytes(32), Buffer.alloc(32));
  });
});

describe('mintToken', () => {
  test('every kind carries its own prefix, so a leaked token is recognisable', () => {
    assert.equal(new Set(Object.values(TOKEN_PREFIX)).size, KINDS.length);
    for (const kind of KINDS) assert.ok(mintToken(kind).token.startsWith(TOKEN_PREFIX[kind]), kind);
  });

  test('the secret is 32 random bytes as 43 base64url characters (256 bits), last in the token', () => {
    for (const kind of KINDS) {
      const secret = mintToken(kind).token.slice(-43);
      assert.match(secret, /^[A-Za-z0-9_-]{43}$/);
      assert.equal(Buffer.from(secret, 'base64url').length, 32);
    }
    assert.equal(mintToken('session').token.length, TOKEN_PREFIX.session.length + 43);
  });

  test('the tokens written most carry the millisecond they were made, and their stored hash starts with it', () => {
    for (const kind of ['access', 'refresh', 'code', 'jwtId'] as const) {
      const before = Date.now();
      const { token, hash } = mintToken(kind);
      const time = token.slice(TOKEN_PREFIX[kind].length, TOKEN_PREFIX[kind].length + 12);
      assert.match(time, /^[0-9a-f]{12}$/, kind);
      assert.ok(parseInt(time, 16) >= before && parseInt(time, 16) <= Date.now(), kind);
      assert.equal(hash, time + hashToken(token), kind);
    }
  });

  test('so the stored hashes of tokens made later sort after those made earlier: inserts go to one end of the index', async () => {
    const earlier = Array.from({ length: 50 }, () => mintToken('access').hash);
    await new Promise((resolve) => setTimeout(resolve, 2));
    const later = Array.from({ length: 50 }, () => mintToken('access').hash);
    const newestEarlier = earlier.sort().at(-1)!;
    assert.ok(later.every((hash) => hash > newestEarlier));
  });

  test('tokens do not repeat', () => {
    const tokens = new Set(Array.from({ length: 1000 }, () => mintToken('code').token));
    assert.equal(tokens.size, 1000);
  });

  test('the stored hash is the SHA-256 of the whole token and does not contain its secret', () => {
    for (const kind of ['session', 'refresh'] as const) {
      const { token, hash } = mintToken(kind);
      assert.ok(hash.endsWith(createHash('sha256').update(token).digest('base64url')), kind);
      assert.ok(!hash.includes(token.slice(-43)), kind);
    }
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

  test('a token made before tokens carried their time is still read, by its plain hash', () => {
    const legacy = `${TOKEN_PREFIX.refresh}${mintToken('session').token.slice(-43)}`;
    assert.equal(hashIfWellFormed('refresh', legacy), hashToken(legacy));
  });

  test('a made-up time gives another stored hash (no row), and a time that is not 12 hex digits is refused', () => {
    const { token, hash } = mintToken('access');
    const time = token.slice(4, 16);
    const otherTime = `${token.slice(0, 4)}${(parseInt(time, 16) + 1).toString(16).padStart(12, '0')}${token.slice(16)}`;
    assert.equal(hashIfWellFormed('access', token), hash);
    assert.notEqual(hashIfWellFormed('access', otherTime), hash);
    assert.equal(hashIfWellFormed('access', `${token.slice(0, 4)}${time.toUpperCase().replace(/[0-9]/g, 'Z')}${token.slice(16)}`), null);
    assert.equal(hashIfWellFormed('session', `${TOKEN_PREFIX.session}${time}${token.slice(16)}`), null, 'only the time-keyed kinds carry a time');
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
