/**
 * The resource side and the plumbing clients rely on (SPEC §4.4, §4.6): bearer token
 * checks on /api/profile, endpoint discovery, CORS for browser-based clients, the status
 * endpoint and wrong methods.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as oauth from 'oauth4webapi';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { discover, insecure, obtainTokens, profile, revokeToken, type App } from '../support/oauth-client.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';

const BROWSER_ORIGIN = 'https://spa.example';

/** A 401 with the RFC 6750 challenge a client looks for, and the same error in the body. */
async function assertInvalidToken(response: Response): Promise<void> {
  assert.equal(response.status, 401);
  assert.match(response.headers.get('www-authenticate')!, /^Bearer\b.*\berror="invalid_token"/);
  assert.equal(((await response.json()) as { error: string }).error, 'invalid_token');
}

/** The CORS headers a browser checks before letting another origin read the answer. */
function assertOpenToAnyOrigin(response: Response): void {
  assert.equal(response.headers.get('access-control-allow-origin'), '*');
  assert.equal(response.headers.get('access-control-allow-credentials'), null);
}

function preflight(server: TestServer, path: string, method: string): Promise<Response> {
  return fetch(new URL(path, server.url), {
    method: 'OPTIONS',
    headers: { origin: BROWSER_ORIGIN, 'access-control-request-method': method, 'access-control-request-headers': 'authorization, content-type' },
  });
}

