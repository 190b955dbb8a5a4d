/**
 * Token introspection (RFC 7662) as a resource server uses it: authenticated as a
 * confidential client, through oauth4webapi, against the published metadata.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as oauth from 'oauth4webapi';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { discover, insecure, obtainTokens, postForm, refresh, revokeToken, type App } from '../support/oauth-client.ts';
import { assertNoStore, assertOAuthError } from '../support/responses.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';

for (const backend of BACKENDS) {
  describe(`token introspection (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let app: App;
    /** The resource server: a confidential client of its own. */
    let resourceServer: App;
    let resourceSecret: string;

    before(async () => {
      server = await startServer(backend);
      await server.createUser('alice');
      const { client } = await server.createClient({ name: 'Annotator' });
      app = await discover(server, client.id);
      const registered = await server.createClient({ name: 'Annotation API', grantType: 'client_credentials', redirectUris: [], confidential: true });
      resourceSecret = registered.secret!;
      resourceServer = await discover(server, registered.client.id, { secret: resourceSecret });
    });
    after(() => server?.close());

    const introspect = async (token: string, auth = resourceServer.auth, caller = resourceServer) =>
      oauth.processIntrospectionResponse(caller.as, caller.client, await oauth.introspectionRequest(caller.as, caller.client, auth, token, insecure));

    test('the metadata advertises the endpoint and its authentication methods', () => {
      assert.equal(resourceServer.as.introspection_endpoint, `${server.url}/oauth/introspect`);
      assert.deepEqual(resourceServer.as.introspection_endpoint_auth_methods_supported, ['client_secret_basic', 'client_secret_post', 'private_key_jwt']);
    });

    test('a live access token is described: user, client, scopes, times, and how the person logged in', async () => {
      const before = Math.floor(Date.now() / 1000);
      const tokens = await obtainTokens(app, new UserAgent(server.url));
      const info = await introspect(tokens.access_token);
      assert.deepEqual(
        { ...info, exp: undefined, iat: undefined, auth_time: undefined },
        {
          active: true,
          scope: 'annotation:read annotation:write',
          client_id: app.client.client_id,
          username: 'alice',
          sub: `acct:alice@127.0.0.1`,
          token_type: 'Bearer',
          iss: server.url,
          aud: server.url,
          exp: undefined,
          iat: undefined,
          auth_time: undefined,
          amr: ['pwd'],
        },
      );
      assert.ok(info.iat! >= before && info.iat! <= Math.ceil(Date.now() / 1000));
      assert.equal(info.exp! - info.iat!, 3600);
      assert.ok((info.auth_time as number) >= before && (info.auth_time as number) <= info.iat!, 'the login, just before the code');
    });

    test('a live refresh token is described to its own client; once rotated, revoked or expired, nothing is', async () => {
      const registered = await server.createClient({ name: 'Server-side app', confidential: true });
      const webApp = await discover(server, registered.client.id, { secret: registered.secret! });
      const own = (token: string) => introspect(token, webApp.auth, webApp);
      const tokens = await obtainTokens(webApp, new UserAgent(server.url));
      const info = await own(tokens.refresh_token!);
      assert.equal(info.active, true);
      assert.equal(info.token_type, 'refresh_token');
      assert.equal(info.username, 'alice');
      assert.deepEqual(await introspect(tokens.refresh_token!), { active: false }, 'another client learns nothing of it');

      const rotated = await refresh(webApp, tokens.refresh_token!);
      assert.deepEqual(await own(tokens.refresh_token!), { active: false });
      assert.equal((await own(rotated.refresh_token!)).active, true);

      await revokeToken(webApp, rotated.access_token);
      for (const token of [tokens.access_token, rotated.access_token, rotated.refresh_token!]) {
        assert.deepEqual(await own(token), { active: false });
      }
    });

    test('an expired access token is inactive', async () => {
      const tokens = await obtainTokens(app, new UserAgent(server.url));
      server.advance(3601);
      try {
        assert.deepEqual(await introspect(tokens.access_token), { active: false });
        assert.ok((await refresh(app, tokens.refresh_token!)).access_token, 'the refresh token lives on');
      } finally {
        server.advance(-3601);
      }
    });

    test('unknown, malformed and foreign-looking tokens are just inactive', async () => {
      for (const token of ['gat_' + 'A'.repeat(43), 'grt_nope', 'not a token', "' or 1=1 --", '<script>', 'x'.repeat(5000)]) {
        assert.deepEqual(await introspect(token), { active: false }, token.slice(0, 20));
      }
    });

    test('a client_credentials token names its client as the subject, and no user', async () => {
      const response = await oauth.clientCredentialsGrantRequest(
        resourceServer.as,
        resourceServer.client,
        resourceServer.auth,
        new URLSearchParams(),
        insecure,
      );
      const tokens = await oauth.processClientCredentialsResponse(resourceServer.as, resourceServer.client, response);
      const info = await introspect(tokens.access_token);
      assert.equal(info.active, true);
      assert.equal(info.sub, resourceServer.client.client_id);
      assert.equal(info.username, undefined);
      assert.equal(info.auth_time, undefined, 'nobody logged in');
      assert.equal(info.amr, undefined);
    });

    test('client_secret_post works as well as HTTP Basic', async () => {
      const tokens = await obtainTokens(app, new UserAgent(server.url));
      const info = await introspect(tokens.access_token, oauth.ClientSecretPost(resourceSecret));
      assert.equal(info.active, true);
    });

    test('only confidential clients may ask: 401 invalid_client with a Basic challenge otherwise', async () => {
      const tokens = await obtainTokens(app, new UserAgent(server.url));
      const anonymous = await postForm(server, '/oauth/introspect', { token: tokens.access_token });
      assert.match(anonymous.headers.get('www-authenticate') ?? '', /^Basic /);
      await assertOAuthError(anonymous, 401, 'invalid_client', 'authenticate as a confidential client to introspect tokens');

      const publicClient = await postForm(server, '/oauth/introspect', { token: tokens.access_token, client_id: app.client.client_id });
      await assertOAuthError(publicClient, 401, 'invalid_client', 'only confidential clients may introspect tokens');

      const wrongSecret = await oauth.introspectionRequest(
        resourceServer.as,
        resourceServer.client,
        oauth.ClientSecretBasic('gcs_wrong'),
        tokens.access_token,
        insecure,
      );
      assert.match(wrongSecret.headers.get('www-authenticate') ?? '', /^Basic /);
      await assertOAuthError(wrongSecret, 401, 'invalid_client', 'client authentication failed');
    });

    test('answers are never cached, and a missing token is invalid_request', async () => {
      const basic = { authorization: `Basic ${Buffer.from(`${resourceServer.client.client_id}:${resourceSecret}`).toString('base64')}` };
      const inactive = await postForm(server, '/oauth/introspect', { token: 'nothing' }, basic);
      assert.equal(inactive.status, 200);
      assertNoStore(inactive);
      assert.deepEqual(await inactive.json(), { active: false });
      await assertOAuthError(await postForm(server, '/oauth/introspect', {}, basic), 400, 'invalid_request', "the 'token' parameter is missing");
      const get = await fetch(`${server.url}/oauth/introspect`);
      assert.equal(get.status, 405);
      assert.equal(get.headers.get('allow'), 'POST');
    });

    test('browser-based resource servers may call it from other origins', async () => {
      const preflight = await fetch(`${server.url}/oauth/introspect`, {
        method: 'OPTIONS',
        headers: { origin: 'https://rs.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization' },
      });
      assert.equal(preflight.status, 204);
      assert.equal(preflight.headers.get('access-control-allow-origin'), '*');
    });
  });
}
