import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as oauth from 'oauth4webapi';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { authorizationUrl, discover, insecure, obtainTokens, profile, refresh, revokeToken, type App } from '../support/oauth-client.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';

for (const backend of BACKENDS) {
  describe(`the authorization code flow (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let app: App;

    before(async () => {
      server = await startServer(backend);
      await server.createUser('alice');
      const { client } = await server.createClient({ name: 'Annotator', requirePkce: true });
      app = await discover(server, client.id);
    });
    after(() => server?.close());

    test('authorize → login → approve → exchange → profile → refresh → revoke', async () => {
      const agent = new UserAgent(server.url);
      const tokens = await obtainTokens(app, agent);
      assert.equal(tokens.token_type, 'bearer');
      assert.match(tokens.access_token, /^gat_/);
      assert.match(tokens.refresh_token!, /^grt_/);
      assert.equal(tokens.expires_in, 3600);
      assert.equal(tokens.scope, 'annotation:read annotation:write');

      const me = await profile(server, tokens.access_token);
      assert.equal(me.status, 200);
      assert.deepEqual(await me.json(), {
        userid: `acct:alice@127.0.0.1`,
        username: 'alice',
        client_id: app.client.client_id,
        scopes: ['annotation:read', 'annotation:write'],
      });

      const refreshed = await refresh(app, tokens.refresh_token!);
      assert.notEqual(refreshed.access_token, tokens.access_token);
      assert.notEqual(refreshed.refresh_token, tokens.refresh_token);
      assert.equal((await profile(server, refreshed.access_token)).status, 200);
      // The old access token stays valid until it expires (SPEC §4.2).
      assert.equal((await profile(server, tokens.access_token)).status, 200);

      await revokeToken(app, refreshed.access_token);
      for (const token of [tokens.access_token, refreshed.access_token]) {
        const response = await profile(server, token);
        assert.equal(response.status, 401);
        assert.match(response.headers.get('www-authenticate')!, /^Bearer .*error="invalid_token"/);
      }
      const again = await oauth.refreshTokenGrantRequest(app.as, app.client, app.auth, refreshed.refresh_token!, insecure);
      assert.equal(again.status, 400);
      assert.equal(((await again.json()) as { error: string }).error, 'invalid_grant');
    });

    test('the library can call the profile with the token it got', async () => {
      const tokens = await obtainTokens(app, new UserAgent(server.url));
      const response = await oauth.protectedResourceRequest(tokens.access_token, 'GET', new URL('/api/profile', server.url), undefined, undefined, insecure);
      assert.equal(((await response.json()) as { username: string }).username, 'alice');
    });

    test('an approved application is not asked about again, unless prompt=consent', async () => {
      const agent = new UserAgent(server.url);
      await obtainTokens(app, agent);
      const again = await authorizationUrl(app);
      const outcome = await agent.visit(again.url.pathname + again.url.search);
      assert.ok(outcome.redirect, 'a remembered consent redirects straight back');
      assert.ok(outcome.redirect.searchParams.get('code'));

      const forced = await authorizationUrl(app, { prompt: 'consent' });
      const page = await agent.visit(forced.url.pathname + forced.url.search);
      assert.equal(page.response.status, 200);
      assert.match(page.html, /<button[^>]*value="approve"[^>]*>Authorize<\/button>/);
    });
  });
}
