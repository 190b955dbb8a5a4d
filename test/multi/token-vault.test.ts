/**
 * SPEC §4.15, the provider's token across instances: two Gatehouse instances on one PostgreSQL
 * database keep one person's provider tokens, and both are asked for them at once when they
 * have expired. The provider — a second Gatehouse behind https — rotates refresh tokens with no
 * grace window, so a second refresh with the same refresh token is taken for theft and revokes
 * the person's tokens there. Exactly one instance refreshes (it holds the identity's lease); the
 * other waits for what it keeps, and both hand out the same, working token.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { slugOf } from '../../src/accounts/connections/connections.ts';
import { ACCESS_TOKEN_URN, TOKEN_EXCHANGE_GRANT_TYPE } from '../../src/oauth/grants/types.ts';
import { backendOptions, postgres, sqlite } from '../support/backends.ts';
import { discover, obtainTokens, postForm, profile } from '../support/oauth-client.ts';
import { databaseUrl } from '../support/processes.ts';
import { registerResourceServer, type ResourceServer } from '../support/resources.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { testCaProblem } from '../support/tls.ts';
import { startTlsProxy } from '../support/upstream-providers.ts';
import { UserAgent } from '../support/user-agent.ts';
import { keepTokensOfGatehouse } from '../support/upstream-login.ts';

const MCP = 'https://mcp.example/github-tools';
const KEYS_SECRET = 'vault-test-keys-secret-0123456789abcdef';

describe("the provider's token at two instances at once", { ...backendOptions(postgres), ...(testCaProblem() ? { skip: testCaProblem()! } : {}) }, () => {
  let proxy: Awaited<ReturnType<typeof startTlsProxy>>;
  let upstream: TestServer;
  let a: TestServer;
  let b: TestServer;
  let mcp: ResourceServer;
  const id = slugOf('Head office');

  before(async () => {
    proxy = await startTlsProxy();
    // Its access tokens live 40 seconds, 10 more than the 30 s within which Gatehouse refreshes ahead: the
    // login's is made stale by moving the instances' clocks on, and the refreshed one is then current, so
    // that an ask arriving after the refresh (a loaded machine's stall) takes it rather than refreshing
    // again. Its refresh tokens have no grace.
    upstream = await startServer(sqlite, { PUBLIC_URL: proxy.origin, ACCESS_TOKEN_TTL: '40', REFRESH_GRACE_SECONDS: '0' });
    proxy.target(Number(new URL(upstream.url).port));
    a = await startServer(postgres, { KEYS_SECRET });
    b = await startServer(postgres, { DATABASE_URL: databaseUrl(a.config), PUBLIC_URL: a.url, KEYS_SECRET });
    await upstream.createUser('ursula');
    mcp = await registerResourceServer(a, MCP, [{ name: 'tools:use', description: 'Use the tools' }], 'GitHub tools (MCP)');
    await keepTokensOfGatehouse(a, upstream, proxy.origin, [MCP]);
  });
  after(async () => {
    await b?.close();
    await a?.close();
    await upstream?.close();
    await proxy?.close();
  });

  test('one refresh at the provider, both instances answer with its token, and it works there', async () => {
    const person = new UserAgent(a.url);
    const start = await person.visit(`/login/connections/${id}`);
    const approved = await new UserAgent(proxy.origin).authorize(start.redirect!, { username: 'ursula' });
    assert.equal((await person.visit(approved.redirect!.pathname + approved.redirect!.search)).response.status, 200);
    const app = await discover(a, (await a.createClient({ name: 'MCP client', scope: 'tools:use' })).client.id);
    const subject = (await obtainTokens(app, person, 'ursula', { scope: 'tools:use', resource: MCP })).access_token;
    // The login's provider token now has less than 30 s left at both instances.
    a.advance(15);
    b.advance(15);

    const ask = (server: TestServer) =>
      postForm(server, '/api/token', {
        grant_type: TOKEN_EXCHANGE_GRANT_TYPE,
        client_id: mcp.introspector.client.client_id,
        client_secret: mcp.secret,
        audience: id,
        subject_token: subject,
        subject_token_type: ACCESS_TOKEN_URN,
      });
    const answers = await Promise.all([ask(a), ask(b), ask(a), ask(b)]);
    const bodies = (await Promise.all(answers.map((answer) => answer.json()))) as Array<{ access_token?: string; error?: string }>;
    assert.deepEqual(
      answers.map((answer) => answer.status),
      [200, 200, 200, 200],
      JSON.stringify(bodies.map((body) => body.error)),
    );
    assert.equal(new Set(bodies.map((body) => body.access_token)).size, 1, 'the same token from both instances');
    const refreshes = await upstream.store.db
      .selectFrom('audit_events')
      .select('type')
      .where('type', 'in', ['token_refreshed', 'refresh_reuse_detected'])
      .execute();
    assert.deepEqual(
      refreshes.map((row) => row.type),
      ['token_refreshed'],
      'one refresh, no reuse',
    );
    assert.equal((await profile(upstream, bodies[0]!.access_token!)).status, 200);
  });
});
