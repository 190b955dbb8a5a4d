/**
 * Assertions accepted once across instances (SPEC §4.11): two `gatehouse serve` processes on one
 * PostgreSQL database; one publisher grant token, and one workload token, each presented 20
 * times at once, alternately at either instance: exactly one presentation gets tokens.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { SignJWT } from 'jose';
import { postgres } from '../support/backends.ts';
import { serveKeys, type KeyServer } from '../support/assertion-issuers.ts';
import { startCluster, type Cluster } from '../support/instances.ts';
import { gatehouse } from '../support/processes.ts';
import { testCaProblem } from '../support/tls.ts';
import { JWT_BEARER_GRANT_TYPE as JWT_BEARER } from '../../src/oauth/grants/types.ts';

const unavailable = postgres.unavailable ?? testCaProblem() ?? undefined;

describe('jwt-bearer assertions on two instances', unavailable ? { skip: `needs PostgreSQL and the test CA: ${unavailable}` } : {}, () => {
  let cluster: Cluster;
  let databaseUrl: string;
  let keys: KeyServer;

  before(async () => {
    cluster = await startCluster(2, {}, (url) => (databaseUrl = url));
    await cluster.createUser('alice');
    keys = await serveKeys('ES256');
  });
  after(async () => {
    keys?.close();
    await cluster?.close();
  });

  /** 20 presentations at once, alternately at either instance; the statuses. */
  async function race(assertion: string): Promise<number[]> {
    const responses = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        fetch(`${cluster.instances[i % 2]!.url}/api/token`, { method: 'POST', body: new URLSearchParams({ grant_type: JWT_BEARER, assertion }) }),
      ),
    );
    return responses.map((response) => response.status);
  }

  test('of 20 concurrent presentations of one publisher grant token at two instances exactly one gets tokens', async () => {
    const { client, secret } = await cluster.createClient({ name: 'Publisher', grantType: JWT_BEARER, redirectUris: [], confidential: true });
    const host = new URL(cluster.publicUrl).hostname;
    const now = Math.floor(Date.now() / 1000);
    const token = await new SignJWT({ iss: client.id, aud: host, sub: `acct:alice@${host}`, nbf: now, exp: now + 120, jti: crypto.randomUUID() })
      .setProtectedHeader({ alg: 'HS256' })
      .sign(new TextEncoder().encode(secret!));
    const statuses = await race(token);
    assert.equal(statuses.filter((s) => s === 200).length, 1, statuses.join(' '));
    assert.equal(statuses.filter((s) => s === 400).length, 19, statuses.join(' '));
  });

  test("of 20 concurrent presentations of one workload's token at two instances exactly one gets tokens", async () => {
    const { client } = await cluster.createClient({ name: 'Deployer', grantType: 'client_credentials', redirectUris: [], confidential: true });
    const issuer = 'https://cluster.workloads.example';
    const created = await gatehouse(
      ['issuer', 'create', '--issuer', issuer, '--profile', 'workload', '--jwks-uri', keys.jwksUri, '--allow-private-address', '--client', client.id],
      { DATABASE_URL: databaseUrl, PUBLIC_URL: cluster.publicUrl },
    );
    assert.equal(created.code, 0, created.stderr);
    const now = Math.floor(Date.now() / 1000);
    const token = await new SignJWT({
      iss: issuer,
      sub: 'system:serviceaccount:prod:deployer',
      aud: `${cluster.publicUrl}/api/token`,
      iat: now,
      exp: now + 300,
      jti: crypto.randomUUID(),
    })
      .setProtectedHeader({ alg: 'ES256', kid: keys.kid })
      .sign(keys.privateKey);
    const statuses = await race(token);
    assert.equal(statuses.filter((s) => s === 200).length, 1, statuses.join(' '));
  });
});
