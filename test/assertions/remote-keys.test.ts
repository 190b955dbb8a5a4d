/**
 * Others' key sets (src/oauth/assertions/remote-keys.ts), against a real https server with
 * a certificate from the test CA: discovery of `jwks_uri` (OpenID Connect's document first,
 * RFC 8414's next, the `issuer` checked), `Cache-Control` bounded to 5 min–24 h, and the
 * once-a-minute refetch on an unknown `kid`. The clock is injected, so no test waits.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { SignJWT, errors, jwtVerify } from 'jose';
import { RemoteKeys, RemoteKeysUnavailable } from '../../src/oauth/assertions/remote-keys.ts';
import { signingKey, startJwksServer, type JwksServer, type SigningKey } from '../support/jwks-server.ts';

describe('remote key sets', () => {
  let server: JwksServer;
  let key: SigningKey;
  let clock = Date.now();
  const keys = () => new RemoteKeys({ now: () => clock, allowPrivateAddresses: true });
  const sign = (by: SigningKey) =>
    new SignJWT({ sub: 'x' })
      .setProtectedHeader({ alg: by.alg, kid: by.kid })

      .sign(by.privateKey);

  before(async () => {
    server = await startJwksServer();
    key = await signingKey('ES256', 'k1');
  });
  after(() => server?.close());

  test('discovery reads openid-configuration, else oauth-authorization-server (path inserted), and checks the issuer', async () => {
    server.publish('discovered', [key]);
    server.serve('/tenant-a/.well-known/openid-configuration', { issuer: `${server.origin}/tenant-a`, jwks_uri: server.url('discovered') });
    server.serve('/.well-known/oauth-authorization-server/tenant-b', { issuer: `${server.origin}/tenant-b`, jwks_uri: server.url('discovered') });
    server.serve('/tenant-c/.well-known/openid-configuration', { issuer: 'https://impostor.example', jwks_uri: server.url('discovered') });
    const remote = keys();
    for (const tenant of ['tenant-a', 'tenant-b']) {
      const set = await remote.issuerKeySet(`${server.origin}/${tenant}`, null);
      assert.equal(set.url, server.url('discovered'));
      await jwtVerify(await sign(key), set.getKey, { algorithms: ['ES256'] });
    }
    await assert.rejects(remote.issuerKeySet(`${server.origin}/tenant-c`, null), (error: Error) => {
      assert.ok(error instanceof RemoteKeysUnavailable);
      assert.match(error.reason, /its issuer is not/);
      return true;
    });
    // Cached: a second look-up fetches no document.
    const before = server.requests('/tenant-a/.well-known/openid-configuration');
    await remote.issuerKeySet(`${server.origin}/tenant-a`, null);
    assert.equal(server.requests('/tenant-a/.well-known/openid-configuration'), before);
    // Private addresses need the caller's permission (or the development setting).
    const strict = new RemoteKeys({ now: () => clock, allowPrivateAddresses: false });
    await assert.rejects(jwtVerify(await sign(key), strict.keySet(server.url('discovered')).getKey), /not a public address/);
    await jwtVerify(await sign(key), strict.keySet(server.url('discovered'), { allowPrivateAddress: true }).getKey);
  });

  test('Cache-Control max-age is bounded to 5 minutes and 24 hours', async () => {
    server.publish('short', [key], 'max-age=1');
    server.publish('long', [key], 'max-age=31536000');
    const remote = keys();
    for (const name of ['short', 'long']) await jwtVerify(await sign(key), remote.keySet(server.url(name)).getKey);
    clock += 299_000; // max-age=1 still counts as 5 minutes
    for (const name of ['short', 'long']) await jwtVerify(await sign(key), remote.keySet(server.url(name)).getKey);
    assert.deepEqual([server.requests('/jwks/short'), server.requests('/jwks/long')], [1, 1]);
    clock += 2000;
    await jwtVerify(await sign(key), remote.keySet(server.url('short')).getKey);
    assert.equal(server.requests('/jwks/short'), 2);
    clock += 24 * 3600 * 1000; // a year's max-age counts as 24 hours
    await jwtVerify(await sign(key), remote.keySet(server.url('long')).getKey);
    assert.equal(server.requests('/jwks/long'), 2);
  });

  test('an unknown kid refetches at most once a minute', async () => {
    const rotated = await signingKey('ES256', 'k2');
    server.publish('rotation', [key]);
    const remote = keys();
    const set = remote.keySet(server.url('rotation'));
    await jwtVerify(await sign(key), set.getKey);
    server.publish('rotation', [key, rotated]);
    await assert.rejects(jwtVerify(await sign(rotated), set.getKey), errors.JWKSNoMatchingKey);
    assert.equal(server.requests('/jwks/rotation'), 1);
    clock += 60_000;
    await Promise.all(Array.from({ length: 10 }, async () => jwtVerify(await sign(rotated), set.getKey)));
    assert.equal(server.requests('/jwks/rotation'), 2);
  });
});
