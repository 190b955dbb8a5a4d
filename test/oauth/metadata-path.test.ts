/**
 * An issuer with a path (PUBLIC_URL `https://auth.example/tenant`): its metadata is also at
 * the path-inserted location of RFC 8414 §3.1, where standard clients (oauth4webapi, the MCP
 * SDK) look for it first.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as oauth from 'oauth4webapi';
import { sqlite } from '../support/backends.ts';
import { startServer, type TestServer } from '../support/server.ts';

describe('metadata of an issuer with a path', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer(sqlite, { PUBLIC_URL: 'https://auth.example/tenant' });
  });
  after(() => server?.close());

  test('is served at the path-inserted location and at the plain one, with CORS', async () => {
    for (const path of ['/.well-known/oauth-authorization-server/tenant', '/.well-known/oauth-authorization-server']) {
      const response = await fetch(`${server.url}${path}`, { headers: { origin: 'https://app.example' } });
      assert.equal(response.status, 200, path);
      assert.equal(response.headers.get('access-control-allow-origin'), '*', path);
      const metadata = (await response.json()) as { issuer: string; token_endpoint: string };
      assert.equal(metadata.issuer, 'https://auth.example/tenant');
      assert.equal(metadata.token_endpoint, 'https://auth.example/tenant/api/token');
    }
    assert.equal((await fetch(`${server.url}/.well-known/oauth-authorization-server/other`)).status, 404);
  });

  test('a standard client library discovers it from the issuer alone', async () => {
    const issuer = new URL('https://auth.example/tenant');
    // What oauth4webapi asks for, sent to the test server instead of the real host.
    const request = await oauth.discoveryRequest(issuer, {
      algorithm: 'oauth2',
      [oauth.customFetch]: (url, init) => fetch(`${server.url}${new URL(url).pathname}`, init),
    });
    const metadata = await oauth.processDiscoveryResponse(issuer, request);
    assert.equal(metadata.issuer, 'https://auth.example/tenant');
  });
});
