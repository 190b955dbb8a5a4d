/**
 * Several instances on one PostgreSQL database (SPEC §1): every behaviour holds across
 * them. Revocation fan-out is tested through both engines: Redis pub/sub (REDIS_URL set)
 * and PostgreSQL LISTEN/NOTIFY (no REDIS_URL).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as oauth from 'oauth4webapi';
import { postgres } from '../support/backends.ts';
import { startCluster, type Cluster } from '../support/instances.ts';
import { authorizationUrl, insecure, type App } from '../support/oauth-client.ts';
import { UserAgent } from '../support/user-agent.ts';
import { connect, timeToClose } from '../support/ws-client.ts';

const redisUrl = process.env.GATEHOUSE_TEST_REDIS;
const unavailable = postgres.unavailable ?? (redisUrl ? undefined : process.env.GATEHOUSE_TEST_REDIS_MISSING);

/** The application, talking to whichever instance the load balancer picked. */
async function appAt(cluster: Cluster, clientId: string, instance: number): Promise<App> {
  const issuer = new URL(cluster.publicUrl);
  const as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }));
  const base = cluster.instances[instance]!.url;
  return {
    as: { ...as, token_endpoint: `${base}/api/token`, revocation_endpoint: `${base}/oauth/revoke` },
    client: { client_id: clientId },
    auth: oauth.None(),
    redirectUri: 'http://127.0.0.1:8765/callback',
  };
}

async function codeFrom(cluster: Cluster, app: App, instance: number, username: string) {
  const authorization = await authorizationUrl(app);
  const outcome = await new UserAgent(cluster.instances[instance]!.url).authorize(authorization.url.pathname + authorization.url.search, { username });
  return { callback: oauth.validateAuthResponse(app.as, app.client, outcome.redirect!, authorization.state), verifier: authorization.verifier };
}

async function exchange(app: App, code: Awaited<ReturnType<typeof codeFrom>>) {
  const response = await oauth.authorizationCodeGrantRequest(app.as, app.client, app.auth, code.callback, app.redirectUri, code.verifier, insecure);
  return oauth.processAuthorizationCodeResponse(app.as, app.client, response);
}

const profileStatus = async (cluster: Cluster, instance: number, token: string) =>
  (await fetch(`${cluster.instances[instance]!.url}/api/profile`, { headers: { authorization: `Bearer ${token}` } })).status;

