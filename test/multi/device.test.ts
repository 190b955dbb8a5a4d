/**
 * The device authorization grant across instances on one PostgreSQL database (SPEC §1,
 * §4.7): the device talks to one instance, the person approves on another, and the polling
 * state (the interval, `slow_down`) is the database's, so it holds whichever instance a
 * poll reaches. Real time here: the instances are separate processes with their own clocks.
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';
import * as oauth from 'oauth4webapi';
import { DEVICE_CODE_GRANT_TYPE } from '../../src/oauth/grants/types.ts';
import { backendOptions, postgres } from '../support/backends.ts';
import { answerAtDevicePage, assertPollError, pollRequest, requestCodes } from '../support/device.ts';
import { startCluster, type Cluster } from '../support/instances.ts';
import { insecure, type App } from '../support/oauth-client.ts';
import { UserAgent } from '../support/user-agent.ts';

describe('device authorization grant across instances (postgres)', backendOptions(postgres), () => {
  let cluster: Cluster;

  before(async () => {
    cluster = await startCluster(2);
    await cluster.createUser('alice');
  });
  after(() => cluster?.close());

  test('requested and polled at one instance, approved at the other; slow_down is tracked across them', async () => {
    const { client } = await cluster.createClient({ name: 'Kitchen TV', grantType: DEVICE_CODE_GRANT_TYPE, redirectUris: [] });
    const issuer = new URL(cluster.publicUrl);
    const as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }));
    const at = (instance: number): App => {
      const base = cluster.instances[instance]!.url;
      return {
        as: { ...as, token_endpoint: `${base}/api/token`, device_authorization_endpoint: `${base}/oauth/device_authorization` },
        client: { client_id: client.id },
        auth: oauth.None(),
        redirectUri: '',
      };
    };
    const codes = await requestCodes(at(1));
    await sleep(5100);
    await assertPollError(at(1), codes.device_code, 'authorization_pending');
    // The other instance knows that poll was just now: too soon.
    await assertPollError(at(0), codes.device_code, 'slow_down');

    const agent = new UserAgent(cluster.instances[0]!.url);
    await agent.login('alice');
    await answerAtDevicePage(agent, codes, 'approve');

    await sleep(10_100); // the interval is 10 s since the slow_down
    const tokens = await oauth.processDeviceCodeResponse(as, { client_id: client.id }, await pollRequest(at(1), codes.device_code));
    assert.match(tokens.access_token, /^gat_/);
    const me = await fetch(`${cluster.instances[0]!.url}/api/profile`, { headers: { authorization: `Bearer ${tokens.access_token}` } });
    assert.equal(me.status, 200);
  });
});
