/**
 * Back-channel logout with two instances on one PostgreSQL database (SPEC §4.10): each
 * session end is delivered exactly once, though both instances look for due deliveries and
 * the session is ended at both at the same moment.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { decodeJwt } from 'jose';
import * as oauth from 'oauth4webapi';
import { postgres } from '../support/backends.ts';
import { openIdLogin, startReceiver, type Receiver } from '../support/backchannel.ts';
import { until } from '../support/waits.ts';
import { startCluster, type Cluster } from '../support/instances.ts';
import { insecure, type App } from '../support/oauth-client.ts';
import { formFields, UserAgent } from '../support/user-agent.ts';

const SESSIONS = 5;

describe('back-channel logout with two instances', postgres.unavailable ? { skip: `needs PostgreSQL: ${postgres.unavailable}` } : {}, () => {
  let cluster: Cluster;
  let receiver: Receiver;
  let app: App;

  before(async () => {
    receiver = await startReceiver();
    cluster = await startCluster(2);
    await cluster.createUser('alice');
    const { client } = await cluster.createClient({ backchannelLogoutUri: receiver.url });
    const issuer = new URL(cluster.publicUrl);
    const as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }));
    app = { as, client: { client_id: client.id }, auth: oauth.None(), redirectUri: 'http://127.0.0.1:8765/callback' };
  });
  after(async () => {
    receiver?.close();
    await cluster?.close();
  });

  test('a session ended at both instances at once is delivered once, by one of them', async () => {
    const [a, b] = cluster.instances;
    const sids: string[] = [];
    const logouts: Promise<Response>[] = [];
    for (let i = 0; i < SESSIONS; i++) {
      const atA = new UserAgent(a!.url);
      sids.push((await openIdLogin(app, atA, 'alice')).sid);
      const form = formFields((await atA.visit('/')).html, '/logout');
      // The same browser's cookies (session, CSRF secret), sent to the other instance.
      const atB = new UserAgent(b!.url);
      for (const [name, value] of atA.cookies) atB.cookies.set(name, value);
      for (const agent of [atA, atB])
        logouts.push(agent.fetch('/logout', { method: 'POST', body: new URLSearchParams(form), signal: AbortSignal.timeout(30_000) }));
    }
    const answered = await Promise.all(logouts).catch((error: Error) => {
      throw new Error(`a logout was not answered within 30 seconds (${error.message})`);
    });
    for (const response of answered) assert.equal(response.status, 303);

    await until('every session is delivered', () => new Set(receiver.tokens.map((token) => decodeJwt(token).sid)).size === SESSIONS);
    // Both instances look for due deliveries every 2 seconds: give them several turns to deliver a second time.
    await sleep(6000);
    assert.deepEqual(receiver.tokens.map((token) => decodeJwt(token).sid).sort(), [...sids].sort(), 'one logout token per session');
    const audited = await cluster.store.db.selectFrom('audit_events').select('detail').where('type', '=', 'backchannel_logout_delivered').execute();
    assert.equal(audited.length, SESSIONS);
    const rows = await cluster.store.db.selectFrom('backchannel_logouts').select(['state', 'attempts']).execute();
    assert.deepEqual(
      rows,
      sids.map(() => ({ state: 'delivered', attempts: 1 })),
    );
  });
});
