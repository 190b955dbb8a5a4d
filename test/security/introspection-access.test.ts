/**
 * Who may learn what about a token (issue 11 item 13, SPEC §4.4): a client may introspect its
 * own tokens; access tokens of the built-in resource may be introspected by any confidential
 * client (the service's own API servers); a refresh token is described to no other client —
 * it is a credential of its client alone, and the answer for it is exactly the answer for an
 * unknown token.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as oauth from 'oauth4webapi';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { discover, insecure, obtainTokens, type App } from '../support/oauth-client.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';

for (const backend of BACKENDS) {
  describe(`introspection answers only those entitled to know (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    /** A confidential web application, whose tokens are looked at. */
    let owner: App;
    /** Another confidential client: an API server of the service, say, or an unrelated application. */
    let other: App;

    before(async () => {
      server = await startServer(backend);
      await server.createUser('alice');
      const first = await server.createClient({ name: 'Web app', confidential: true });
      owner = await discover(server, first.client.id, { secret: first.secret! });
      const second = await server.createClient({ name: 'Another app', confidential: true });
      other = await discover(server, second.client.id, { secret: second.secret! });
    });
    after(() => server?.close());

    const introspect = async (as: App, token: string, hint?: string) =>
      oauth.processIntrospectionResponse(
        as.as,
        as.client,
        await oauth.introspectionRequest(as.as, as.client, as.auth, token, {
          ...insecure,
          ...(hint ? { additionalParameters: { token_type_hint: hint } } : {}),
        }),
      );

    test('a client learns about its own access and refresh tokens', async () => {
      const tokens = await obtainTokens(owner, new UserAgent(server.url));
      assert.equal((await introspect(owner, tokens.access_token)).active, true);
      const refresh = await introspect(owner, tokens.refresh_token!);
      assert.equal(refresh.active, true);
      assert.equal(refresh.token_type, 'refresh_token');
    });

    test('another client is told nothing about a refresh token, whatever the hint', async () => {
      const tokens = await obtainTokens(owner, new UserAgent(server.url));
      for (const hint of [undefined, 'refresh_token', 'access_token']) {
        assert.deepEqual(await introspect(other, tokens.refresh_token!, hint), { active: false }, `hint ${hint}`);
      }
      assert.equal((await introspect(owner, tokens.refresh_token!)).active, true, 'the token itself is still live');
    });

    test('any confidential client may introspect an access token of the built-in resource', async () => {
      const tokens = await obtainTokens(owner, new UserAgent(server.url));
      const info = await introspect(other, tokens.access_token);
      assert.equal(info.active, true);
      assert.equal(info.client_id, owner.client.client_id);
    });
  });
}
