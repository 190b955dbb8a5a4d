/**
 * A resource server's own access token lifetime (SPEC §2, issue 20): every grant that issues
 * an access token for it — code exchange, refresh, device code, client_credentials — answers
 * `expires_in` with that lifetime and stores that expiry, so the token stops working there
 * (introspection, the service's own API) when it has passed; the others keep the default.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as oauth from 'oauth4webapi';
import { COMMAND_LINE } from '../../src/audit.ts';
import { changeTokenSettings, findResourceNamed } from '../../src/clients/resources.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { answerAtDevicePage, deviceApp, poll, requestCodes } from '../support/device.ts';
import { clientCredentialsTokens, discover, insecure, obtainTokens, profile, refresh, type App } from '../support/oauth-client.ts';
import { registerResourceServer, type ResourceServer } from '../support/resources.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';

const FILES = 'https://files.example/mcp';
const LIFETIME = 120;

for (const backend of BACKENDS) {
  describe(`a resource server's access token lifetime (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let files: ResourceServer;
    let app: App;

    before(async () => {
      server = await startServer(backend);
      await server.createUser('alice');
      files = await registerResourceServer(server, FILES, [{ name: 'files:read', description: 'Read your files' }]);
      const resource = (await findResourceNamed(server.app.gatehouse, FILES))!;
      await changeTokenSettings(server.app.gatehouse, resource, { accessTokenTtl: String(LIFETIME) }, COMMAND_LINE);
      const { client } = await server.createClient({ name: 'Files app', scope: 'annotation:read files:read' });
      app = await discover(server, client.id);
    });
    after(() => server?.close());

    const introspect = async (token: string) =>
      oauth.processIntrospectionResponse(
        files.introspector.as,
        files.introspector.client,
        await oauth.introspectionRequest(files.introspector.as, files.introspector.client, files.introspector.auth, token, insecure),
      );

    /** Live at introspection until LIFETIME seconds have passed, with that `exp`, and not after. */
    async function livesForLifetime(token: string): Promise<void> {
      const info = await introspect(token);
      assert.equal(info.active, true);
      assert.equal(info.exp! - info.iat!, LIFETIME, 'the stored expiry is the lifetime');
      server.advance(LIFETIME - 2);
      assert.equal((await introspect(token)).active, true, 'still live just before');
      server.advance(3);
      assert.equal((await introspect(token)).active, false, 'expired after the lifetime');
    }

    test('code exchange and refresh: expires_in is the resource server’s lifetime, and the token dies with it', async () => {
      const tokens = await obtainTokens(app, new UserAgent(server.url), 'alice', { resource: FILES });
      assert.equal(tokens.expires_in, LIFETIME);
      const refreshed = await refresh(app, tokens.refresh_token!);
      assert.equal(refreshed.expires_in, LIFETIME);
      await livesForLifetime(refreshed.access_token);
      const again = await refresh(app, refreshed.refresh_token!);
      assert.equal(again.expires_in, LIFETIME, 'the refresh token outlives the access tokens');
    });

    test('the built-in resource keeps ACCESS_TOKEN_TTL', async () => {
      const tokens = await obtainTokens(app, new UserAgent(server.url), 'alice');
      assert.equal(tokens.expires_in, server.config.accessTokenTtl);
    });

    test('client_credentials', async () => {
      const { tokens: granted } = await clientCredentialsTokens(server, 'files:read', FILES);
      assert.equal(granted.expires_in, LIFETIME);
      await livesForLifetime(granted.access_token);
    });

    test('device code', async () => {
      const device = await deviceApp(server, { scope: 'files:read' });
      const codes = await requestCodes(device, { resource: FILES });
      const agent = new UserAgent(server.url);
      await agent.login('alice');
      await answerAtDevicePage(agent, codes, 'approve');
      server.advance(codes.interval ?? 5); // RFC 8628 §3.5: no sooner than the interval
      const result = await poll(device, codes.device_code);
      assert.equal(result.status, 200, JSON.stringify(result.body));
      assert.equal((result.body as { expires_in?: number }).expires_in, LIFETIME);
      await livesForLifetime(result.body.access_token as string);
    });

    test("the built-in resource's own lifetime holds at its API too", async () => {
      const builtin = (await findResourceNamed(server.app.gatehouse, server.url))!;
      await changeTokenSettings(server.app.gatehouse, builtin, { accessTokenTtl: String(LIFETIME) }, COMMAND_LINE);
      try {
        const tokens = await obtainTokens(app, new UserAgent(server.url), 'alice');
        assert.equal(tokens.expires_in, LIFETIME);
        assert.equal((await profile(server, tokens.access_token)).status, 200);
        server.advance(LIFETIME + 1);
        assert.equal((await profile(server, tokens.access_token)).status, 401);
      } finally {
        await changeTokenSettings(server.app.gatehouse, builtin, { accessTokenTtl: 'default' }, COMMAND_LINE);
      }
    });
  });
}
