/**
 * SPEC §4.2, `POST /api/token`: malformed requests, the authorization_code, refresh_token
 * and client_credentials grants, and client authentication. Flows go through oauth4webapi;
 * requests no library would send are built by hand with postForm().
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as oauth from 'oauth4webapi';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { authorizationUrl, discover, insecure, obtainTokens, postForm, profile, type App } from '../support/oauth-client.ts';
import { assertNoSecretsLogged, assertNoStore, assertOAuthError } from '../support/responses.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';

const BOTH_SCOPES = 'annotation:read annotation:write';
/** Shaped like a code (prefix + 43 characters) but never issued. */
const UNKNOWN_CODE = `gac_${'A'.repeat(43)}`;

/** An `Authorization: Basic` header as RFC 6749 §2.3.1 builds it. */
function basic(clientId: string, secret: string): Record<string, string> {
  return { authorization: `Basic ${btoa(`${encodeURIComponent(clientId)}:${encodeURIComponent(secret)}`)}` };
}

/** Asserts a successful token response: 200, no-store, exactly the SPEC's fields, an integer `expires_in`. */
async function assertTokenResponse(response: Response, fields: { refresh: boolean; scope: string }): Promise<void> {
  const body = (await response.clone().json()) as Record<string, unknown>;
  assert.equal(response.status, 200, JSON.stringify(body));
  assertNoStore(response);
  const expected = ['access_token', 'expires_in', 'scope', 'token_type', ...(fields.refresh ? ['refresh_token'] : [])];
  assert.deepEqual(Object.keys(body).sort(), expected.sort());
  assert.equal(body.token_type, 'Bearer');
  assert.ok(Number.isInteger(body.expires_in), `expires_in ${body.expires_in} is not an integer`);
  assert.equal(body.scope, fields.scope);
}

