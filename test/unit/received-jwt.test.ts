/**
 * The one verifier of JWTs others sign (src/protocol/received-jwt.ts): one test per rule of
 * SPEC §4.11's assertions, against a local key set (no network) at a fixed clock.
 */
import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { createLocalJWKSet, exportJWK, generateKeyPair, SignJWT, UnsecuredJWT, type JWK, type JWTPayload, type JWTVerifyGetKey } from 'jose';
import { RECEIVED_JWT_LEEWAY_SECONDS as LEEWAY, ReceivedJwtRefused, verifyReceivedJwt, type ReceivedJwtPolicy } from '../../src/protocol/received-jwt.ts';
import { ASSERTION_ALGS } from '../../src/oauth/assertions/remote-keys.ts';

type PrivateKey = Awaited<ReturnType<typeof generateKeyPair>>['privateKey'];

const NOW = 1_750_000_000; // seconds
const ISSUER = 'https://idp.example';
const AS = 'https://as.example';

let keys: JWTVerifyGetKey;
let publicJwk: JWK;
let privateKey: PrivateKey;
let otherKey: PrivateKey;

before(async () => {
  const pair = await generateKeyPair('ES256');
  privateKey = pair.privateKey;
  publicJwk = { ...(await exportJWK(pair.publicKey)), kid: 'k1', alg: 'ES256' };
  keys = createLocalJWKSet({ keys: [publicJwk] });
  otherKey = (await generateKeyPair('ES256')).privateKey;
});

const good = (): JWTPayload => ({ iss: ISSUER, sub: 'alice', aud: AS, iat: NOW, exp: NOW + 60, jti: 'j1' });
const sign = (claims: Record<string, unknown> = {}, header: Record<string, unknown> = {}, key: PrivateKey = privateKey) =>
  new SignJWT({ ...good(), ...claims }).setProtectedHeader({ alg: 'ES256', kid: 'k1', ...header }).sign(key);
const policy = (extra: Partial<ReceivedJwtPolicy> = {}): ReceivedJwtPolicy => ({ algorithms: ASSERTION_ALGS, audience: [AS], now: NOW * 1000, ...extra });

/** Resolves to the refused check (and claim), or 'accepted'. */
async function outcome(jws: string, extra: Partial<ReceivedJwtPolicy> = {}, key: Parameters<typeof verifyReceivedJwt>[1] = keys): Promise<string> {
  try {
    await verifyReceivedJwt(jws, key, policy(extra));
    return 'accepted';
  } catch (error) {
    if (!(error instanceof ReceivedJwtRefused)) throw error;
    return error.claim === undefined || !['missing', 'malformed'].includes(error.check) ? error.check : `${error.check} ${error.claim}`;
  }
}

