/**
 * A client assertion is accepted once across instances (SPEC §1, §4.11): two `gatehouse
 * serve` processes on one PostgreSQL database, one private_key_jwt client, and the same
 * assertion presented 20 times at once, alternately to each instance — exactly one gets a
 * token, and a later presentation anywhere is refused.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { SignJWT } from 'jose';
import { backendOptions, postgres } from '../support/backends.ts';
import { startCluster, type Cluster } from '../support/instances.ts';
import { jwksOf, signingKey } from '../support/jwks-server.ts';

describe('private_key_jwt replay across instances (postgres)', backendOptions(postgres), () => {
  let cluster: Cluster;

  before(async () => {
    cluster = await startCluster(2);
  });
  after(() => cluster?.close());

  test('of 20 concurrent presentations of one assertion at two instances exactly one succeeds', async () => {
    const key = await signingKey('ES256', 'k1');
    const { client } = await cluster.createClient({
      name: 'Keyed job',
      grantType: 'client_credentials',
      redirectUris: [],
      confidential: true,
      jwks: JSON.stringify(jwksOf(key)),
    });
    const now = Math.floor(Date.now() / 1000);
    const assertion = await new SignJWT({ iss: client.id, sub: client.id, aud: cluster.publicUrl, jti: randomUUID(), iat: now, exp: now + 60 })
      .setProtectedHeader({ alg: 'ES256', kid: 'k1' })
      .sign(key.privateKey);
    const present = (instance: number) =>
      fetch(`${cluster.instances[instance]!.url}/api/token`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({
          grant_type: 'client_credentials',
          client_assertion_type: 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer',
          client_assertion: assertion,
        }),
      }).then(async (response) => ({ status: response.status, body: (await response.json()) as { error?: string } }));
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => present(i % 2)));
    assert.equal(results.filter((r) => r.status === 200).length, 1);
    for (const loser of results.filter((r) => r.status !== 200)) assert.deepEqual([loser.status, loser.body.error], [401, 'invalid_client']);
    for (const instance of [0, 1]) assert.equal((await present(instance)).status, 401);
  });
});
