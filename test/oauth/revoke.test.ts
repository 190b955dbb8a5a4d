/**
 * SPEC §4.3, `POST /oauth/revoke` (RFC 7009): unknown tokens succeed quietly, revoking any
 * token of a grant ends the whole grant but not the user's consent, and a client may only
 * revoke its own tokens. Revocation goes through oauth4webapi; whether a token still works
 * is checked the way its holder would find out (the profile, a refresh).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as oauth from 'oauth4webapi';
import { purgeExpired } from '../../src/store/purge.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { authorizationUrl, discover, insecure, obtainTokens, postForm, profile, type App } from '../support/oauth-client.ts';
import { assertNoSecretsLogged, assertNoStore, assertOAuthError } from '../support/responses.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';

type Tokens = oauth.TokenEndpointResponse;
type TokenKind = 'access_token' | 'refresh_token';

for (const backend of BACKENDS) {
  describe(`POST /oauth/revoke (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let agent: UserAgent;
    /** Two public clients, and a confidential one (client_secret_basic). */
    let app: App;
    let otherApp: App;
    let confidential: App;

    before(async () => {
      server = await startServer(backend);
      await server.createUser('alice');
      app = await discover(server, (await server.createClient()).client.id);
      otherApp = await discover(server, (await server.createClient({ name: 'Other application' })).client.id);
      const registered = await server.createClient({ name: 'Server-side application', confidential: true });
      confidential = await discover(server, registered.client.id, { secret: registered.secret });
      agent = new UserAgent(server.url);
    });
    after(() => server?.close());

    function revocation(client: App, token: string, hint?: string): Promise<Response> {
      return oauth.revocationRequest(client.as, client.client, client.auth, token, {
        ...insecure,
        ...(hint ? { additionalParameters: { token_type_hint: hint } } : {}),
      });
    }

    /** Revokes through the library, which accepts only a 200 answer. */
    async function revoke(client: App, token: string, hint?: string): Promise<void> {
      const response = await revocation(client, token, hint);
      assertNoStore(response);
      await oauth.processRevocationResponse(response);
    }

    function refreshRequest(client: App, refreshToken: string): Promise<Response> {
      return oauth.refreshTokenGrantRequest(client.as, client.client, client.auth, refreshToken, insecure);
    }

    /** Every access token is refused by the profile, every refresh token by the token endpoint. */
    async function assertRevoked(client: App, held: readonly Tokens[]): Promise<void> {
      for (const tokens of held) {
        const response = await profile(server, tokens.access_token);
        assert.equal(response.status, 401, 'a revoked access token still opens the profile');
        assert.match(response.headers.get('www-authenticate')!, /^Bearer .*error="invalid_token"/);
        await assertOAuthError(await refreshRequest(client, tokens.refresh_token!), 400, 'invalid_grant', 'the refresh token has been revoked');
      }
    }

    /** The access token opens the profile and the refresh token refreshes (which rotates it). */
    async function assertAlive(client: App, tokens: Tokens): Promise<void> {
      assert.equal((await profile(server, tokens.access_token)).status, 200, 'the access token no longer works');
      assert.equal((await refreshRequest(client, tokens.refresh_token!)).status, 200, 'the refresh token no longer works');
    }

    describe('tokens it does not know', () => {
      const unknown = [`gat_${'A'.repeat(43)}`, `grt_${'A'.repeat(43)}`, 'not-a-token', '<script>alert(1)</script>', "' or 1=1 --"];
      for (const token of unknown) {
        test(`${JSON.stringify(token)} → 200`, async () => {
          await revoke(app, token);
          await revoke(app, token, 'refresh_token');
        });
      }
    });

    describe('malformed requests', () => {
      test('no token → 400 invalid_request', async () => {
        await assertOAuthError(
          await postForm(server, '/oauth/revoke', { client_id: app.client.client_id }),
          400,
          'invalid_request',
          "the 'token' parameter is missing",
        );
      });

      test('a repeated token → 400 invalid_request', async () => {
        const response = await postForm(server, '/oauth/revoke', `token=a&token=b&client_id=${app.client.client_id}`);
        await assertOAuthError(response, 400, 'invalid_request', "the 'token' parameter is repeated");
      });

      test('a JSON body → 400 invalid_request', async () => {
        const response = await postForm(server, '/oauth/revoke', JSON.stringify({ token: 'x' }), { 'content-type': 'application/json' });
        await assertOAuthError(response, 400, 'invalid_request', 'unsupported content type: send application/x-www-form-urlencoded');
      });
    });

    describe('revoking one token ends the whole grant', () => {
      const kinds: TokenKind[] = ['access_token', 'refresh_token'];
      for (const kind of kinds) {
        test(`revoking the ${kind} kills both tokens`, async () => {
          const tokens = await obtainTokens(app, agent);
          await revoke(app, tokens[kind]!);
          await assertRevoked(app, [tokens]);
        });
      }

      // A hint only orders the server's lookups (RFC 7009 §2.1): a wrong one must not save the token.
      for (const [kind, hint] of [
        ['access_token', 'refresh_token'],
        ['refresh_token', 'access_token'],
        ['access_token', 'id_token'],
      ] as const) {
        test(`the ${kind} with token_type_hint=${hint} → 200, and it is revoked`, async () => {
          const tokens = await obtainTokens(app, agent);
          await revoke(app, tokens[kind]!, hint);
          await assertRevoked(app, [tokens]);
        });
      }

      test('revoking the oldest live token kills every generation of the refresh chain', async () => {
        const first = await obtainTokens(app, agent);
        const second = await oauth.processRefreshTokenResponse(app.as, app.client, await refreshRequest(app, first.refresh_token!));
        const third = await oauth.processRefreshTokenResponse(app.as, app.client, await refreshRequest(app, second.refresh_token!));
        await revoke(app, first.access_token); // the oldest token still alive
        await assertRevoked(app, [first, second, third]);
      });

      test('revoking an access token that has expired still ends the grant, even after a purge', async () => {
        const tokens = await obtainTokens(app, agent);
        server.advance(server.config.accessTokenTtl + 60);
        await purgeExpired(server.store.db, server.app.gatehouse.now(), 0);
        await revoke(app, tokens.access_token);
        await assertOAuthError(await refreshRequest(app, tokens.refresh_token!), 400, 'invalid_grant', 'the refresh token has been revoked');
      });

      test("revoking does not forget the user's consent", async () => {
        const { client } = await server.createClient({ name: 'Remembered application' });
        const remembered = await discover(server, client.id);
        const tokens = await obtainTokens(remembered, agent); // approves the consent page
        await revoke(remembered, tokens.refresh_token!);
        const again = await authorizationUrl(remembered);
        const outcome = await agent.visit(again.url.pathname + again.url.search);
        assert.ok(outcome.redirect, `the consent page was shown again: ${outcome.response.status}`);
        assert.ok(outcome.redirect.searchParams.get('code'));
      });
    });

    describe('only the client a token was issued to may revoke it', () => {
      for (const kind of ['access_token', 'refresh_token'] as const) {
        test(`another client's ${kind} → 400 unauthorized_client, and the token still works`, async () => {
          const tokens = await obtainTokens(app, agent);
          for (const intruder of [otherApp, confidential]) {
            await assertOAuthError(await revocation(intruder, tokens[kind]!), 400, 'unauthorized_client', 'the token was not issued to this client');
          }
          await assertAlive(app, tokens);
        });
      }

      test('a confidential client must authenticate to revoke its tokens', async () => {
        const tokens = await obtainTokens(confidential, agent);
        const secretRequired = 'this client must authenticate with its secret';
        await assertOAuthError(await revocation({ ...confidential, auth: oauth.None() }, tokens.access_token), 401, 'invalid_client', secretRequired);
        await assertOAuthError(await postForm(server, '/oauth/revoke', { token: tokens.refresh_token! }), 401, 'invalid_client', secretRequired);
        const wrong = await revocation({ ...confidential, auth: oauth.ClientSecretBasic('gcs_wrong') }, tokens.access_token);
        assert.match(wrong.headers.get('www-authenticate') ?? '', /^Basic realm="gatehouse"/);
        await assertOAuthError(wrong, 401, 'invalid_client', 'client authentication failed');
        assert.equal((await profile(server, tokens.access_token)).status, 200, 'a refused revocation revoked the token');

        await revoke(confidential, tokens.access_token);
        await assertRevoked(confidential, [tokens]);
      });
    });

    test('no token or secret reached the logs', () => {
      assertNoSecretsLogged(server.logs);
    });
  });
}