for (const backend of BACKENDS) {
  describe(`the resource side (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let app: App;
    /** alice, logged in once; her first authorization records consent for every later one. */
    let alice: UserAgent;
    const tokens = (scope?: string) => obtainTokens(app, alice, 'alice', scope === undefined ? {} : { scope });

    before(async () => {
      server = await startServer(backend, { ACCESS_TOKEN_TTL: '600' });
      await server.createUser('alice');
      const { client } = await server.createClient({ name: 'Annotator' });
      app = await discover(server, client.id);
      alice = new UserAgent(server.url);
      await alice.login('alice');
    });
    after(() => server?.close());

    describe('GET /api/profile', () => {
      test('answers a live token with the user, the client and the scopes, uncached', async () => {
        const { access_token } = await tokens();
        const response = await profile(server, access_token);
        assert.equal(response.status, 200);
        assert.equal(response.headers.get('cache-control'), 'no-store');
        assert.deepEqual(await response.json(), {
          userid: `acct:alice@${new URL(server.url).hostname}`,
          username: 'alice',
          client_id: app.client.client_id,
          scopes: ['annotation:read', 'annotation:write'],
        });
      });

      const badHeaders: Array<[string, Record<string, string>]> = [
        ['no Authorization header', {}],
        ['a Basic Authorization header', { authorization: 'Basic YWxpY2U6c2VjcmV0' }],
        ['"Bearer" without a token', { authorization: 'Bearer' }],
        ['a token with a space in it', { authorization: 'Bearer gat_abc def' }],
        ['an unknown token', { authorization: `Bearer gat_${'A'.repeat(43)}` }],
        ['something that is not a token', { authorization: "Bearer ' or 1=1 --" }],
      ];
      for (const [name, headers] of badHeaders) {
        test(`${name} → 401 invalid_token`, async () => {
          await assertInvalidToken(await fetch(new URL('/api/profile', server.url), { headers }));
        });
      }

      test('a refresh token is not an access token → 401 invalid_token', async () => {
        await assertInvalidToken(await profile(server, (await tokens()).refresh_token!));
      });

      test('a revoked token → 401 invalid_token', async () => {
        const { access_token } = await tokens();
        await revokeToken(app, access_token);
        await assertInvalidToken(await profile(server, access_token));
      });

      test('a token past ACCESS_TOKEN_TTL → 401 invalid_token', async () => {
        const { access_token, expires_in } = await tokens();
        assert.equal(expires_in, 600);
        server.advance(590);
        assert.equal((await profile(server, access_token)).status, 200);
        server.advance(11);
        await assertInvalidToken(await profile(server, access_token));
      });

      // Decision: reading the profile needs annotation:read; a write-only token cannot.
      test('a token with only annotation:write → 403 insufficient_scope', async () => {
        const { access_token, scope } = await tokens('annotation:write');
        assert.equal(scope, 'annotation:write');
        const response = await profile(server, access_token);
        assert.equal(response.status, 403);
        assert.match(response.headers.get('www-authenticate')!, /^Bearer\b.*\berror="insufficient_scope"/);
        assert.equal(((await response.json()) as { error: string }).error, 'insufficient_scope');
      });
    });

    describe('discovery', () => {
      test('GET /api/links gives the three endpoints as absolute URLs', async () => {
        const response = await fetch(new URL('/api/links', server.url));
        assert.equal(response.status, 200);
        const port = new URL(server.url).port;
        assert.deepEqual(await response.json(), {
          'oauth.authorize': `${server.url}/oauth/authorize`,
          'oauth.revoke': `${server.url}/oauth/revoke`,
          websocket: `ws://127.0.0.1:${port}/ws`,
        });
      });

      test('the RFC 8414 metadata passes oauth4webapi and lists S256, the endpoints and iss support', async () => {
        const issuer = new URL(server.url);
        const as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }));
        assert.equal(as.issuer, server.url);
        assert.equal(as.authorization_endpoint, `${server.url}/oauth/authorize`);
        assert.equal(as.token_endpoint, `${server.url}/api/token`);
        assert.equal(as.revocation_endpoint, `${server.url}/oauth/revoke`);
        assert.deepEqual(as.code_challenge_methods_supported, ['S256']);
        assert.deepEqual(as.response_types_supported, ['code']);
        assert.equal(as.authorization_response_iss_parameter_supported, true);
        assert.ok(as.grant_types_supported?.includes('authorization_code'));
        assert.ok(as.grant_types_supported?.includes('refresh_token'));
        assert.deepEqual(as.scopes_supported, ['annotation:read', 'annotation:write', 'openid', 'profile', 'email', 'groups', 'offline_access']);
      });
    });

    describe('CORS for browser-based clients', () => {
      const endpoints: Array<[string, string]> = [
        ['/api/token', 'POST'],
        ['/oauth/revoke', 'POST'],
        ['/api/profile', 'GET'],
      ];
      for (const [path, method] of endpoints) {
        test(`a preflight for ${method} ${path} is answered for any origin, without credentials`, async () => {
          const response = await preflight(server, path, method);
          assert.ok(response.status === 200 || response.status === 204, `status ${response.status}`);
          assertOpenToAnyOrigin(response);
          assert.match(response.headers.get('access-control-allow-methods')!, new RegExp(`\\b${method}\\b`));
          assert.match(response.headers.get('access-control-allow-headers')!, /\bauthorization\b/i);
        });
      }

      test('the answers themselves, errors included, may be read from another origin', async () => {
        const { access_token } = await tokens();
        assertOpenToAnyOrigin(
          await fetch(new URL('/api/profile', server.url), { headers: { origin: BROWSER_ORIGIN, authorization: `Bearer ${access_token}` } }),
        );
        const refused = await fetch(new URL('/api/profile', server.url), { headers: { origin: BROWSER_ORIGIN } });
        assert.equal(refused.status, 401);
        assertOpenToAnyOrigin(refused);
        // Without this a browser hides the RFC 6750 challenge from the client's script.
        assert.match(refused.headers.get('access-control-expose-headers')!, /\bWWW-Authenticate\b/i);
        assertOpenToAnyOrigin(await fetch(new URL('/.well-known/oauth-authorization-server', server.url), { headers: { origin: BROWSER_ORIGIN } }));
      });

      test('the pages are not opened to other origins', async () => {
        const page = await fetch(new URL('/login', server.url), { headers: { origin: BROWSER_ORIGIN } });
        assert.equal(page.status, 200);
        assert.equal(page.headers.get('access-control-allow-origin'), null);
        assert.equal((await preflight(server, '/login', 'POST')).headers.get('access-control-allow-origin'), null);
      });
    });

    describe('operations and wrong methods', () => {
      test('GET /_status → 200 {"status":"okay"}', async () => {
        const response = await fetch(new URL('/_status', server.url));
        assert.equal(response.status, 200);
        assert.deepEqual(await response.json(), { status: 'okay' });
      });

      const wrongMethods: Array<[string, string, string]> = [
        ['GET', '/api/token', 'POST'],
        ['GET', '/oauth/revoke', 'POST'],
        ['DELETE', '/api/profile', 'GET, HEAD'],
        ['POST', '/api/links', 'GET, HEAD'],
        ['POST', '/.well-known/oauth-authorization-server', 'GET, HEAD'],
      ];
      for (const [method, path, allow] of wrongMethods) {
        test(`${method} ${path} → 405 with Allow: ${allow}`, async () => {
          const response = await fetch(new URL(path, server.url), { method });
          assert.equal(response.status, 405);
          assert.equal(response.headers.get('allow'), allow);
          assert.equal(((await response.json()) as { error: string }).error, 'invalid_request');
        });
      }
    });
  });
}
