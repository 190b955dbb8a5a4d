/**
 * Tokens bound to one audience (SPEC §3, §4.4; RFC 8707): a token for a resource server is
 * no good at the service's own API, another resource server cannot learn about it, and a
 * request cannot name a resource it has no right to — nor several at once.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as oauth from 'oauth4webapi';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { authorizationUrl, discover, insecure, obtainTokens, profile, type App } from '../support/oauth-client.ts';
import { registerResourceServer, type ResourceServer } from '../support/resources.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';
import { connect } from '../support/ws-client.ts';

const FILES = 'https://files.example/mcp';
const MAIL = 'https://mail.example/api';

for (const backend of BACKENDS) {
  describe(`audience-bound tokens (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let files: ResourceServer;
    let mail: ResourceServer;
    let app: App;
    /** Tokens for the files resource server, held by `app` for alice. */
    let filesTokens: oauth.TokenEndpointResponse;

    before(async () => {
      server = await startServer(backend);
      await server.createUser('alice');
      files = await registerResourceServer(server, FILES, [{ name: 'files:read', description: 'Read your files' }]);
      mail = await registerResourceServer(server, MAIL, [{ name: 'mail:read', description: 'Read your mail' }], 'Mail API');
      const registered = await server.createClient({ name: 'App', confidential: true, scope: 'annotation:read files:read' });
      app = await discover(server, registered.client.id, { secret: registered.secret! });
      filesTokens = await obtainTokens(app, new UserAgent(server.url), 'alice', { resource: FILES });
    });
    after(() => server?.close());

    const introspect = async (as: App, token: string) =>
      oauth.processIntrospectionResponse(as.as, as.client, await oauth.introspectionRequest(as.as, as.client, as.auth, token, insecure));

    test('/api/profile refuses a token for another resource server: 401 invalid_token', async () => {
      const response = await profile(server, filesTokens.access_token);
      assert.equal(response.status, 401);
      assert.match(response.headers.get('www-authenticate')!, /error="invalid_token"/);
    });

    test('/ws refuses a token for another resource server before the upgrade', async () => {
      await assert.rejects(connect(server.url, filesTokens.access_token), { status: 401 });
    });

    test('introspection: a resource server learns about its own tokens only; other clients learn nothing of them', async () => {
      assert.equal((await introspect(files.introspector, filesTokens.access_token)).active, true);
      assert.deepEqual(await introspect(mail.introspector, filesTokens.access_token), { active: false }, 'another resource server');
      const bystander = await server.createClient({ name: 'Bystander', grantType: 'client_credentials', redirectUris: [], confidential: true });
      const other = await discover(server, bystander.client.id, { secret: bystander.secret! });
      assert.deepEqual(await introspect(other, filesTokens.access_token), { active: false }, 'an unrelated confidential client');
      assert.equal((await introspect(app, filesTokens.access_token)).active, true, 'the client it was issued to');
      assert.deepEqual(await introspect(files.introspector, filesTokens.refresh_token!), { active: false }, 'a refresh token, even of its resource');
    });

    test('a scope of another resource server is invalid_scope, at the authorization and token endpoints', async () => {
      const agent = new UserAgent(server.url);
      await agent.login('alice');
      const { url } = await authorizationUrl(app, { resource: MAIL, scope: 'files:read' });
      assert.equal((await agent.visit(url.pathname + url.search)).redirect?.searchParams.get('error'), 'invalid_scope');
      const job = await server.createClient({ name: 'Job', grantType: 'client_credentials', redirectUris: [], confidential: true, scope: 'files:read' });
      const jobApp = await discover(server, job.client.id, { secret: job.secret! });
      const response = await oauth.clientCredentialsGrantRequest(
        jobApp.as,
        jobApp.client,
        jobApp.auth,
        new URLSearchParams({ resource: MAIL, scope: 'files:read' }),
        insecure,
      );
      assert.equal(((await response.json()) as { error: string }).error, 'invalid_scope');
    });

    test('an unknown, malformed or repeated resource is invalid_target, sent back to the client', async () => {
      const agent = new UserAgent(server.url);
      await agent.login('alice');
      for (const resource of ['https://unknown.example/', 'http://files.example/mcp', 'not a url', `${FILES}#x`]) {
        const { url, state } = await authorizationUrl(app, { resource });
        const redirect = (await agent.visit(url.pathname + url.search)).redirect;
        assert.equal(redirect?.searchParams.get('error'), 'invalid_target', resource);
        assert.equal(redirect?.searchParams.get('state'), state);
      }
      const { url } = await authorizationUrl(app, { resource: FILES });
      url.searchParams.append('resource', FILES);
      assert.equal((await agent.visit(url.pathname + url.search)).redirect?.searchParams.get('error'), 'invalid_target', 'repeated, even with the same value');
      const job = await server.createClient({ name: 'Job 2', grantType: 'client_credentials', redirectUris: [], confidential: true, scope: 'files:read' });
      const jobApp = await discover(server, job.client.id, { secret: job.secret! });
      const repeated = await oauth.clientCredentialsGrantRequest(
        jobApp.as,
        jobApp.client,
        jobApp.auth,
        new URLSearchParams([
          ['resource', FILES],
          ['resource', MAIL],
        ]),
        insecure,
      );
      assert.deepEqual([repeated.status, ((await repeated.json()) as { error: string }).error], [400, 'invalid_target']);
    });
  });
}