for (const fanOut of ['redis', 'postgres'] as const) {
  describe(`three instances on one database, fan-out through ${fanOut}`, unavailable ? { skip: `needs PostgreSQL and Redis: ${unavailable}` } : {}, () => {
    let cluster: Cluster;
    let clientId: string;

    before(async () => {
      cluster = await startCluster(3, { REFRESH_GRACE_SECONDS: '0', ...(fanOut === 'redis' ? { REDIS_URL: redisUrl! } : {}) });
      await cluster.createUser('alice');
      await cluster.createUser('root', { admin: true });
      clientId = (await cluster.createClient()).client.id;
    });
    after(() => cluster?.close());

    test('a code issued by A is exchanged at B', async () => {
      const code = await codeFrom(cluster, await appAt(cluster, clientId, 0), 0, 'alice');
      const tokens = await exchange(await appAt(cluster, clientId, 1), code);
      assert.equal(await profileStatus(cluster, 2, tokens.access_token), 200);
    });

    test('a refresh at B replayed at C is detected and revokes the grant everywhere', async () => {
      const tokens = await exchange(await appAt(cluster, clientId, 1), await codeFrom(cluster, await appAt(cluster, clientId, 0), 0, 'alice'));
      const atB = await appAt(cluster, clientId, 1);
      const refreshed = await oauth.processRefreshTokenResponse(
        atB.as,
        atB.client,
        await oauth.refreshTokenGrantRequest(atB.as, atB.client, atB.auth, tokens.refresh_token!, insecure),
      );
      const atC = await appAt(cluster, clientId, 2);
      const replay = await oauth.refreshTokenGrantRequest(atC.as, atC.client, atC.auth, tokens.refresh_token!, insecure);
      assert.equal(replay.status, 400);
      assert.equal(((await replay.json()) as { error: string }).error, 'invalid_grant');
      for (const instance of [0, 1, 2]) assert.equal(await profileStatus(cluster, instance, refreshed.access_token), 401);
    });

    test('a revocation at A closes the socket held on B within a second, and B rejects the token', async () => {
      const tokens = await exchange(await appAt(cluster, clientId, 0), await codeFrom(cluster, await appAt(cluster, clientId, 0), 0, 'alice'));
      const socket = await connect(cluster.instances[1]!.url, tokens.access_token);
      assert.equal((await socket.ask({ type: 'whoami', id: 1 })).ok, true);
      const atA = await appAt(cluster, clientId, 0);
      await oauth.processRevocationResponse(await oauth.revocationRequest(atA.as, atA.client, atA.auth, tokens.access_token, insecure));
      const { code, ms } = await timeToClose(socket, 1000);
      assert.equal(code, 4001);
      assert.ok(ms < 1000, `closed after ${Math.round(ms)} ms`);
      assert.equal(await profileStatus(cluster, 1, tokens.access_token), 401);
    });

    test('a secret replaced by an administrator at A: the old one is refused at once at A and at B, the new one works at every instance', async () => {
      const { client, secret } = await cluster.createClient({ confidential: true });
      const introspect = async (instance: number, presented: string) =>
        (
          await fetch(`${cluster.instances[instance]!.url}/oauth/introspect`, {
            method: 'POST',
            headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: `Basic ${btoa(`${client.id}:${presented}`)}` },
            body: new URLSearchParams({ token: 'gat_unknown' }),
          })
        ).status;
      const admin = new UserAgent(cluster.instances[0]!.url);
      await admin.login('root');
      const page = await admin.visit(`/admin/oauthclients/${client.id}`);
      // B has read the client just now; a presented secret is checked against the stored row,
      // not a copy (src/oauth/client-auth.ts), so the old one is refused at once.
      assert.equal(await introspect(1, secret!), 200);
      assert.equal(await introspect(0, secret!), 200);
      const rotated = await admin.submit(page.html, `/admin/oauthclients/${client.id}/secret`);
      const replacement = /id="client-secret">([^<]+)</.exec(rotated.html)?.[1];
      assert.ok(replacement, 'no new secret shown');
      assert.equal(await introspect(0, secret!), 401);
      assert.equal(await introspect(1, secret!), 401);
      assert.equal(await introspect(1, replacement), 200);
      assert.equal(await introspect(2, replacement), 200);
    });
  });
}

describe('throttling is shared by all instances through Redis', unavailable ? { skip: `needs PostgreSQL and Redis: ${unavailable}` } : {}, () => {
  let cluster: Cluster;
  before(async () => {
    cluster = await startCluster(3, { REDIS_URL: redisUrl!, LOGIN_FAILURES_PER_ACCOUNT: '3', TOKEN_REQUESTS_PER_CLIENT: '5' });
  });
  after(() => cluster?.close());

  test('login failures for one account, spread over A, B and C, lock it on all of them', async () => {
    const username = `mallory-${Date.now()}`;
    await cluster.createUser(username);
    const attempt = async (instance: number) => {
      const agent = new UserAgent(cluster.instances[instance]!.url);
      return (await agent.login(username, 'wrong password!')).response;
    };
    for (const instance of [0, 1, 2]) assert.equal((await attempt(instance)).status, 401);
    const locked = await attempt(1);
    assert.equal(locked.status, 429);
    assert.ok(Number(locked.headers.get('retry-after')) > 0);
  });

  test('token requests of one client are counted across instances', async () => {
    // Authenticated: only requests that prove they come from a client spend its budget.
    const { client, secret } = await cluster.createClient({ confidential: true });
    const statuses: number[] = [];
    for (let i = 0; i < 7; i++) {
      const response = await fetch(`${cluster.instances[i % 3]!.url}/api/token`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: `Basic ${btoa(`${client.id}:${secret}`)}` },
        body: new URLSearchParams({ grant_type: 'authorization_code', code: 'gac_unknown' }),
      });
      statuses.push(response.status);
    }
    assert.deepEqual(statuses, [400, 400, 400, 400, 400, 429, 429]);
  });
});
