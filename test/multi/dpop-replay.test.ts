/**
 * A DPoP proof is accepted once across instances (SPEC §4.14): two `gatehouse serve`
 * processes on one PostgreSQL database, one client, and the same proof presented 20 times at
 * once, alternately to each instance — exactly one gets a token, and a later presentation
 * anywhere is refused.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { generateKeyPair, generateProof } from 'dpop';
import { backendOptions, postgres } from '../support/backends.ts';
import { startCluster, type Cluster } from '../support/instances.ts';

describe('DPoP proof replay across instances (postgres)', backendOptions(postgres), () => {
  let cluster: Cluster;

  before(async () => {
    cluster = await startCluster(2);
  });
  after(() => cluster?.close());

  test('of 20 concurrent presentations of one proof at two instances exactly one gets a token', async () => {
    const { client, secret } = await cluster.createClient({ name: 'Bound job', grantType: 'client_credentials', redirectUris: [], confidential: true });
    const proof = await generateProof(await generateKeyPair('ES256'), `${cluster.publicUrl}/api/token`, 'POST');
    const present = (instance: number) =>
      fetch(`${cluster.instances[instance]!.url}/api/token`, {
        method: 'POST',
        headers: {
          'content-type': 'application/x-www-form-urlencoded',
          authorization: `Basic ${btoa(`${client.id}:${encodeURIComponent(secret!)}`)}`,
          dpop: proof,
        },
        body: new URLSearchParams({ grant_type: 'client_credentials' }),
      }).then(async (response) => ({ status: response.status, body: (await response.json()) as { error?: string; token_type?: string } }));
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => present(i % 2)));
    const granted = answers.filter((a) => a.status === 200);
    assert.equal(granted.length, 1, JSON.stringify(answers.map((a) => a.status)));
    assert.equal(granted[0]!.body.token_type, 'DPoP');
    assert.deepEqual(new Set(answers.filter((a) => a.status !== 200).map((a) => `${a.status} ${a.body.error}`)), new Set(['400 invalid_dpop_proof']));
    for (const instance of [0, 1]) assert.deepEqual([(await present(instance)).status], [400]);
  });
});