describe('verifyReceivedJwt (SPEC §4.11)', () => {
  test('a well-formed assertion by a key of the set is accepted, its claims returned', async () => {
    const { payload, header } = await verifyReceivedJwt(await sign(), keys, policy());
    assert.equal(payload.sub, 'alice');
    assert.equal(header.kid, 'k1');
  });

  test('alg none is refused before any key is looked at', async () => {
    const unsecured = new UnsecuredJWT(good()).encode();
    const noKeyLookups: JWTVerifyGetKey = () => assert.fail('a key was looked up');
    assert.equal(await outcome(unsecured, {}, noKeyLookups), 'algorithm');
  });

  test("HS256 is refused for asymmetric issuers, also keyed with the issuer's public key (key confusion)", async () => {
    for (const secret of ['a shared secret', JSON.stringify(publicJwk)]) {
      const hmac = await new SignJWT(good()).setProtectedHeader({ alg: 'HS256', kid: 'k1' }).sign(new TextEncoder().encode(secret));
      assert.equal(await outcome(hmac), 'algorithm');
    }
  });

  test('a policy cannot admit none, nor HS* with a key set', async () => {
    await assert.rejects(verifyReceivedJwt(await sign(), keys, policy({ algorithms: ['ES256', 'none'] })), TypeError);
    await assert.rejects(verifyReceivedJwt(await sign(), keys, policy({ algorithms: ['HS256'] })), TypeError);
  });

  test('a signature by a key the set does not hold is refused, whatever the header offers (jwk, jku, x5u)', async () => {
    const attacker = await generateKeyPair('ES256');
    const offered = { jwk: await exportJWK(attacker.publicKey), jku: 'https://attacker.example/jwks', x5u: 'https://attacker.example/cert' };
    assert.equal(await outcome(await sign({}, offered, attacker.privateKey)), 'signature');
    assert.equal(await outcome(await sign({}, {}, otherKey)), 'signature');
    assert.equal(await outcome(await sign({}, { kid: 'unknown' })), 'signature');
  });

  test("a key the caller holds verifies its own algorithm only: HS256 with the client's secret (h's grant tokens)", async () => {
    const secret = new TextEncoder().encode('the client secret, long enough for HS256');
    const hmac = await new SignJWT(good()).setProtectedHeader({ alg: 'HS256' }).sign(secret);
    assert.equal(await outcome(hmac, { algorithms: ['HS256'] }, secret), 'accepted');
    assert.equal(await outcome(hmac, { algorithms: ['HS256'] }, new TextEncoder().encode('another secret')), 'signature');
    assert.equal(await outcome(await sign(), { algorithms: ['HS256'] }, secret), 'algorithm');
  });

  test('typ: the one the profile fixes, as a media type (case, application/ prefix)', async () => {
    const typ = 'oauth-id-jag+jwt';
    assert.equal(await outcome(await sign({}, { typ: 'JWT' }), { typ }), 'typ');
    assert.equal(await outcome(await sign(), { typ }), 'typ');
    assert.equal(await outcome(await sign({}, { typ: 'application/OAuth-ID-JAG+JWT' }), { typ }), 'accepted');
  });

  test('iss and sub equal the ones required', async () => {
    assert.equal(await outcome(await sign({ iss: 'https://other.example' }), { issuer: ISSUER }), 'iss');
    assert.equal(await outcome(await sign({ sub: 'mallory' }), { subject: 'alice' }), 'sub');
    assert.equal(await outcome(await sign({ sub: undefined }), { subject: 'alice' }), 'missing sub');
  });

  test('aud holds one of the audiences: a string, or an array naming one', async () => {
    const audience = [AS, `${AS}/api/token`];
    for (const aud of [AS, `${AS}/api/token`, ['https://other.example', AS]]) assert.equal(await outcome(await sign({ aud }), { audience }), 'accepted');
    assert.equal(await outcome(await sign({ aud: 'https://other.example' }), { audience }), 'aud');
    assert.equal(await outcome(await sign({ aud: 42 }), { audience }), 'aud');
    assert.equal(await outcome(await sign({ aud: undefined }), { audience }), 'missing aud');
  });

  test('aud exactly (SPEC: "equals … exactly"): the one audience alone, never among others', async () => {
    assert.equal(await outcome(await sign({ aud: AS }), { exactAudience: true }), 'accepted');
    assert.equal(await outcome(await sign({ aud: [AS] }), { exactAudience: true }), 'accepted');
    assert.equal(await outcome(await sign({ aud: [AS, 'https://other.example'] }), { exactAudience: true }), 'aud');
    assert.equal(await outcome(await sign({ aud: `${AS}/` }), { exactAudience: true }), 'aud');
  });

  test('required claims: jti and exp present', async () => {
    assert.equal(await outcome(await sign({ jti: undefined }), { requiredClaims: ['jti'] }), 'missing jti');
    assert.equal(await outcome(await sign({ exp: undefined }), { requiredClaims: ['exp', 'jti'] }), 'missing exp');
    assert.equal(await outcome(await sign({ jti: undefined })), 'accepted', 'jti only when the profile requires it');
  });

  test('time claims are numbers', async () => {
    assert.equal(await outcome(await sign({ exp: 'soon' })), 'malformed exp');
    assert.equal(await outcome(await sign({ iat: '2025-01-01' })), 'malformed iat');
    assert.equal(await outcome(await sign({ nbf: null })), 'malformed nbf');
  });

  test(`exp not past, with ${LEEWAY} s of leeway`, async () => {
    assert.equal(await outcome(await sign({ iat: NOW - 100, exp: NOW - LEEWAY + 1 })), 'accepted');
    assert.equal(await outcome(await sign({ iat: NOW - 100, exp: NOW - LEEWAY })), 'exp');
  });

  test(`nbf not in the future, with ${LEEWAY} s of leeway`, async () => {
    assert.equal(await outcome(await sign({ nbf: NOW + LEEWAY })), 'accepted');
    assert.equal(await outcome(await sign({ nbf: NOW + LEEWAY + 1 })), 'nbf');
  });

  test(`iat not in the future, with ${LEEWAY} s of leeway; checked before nbf and exp (h's order)`, async () => {
    assert.equal(await outcome(await sign({ iat: NOW + LEEWAY })), 'accepted');
    assert.equal(await outcome(await sign({ iat: NOW + LEEWAY + 1 })), 'iat');
    assert.equal(await outcome(await sign({ iat: NOW + 60, nbf: NOW + 60, exp: NOW + 120 })), 'iat');
    assert.equal(await outcome(await sign({ iat: NOW + 60, exp: NOW - 60 })), 'iat');
  });

  test('lifetime: exp − iat at most the maximum (no leeway: both are the token’s own times); iat then required', async () => {
    assert.equal(await outcome(await sign({ iat: NOW, exp: NOW + 300 }), { maxLifetimeSeconds: 300 }), 'accepted');
    assert.equal(await outcome(await sign({ iat: NOW, exp: NOW + 301 }), { maxLifetimeSeconds: 300 }), 'lifetime');
    assert.equal(await outcome(await sign({ iat: undefined }), { maxLifetimeSeconds: 300 }), 'missing iat');
  });

  test(`expiry at most so far away, with ${LEEWAY} s of leeway; exp then required`, async () => {
    assert.equal(await outcome(await sign({ exp: NOW + 300 + LEEWAY }), { maxExpiresInSeconds: 300 }), 'accepted');
    assert.equal(await outcome(await sign({ exp: NOW + 300 + LEEWAY + 1 }), { maxExpiresInSeconds: 300 }), 'expires-in');
    assert.equal(await outcome(await sign({ exp: undefined }), { maxExpiresInSeconds: 300 }), 'missing exp');
  });

  test('a signature is checked before any claim', async () => {
    assert.equal(await outcome(await sign({ aud: 'https://other.example', exp: NOW - 600 }, { typ: 'JWT' }, otherKey), { typ: 'x+jwt' }), 'signature');
  });

  test("a key set's own failure (keys that could not be fetched) reaches the caller as it is", async () => {
    class Unavailable extends Error {}
    const failing: JWTVerifyGetKey = () => {
      throw new Unavailable('no keys now');
    };
    await assert.rejects(verifyReceivedJwt(await sign(), failing, policy()), Unavailable);
  });

  test('not a JWS is a format refusal', async () => {
    assert.equal(await outcome('a.b.c'), 'format');
    assert.equal(await outcome('not a jwt'), 'format');
  });
});
