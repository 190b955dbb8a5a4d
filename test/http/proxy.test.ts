/**
 * Behind a load balancer (TRUST_PROXY), throttling counts per client address taken from
 * X-Forwarded-For; without it, that header is ignored, so a client cannot choose its own
 * address to dodge the limit.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';

async function failedLogin(server: TestServer, forwardedFor: string): Promise<number> {
  const agent = new UserAgent(server.url);
  const page = await agent.visit('/login');
  const form = new URLSearchParams({ _csrf: /name="_csrf" value="([^"]+)"/.exec(page.html)![1]!, username: 'alice', password: 'not the password' });
  const response = await agent.fetch('/login', { method: 'POST', body: form, headers: { 'x-forwarded-for': forwardedFor } });
  return response.status;
}

const limits = { LOGIN_FAILURES_PER_ADDRESS: '2', LOGIN_FAILURES_PER_ACCOUNT: '0' };

for (const backend of BACKENDS) {
  describe(`client addresses behind a proxy (${backend.name})`, backendOptions(backend), () => {
    let proxied: TestServer;
    let direct: TestServer;
    before(async () => {
      proxied = await startServer(backend, { ...limits, TRUST_PROXY: '127.0.0.1' });
      direct = await startServer(backend, limits);
      await proxied.createUser('alice');
      await direct.createUser('alice');
    });
    after(async () => {
      await proxied?.close();
      await direct?.close();
    });

    test('with TRUST_PROXY, failures are counted per forwarded client address', async () => {
      assert.deepEqual([await failedLogin(proxied, '203.0.113.5'), await failedLogin(proxied, '203.0.113.5')], [401, 401]);
      assert.equal(await failedLogin(proxied, '203.0.113.5'), 429);
      assert.equal(await failedLogin(proxied, '203.0.113.6'), 401, 'another client behind the same proxy is not locked out');
    });

    test('without it, X-Forwarded-For is ignored', async () => {
      assert.deepEqual([await failedLogin(direct, '203.0.113.5'), await failedLogin(direct, '203.0.113.6')], [401, 401]);
      assert.equal(await failedLogin(direct, '203.0.113.7'), 429);
    });
  });
}