for (const backend of BACKENDS) {
  describe(`POST /api/token (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let agent: UserAgent;
    /** A public client without mandatory PKCE, and another public client to play the wrong one. */
    let app: App;
    let otherApp: App;
    /** A confidential authorization_code client (client_secret_basic), and its secret. */
    let confidential: App;
    let secret: string;
    /** A confidential client_credentials client. */
    let machine: App;

    before(async () => {
      server = await startServer(backend);
      await server.createUser('alice');
      app = await discover(server, (await server.createClient()).client.id);
      otherApp = await discover(server, (await server.createClient({ name: 'Other application' })).client.id);
      const registered = await server.createClient({ name: 'Server-side application', confidential: true });
      secret = registered.secret!;
      confidential = await discover(server, registered.client.id, { secret });
      // With a redirect URL, so that an authorization request it should not make comes back with the error.
      const robot = await server.createClient({ name: 'Robot', grantType: 'client_credentials', confidential: true });
      machine = await discover(server, robot.client.id, { secret: robot.secret! });
      agent = new UserAgent(server.url);
    });
    after(() => server?.close());

    const tokenRequest = (form: Record<string, string> | URLSearchParams | string, headers?: Record<string, string>) =>
      postForm(server, '/api/token', form, headers);

    /** A fresh code for `client`, from an authorization request with or without a PKCE challenge. */
    async function freshCode(client: App, pkce = true): Promise<{ code: string; verifier: string }> {
      const authorization = await authorizationUrl(client);
      if (!pkce) {
        authorization.url.searchParams.delete('code_challenge');
        authorization.url.searchParams.delete('code_challenge_method');
      }
      const outcome = await agent.authorize(authorization.url);
      const callback = oauth.validateAuthResponse(client.as, client.client, outcome.redirect!, authorization.state);
      return { code: callback.get('code')!, verifier: authorization.verifier };
    }

    /** The code exchange as oauth4webapi sends it (the library's own client authentication). */
    function exchange(client: App, params: Record<string, string>): Promise<Response> {
      return oauth.genericTokenEndpointRequest(
        client.as,
        client.client,
        client.auth,
        'authorization_code',
        { redirect_uri: client.redirectUri, ...params },
        insecure,
      );
    }

    function requestRefresh(client: App, refreshToken: string, scope?: string): Promise<Response> {
      return oauth.refreshTokenGrantRequest(client.as, client.client, client.auth, refreshToken, {
        ...insecure,
        ...(scope ? { additionalParameters: { scope } } : {}),
      });
    }

    async function assertExchangeWorks(client: App, params: Record<string, string>): Promise<void> {
      const tokens = await oauth.processGenericTokenEndpointResponse(client.as, client.client, await exchange(client, params));
      assert.equal((await profile(server, tokens.access_token)).status, 200);
    }

    describe('malformed requests', () => {
      const cases: { title: string; body: () => string; error: string; description: string }[] = [
        { title: 'no grant_type', body: () => 'code=x', error: 'invalid_request', description: "the 'grant_type' parameter is missing" },
        {
          title: 'an unsupported grant_type',
          body: () => 'grant_type=password&username=alice&password=x',
          error: 'unsupported_grant_type',
          description:
            'supported grant types are authorization_code, refresh_token, client_credentials, urn:ietf:params:oauth:grant-type:device_code, ' +
            'urn:ietf:params:oauth:grant-type:jwt-bearer, urn:ietf:params:oauth:grant-type:token-exchange',
        },
        {
          title: 'several missing parameters',
          body: () => 'grant_type=authorization_code',
          error: 'invalid_request',
          description: "these parameters are missing: 'code', 'client_id'",
        },
        {
          title: 'a parameter sent empty',
          body: () => `grant_type=refresh_token&refresh_token=&client_id=${app.client.client_id}`,
          error: 'invalid_request',
          description: "the 'refresh_token' parameter is missing",
        },
        ...['grant_type', 'code', 'client_id'].map((name) => ({
          title: `a repeated ${name}`,
          body: () => {
            const form = new URLSearchParams({ grant_type: 'authorization_code', code: UNKNOWN_CODE, client_id: app.client.client_id });
            form.append(name, form.get(name)!);
            return form.toString();
          },
          error: 'invalid_request',
          description: `the '${name}' parameter is repeated`,
        })),
        {
          title: 'a percent-encoded parameter that is not UTF-8',
          body: () => `grant_type=authorization_code&code=%FF%FEx&client_id=${app.client.client_id}`,
          error: 'invalid_request',
          description: "the 'code' parameter is not valid UTF-8",
        },
      ];
      for (const { title, body, error, description } of cases) {
        test(`${title} → 400 ${error}`, async () => {
          await assertOAuthError(await tokenRequest(body()), 400, error, description);
        });
      }

      test('raw bytes that are not UTF-8 → 400 invalid_request', async () => {
        const body = Buffer.concat([Buffer.from(`grant_type=authorization_code&client_id=${app.client.client_id}&code=`), Buffer.from([0xc3, 0x28, 0xff])]);
        const response = await fetch(new URL('/api/token', server.url), {
          method: 'POST',
          headers: { 'content-type': 'application/x-www-form-urlencoded' },
          body,
        });
        await assertOAuthError(response, 400, 'invalid_request', "the 'code' parameter is not valid UTF-8");
      });

      test('a JSON body → 400 invalid_request', async () => {
        const json = JSON.stringify({ grant_type: 'authorization_code', code: UNKNOWN_CODE, client_id: app.client.client_id });
        const response = await tokenRequest(json, { 'content-type': 'application/json' });
        await assertOAuthError(response, 400, 'invalid_request', 'unsupported content type: send application/x-www-form-urlencoded');
      });

      test('no body at all → 400 invalid_request', async () => {
        const response = await fetch(new URL('/api/token', server.url), { method: 'POST' });
        await assertOAuthError(response, 400, 'invalid_request', 'send the parameters as an application/x-www-form-urlencoded body');
      });

      test('a huge body → 413', async () => {
        const response = await tokenRequest(`grant_type=authorization_code&code=${'a'.repeat(200 * 1024)}`);
        await assertOAuthError(response, 413, 'invalid_request', 'the request body is too large');
      });
    });

    describe('authorization_code', () => {
      test('a successful exchange: no-store, the SPEC fields, an integer expires_in', async () => {
        const { code, verifier } = await freshCode(app);
        await assertTokenResponse(await exchange(app, { code, code_verifier: verifier }), { refresh: true, scope: BOTH_SCOPES });
      });

      for (const code of ['not-a-code', UNKNOWN_CODE, `${UNKNOWN_CODE}x`, "' or 1=1 --"]) {
        test(`an unknown or garbage code (${JSON.stringify(code)}) → invalid_grant`, async () => {
          const response = await tokenRequest({ grant_type: 'authorization_code', code, client_id: app.client.client_id });
          await assertOAuthError(response, 400, 'invalid_grant', 'the authorization code is invalid');
        });
      }

      test('an expired code → invalid_grant', async () => {
        const { code, verifier } = await freshCode(app);
        server.advance(server.config.authCodeTtl + 1);
        await assertOAuthError(await exchange(app, { code, code_verifier: verifier }), 400, 'invalid_grant', 'the authorization code has expired');
      });

      // Each bad request gets its own error, and leaves the code redeemable by the right request.
      const badExchanges: { title: string; pkce: boolean; spoil: (form: URLSearchParams) => void; error: string; description: string }[] = [
        {
          title: 'the code of another client',
          pkce: true,
          spoil: (form) => form.set('client_id', otherApp.client.client_id),
          error: 'invalid_grant',
          description: 'the authorization code is invalid',
        },
        {
          title: 'no client_id from a public client',
          pkce: true,
          spoil: (form) => form.delete('client_id'),
          error: 'invalid_request',
          description: "the 'client_id' parameter is missing",
        },
        {
          title: 'another redirect_uri',
          pkce: true,
          spoil: (form) => form.set('redirect_uri', 'http://127.0.0.1:8765/elsewhere'),
          error: 'invalid_grant',
          description: "'redirect_uri' does not match the authorization request",
        },
        {
          title: 'no code_verifier for a code with a challenge',
          pkce: true,
          spoil: (form) => form.delete('code_verifier'),
          error: 'invalid_grant',
          description: "'code_verifier' is required: the authorization request used PKCE",
        },
        {
          title: 'a wrong code_verifier',
          pkce: true,
          spoil: (form) => form.set('code_verifier', oauth.generateRandomCodeVerifier()),
          error: 'invalid_grant',
          description: "'code_verifier' does not match the 'code_challenge'",
        },
        {
          title: 'a malformed code_verifier',
          pkce: true,
          spoil: (form) => form.set('code_verifier', 'too short & not base64url'),
          error: 'invalid_request',
          description: "'code_verifier' must be 43-128 characters of A-Z a-z 0-9 - . _ ~",
        },
        {
          title: 'a code_verifier for a code without a challenge',
          pkce: false,
          spoil: (form) => form.set('code_verifier', oauth.generateRandomCodeVerifier()),
          error: 'invalid_grant',
          description: "'code_verifier' was sent but the authorization request had no 'code_challenge'",
        },
      ];
      for (const { title, pkce, spoil, error, description } of badExchanges) {
        test(`${title} → ${error}, and the code still works`, async () => {
          const { code, verifier } = await freshCode(app, pkce);
          const good = { code, ...(pkce ? { code_verifier: verifier } : {}) };
          const form = new URLSearchParams({ grant_type: 'authorization_code', client_id: app.client.client_id, redirect_uri: app.redirectUri, ...good });
          spoil(form);
          await assertOAuthError(await tokenRequest(form), 400, error, description);
          await assertExchangeWorks(app, good);
        });
      }
    });

    describe('client authentication', () => {
      test('client_secret_basic: a confidential client gets and refreshes tokens', async () => {
        const tokens = await obtainTokens(confidential, agent);
        const refreshed = await oauth.processRefreshTokenResponse(
          confidential.as,
          confidential.client,
          await requestRefresh(confidential, tokens.refresh_token!),
        );
        assert.equal((await profile(server, refreshed.access_token)).status, 200);
      });

      test('client_secret_post: a confidential client gets and refreshes tokens', async () => {
        const viaPost = { ...confidential, auth: oauth.ClientSecretPost(secret) };
        const tokens = await obtainTokens(viaPost, agent);
        const refreshed = await oauth.processRefreshTokenResponse(viaPost.as, viaPost.client, await requestRefresh(viaPost, tokens.refresh_token!));
        assert.equal((await profile(server, refreshed.access_token)).status, 200);
      });

      const UNKNOWN_CLIENT = { client_id: '00000000-0000-4000-8000-000000000000' };
      const failures: { title: string; client: () => oauth.Client; auth: () => oauth.ClientAuth; description: string; basic: boolean }[] = [
        {
          title: 'a wrong secret (Basic)',
          client: () => confidential.client,
          auth: () => oauth.ClientSecretBasic('gcs_wrong'),
          description: 'client authentication failed',
          basic: true,
        },
        {
          title: 'a wrong secret (post)',
          client: () => confidential.client,
          auth: () => oauth.ClientSecretPost('gcs_wrong'),
          description: 'client authentication failed',
          basic: false,
        },
        {
          title: 'no secret',
          client: () => confidential.client,
          auth: () => oauth.None(),
          description: 'this client must authenticate with its secret',
          basic: false,
        },
        {
          title: 'an unknown client (Basic)',
          client: () => UNKNOWN_CLIENT,
          auth: () => oauth.ClientSecretBasic(secret),
          description: 'unknown client',
          basic: true,
        },
        { title: 'an unknown client (post)', client: () => UNKNOWN_CLIENT, auth: () => oauth.None(), description: 'unknown client', basic: false },
        {
          title: 'a public client sending a secret (Basic)',
          client: () => app.client,
          auth: () => oauth.ClientSecretBasic('gcs_invented'),
          description: 'this is a public client: it has no secret to send',
          basic: true,
        },
        {
          title: 'a public client sending a secret (post)',
          client: () => app.client,
          auth: () => oauth.ClientSecretPost('gcs_invented'),
          description: 'this is a public client: it has no secret to send',
          basic: false,
        },
      ];
      for (const { title, client, auth, description, basic: usedBasic } of failures) {
        test(`${title} → 401 invalid_client${usedBasic ? ' with a Basic challenge' : ''}`, async () => {
          // The code is never looked at: authentication fails first.
          const response = await oauth.genericTokenEndpointRequest(app.as, client(), auth(), 'authorization_code', { code: UNKNOWN_CODE }, insecure);
          const challenge = response.headers.get('www-authenticate');
          await assertOAuthError(response, 401, 'invalid_client', description);
          if (usedBasic) assert.match(challenge ?? '', /^Basic realm="gatehouse"/);
        });
      }

      test('HTTP Basic and client_secret in the body together → invalid_request', async () => {
        const form = { grant_type: 'authorization_code', code: UNKNOWN_CODE, client_secret: secret };
        const response = await tokenRequest(form, basic(confidential.client.client_id, secret));
        await assertOAuthError(response, 400, 'invalid_request', "use one client authentication method, not both HTTP Basic and 'client_secret'");
      });

      test('a failed authentication leaves the code redeemable', async () => {
        const { code, verifier } = await freshCode(confidential);
        const wrong = { ...confidential, auth: oauth.ClientSecretBasic('gcs_wrong') };
        await assertOAuthError(await exchange(wrong, { code, code_verifier: verifier }), 401, 'invalid_client', 'client authentication failed');
        await assertExchangeWorks(confidential, { code, code_verifier: verifier });
      });
    });

    describe('refresh_token', () => {
      test('a narrower scope gives a narrower access token; omitting scope gives the grant back', async () => {
        const tokens = await obtainTokens(app, agent);
        const narrowed = await requestRefresh(app, tokens.refresh_token!, 'annotation:read');
        await assertTokenResponse(narrowed, { refresh: true, scope: 'annotation:read' });
        const narrow = await oauth.processRefreshTokenResponse(app.as, app.client, narrowed);
        assert.deepEqual(((await (await profile(server, narrow.access_token)).json()) as { scopes: string[] }).scopes, ['annotation:read']);

        const whole = await oauth.processRefreshTokenResponse(app.as, app.client, await requestRefresh(app, narrow.refresh_token!));
        assert.equal(whole.scope, BOTH_SCOPES); // RFC 6749 §6: omitted means as originally granted
      });

      test('a wider or unknown scope → invalid_scope, and the refresh token still works', async () => {
        const tokens = await obtainTokens(app, agent, 'alice', { scope: 'annotation:read' });
        await assertOAuthError(await requestRefresh(app, tokens.refresh_token!, BOTH_SCOPES), 400, 'invalid_scope', "scope 'annotation:write' was not granted");
        await assertOAuthError(await requestRefresh(app, tokens.refresh_token!, 'admin'), 400, 'invalid_scope', "unknown scope 'admin'");
        // RFC 6749 §5.2: the description is printable ASCII without '"' and '\\', even where it repeats what was sent.
        await assertOAuthError(await requestRefresh(app, tokens.refresh_token!, 'a"b\\c é'), 400, 'invalid_scope', "unknown scope 'a'b/c', '?'");
        await assertTokenResponse(await requestRefresh(app, tokens.refresh_token!), { refresh: true, scope: 'annotation:read' });
      });

      test('another client_id → invalid_grant, and the refresh token still works', async () => {
        const tokens = await obtainTokens(app, agent);
        await assertOAuthError(await requestRefresh(otherApp, tokens.refresh_token!), 400, 'invalid_grant', 'the refresh token is invalid');
        await assertTokenResponse(await requestRefresh(app, tokens.refresh_token!), { refresh: true, scope: BOTH_SCOPES });
      });

      for (const refreshToken of ['not-a-token', `grt_${'A'.repeat(43)}`]) {
        test(`an unknown or garbage refresh token (${JSON.stringify(refreshToken)}) → invalid_grant`, async () => {
          await assertOAuthError(await requestRefresh(app, refreshToken), 400, 'invalid_grant', 'the refresh token is invalid');
        });
      }

      test("a confidential client's refresh token without its secret → invalid_client, and it still works with it", async () => {
        const tokens = await obtainTokens(confidential, agent);
        const description = 'this client must authenticate with its secret';
        await assertOAuthError(await requestRefresh({ ...confidential, auth: oauth.None() }, tokens.refresh_token!), 401, 'invalid_client', description);
        await assertOAuthError(await tokenRequest({ grant_type: 'refresh_token', refresh_token: tokens.refresh_token! }), 401, 'invalid_client', description);
        await assertTokenResponse(await requestRefresh(confidential, tokens.refresh_token!), { refresh: true, scope: BOTH_SCOPES });
      });

      test('an expired refresh token → invalid_grant', async () => {
        const tokens = await obtainTokens(app, agent);
        server.advance(server.config.refreshTokenTtl + 1);
        await assertOAuthError(await requestRefresh(app, tokens.refresh_token!), 400, 'invalid_grant', 'the refresh token has expired');
      });
    });

    describe('client_credentials', () => {
      const clientCredentials = (client: App, parameters: Record<string, string> = {}) =>
        oauth.clientCredentialsGrantRequest(client.as, client.client, client.auth, parameters, insecure);

      test('a confidential client_credentials client gets an access token and no refresh token', async () => {
        const response = await clientCredentials(machine);
        await assertTokenResponse(response, { refresh: false, scope: BOTH_SCOPES });
        const tokens = await oauth.processClientCredentialsResponse(machine.as, machine.client, response);
        const narrow = await oauth.processClientCredentialsResponse(machine.as, machine.client, await clientCredentials(machine, { scope: 'annotation:read' }));
        assert.equal(narrow.scope, 'annotation:read');
        assert.notEqual(narrow.access_token, tokens.access_token);
      });

      test('without client authentication → 401 invalid_client', async () => {
        await assertOAuthError(
          await tokenRequest({ grant_type: 'client_credentials' }),
          401,
          'invalid_client',
          'this client must authenticate with its secret',
        );
      });

      test('a public or an authorization_code client → unauthorized_client', async () => {
        for (const client of [app, confidential]) {
          await assertOAuthError(await clientCredentials(client), 400, 'unauthorized_client', 'this client is not registered for the client_credentials grant');
        }
      });

      test('a client_credentials client in the authorization code flow → unauthorized_client', async () => {
        const description = 'this client is not registered for the authorization_code grant';
        const authorization = await authorizationUrl(machine);
        const outcome = await agent.authorize(authorization.url);
        assert.throws(
          () => oauth.validateAuthResponse(machine.as, machine.client, outcome.redirect!, authorization.state),
          (error: oauth.AuthorizationResponseError) => error.error === 'unauthorized_client' && error.error_description === description,
        );
        await assertOAuthError(await exchange(machine, { code: UNKNOWN_CODE }), 400, 'unauthorized_client', description);
      });
    });

    test('no token, code or secret reached the logs', () => {
      assertNoSecretsLogged(server.logs);
    });
  });
}
