/**
 * The MCP TypeScript SDK's own client connects to the example MCP server
 * (examples/mcp-server, started as `npm run example:mcp` starts it, so it registers itself
 * through the command line) with nothing set up beforehand: 401 → protected resource
 * metadata → Gatehouse's metadata → the client identifies itself (once by a client ID
 * metadata document this test serves over https, once by dynamic registration) →
 * authorization with `resource` and PKCE, the login and consent done in Chromium → token →
 * tool calls. Then refresh, revocation (the next call gets 401) and tokens for other
 * resources, which the MCP server refuses. Then the example is started again in JWT mode
 * (MCP_TOKEN_FORMAT=jwt): Gatehouse issues it JWT access tokens, which it verifies offline.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { decodeJwt, decodeProtectedHeader } from 'jose';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { auth, UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import type { FetchLike } from '@modelcontextprotocol/sdk/shared/transport.js';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { browserOptions, launchBrowser, logIn, startClientSite, type ClientSite, type TestBrowser } from '../support/browser.ts';
import { postForm } from '../support/oauth-client.ts';
import { stopChild } from '../support/processes.ts';
import { assertInOrder, Provider, startExample, text, type Example } from '../support/mcp-host.ts';
import { COMMAND_LINE } from '../../src/audit.ts';
import { changeTokenSettings, findResourceNamed } from '../../src/clients/resources.ts';
import { registerResourceServer } from '../support/resources.ts';
import { assertNoSecretsLogged } from '../support/responses.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { serverCertificate, testCaProblem } from '../support/tls.ts';

describe('the MCP SDK client and the example MCP server', { skip: testCaProblem() ?? false }, () => {
  for (const backend of BACKENDS) {
    describe(`(${backend.name})`, { ...backendOptions(backend), ...browserOptions() }, () => {
      let server: TestServer;
      let example: Example;
      let browser: TestBrowser;
      let site: ClientSite;
      let documents: Server;
      let documentRequests = 0;
      let documentUrl: string;
      /** Every request the MCP client made, as `METHOD /path status`. */
      const seen: string[] = [];
      const recordingFetch: FetchLike = async (url, init) => {
        const response = await fetch(url, init);
        seen.push(`${init?.method ?? 'GET'} ${new URL(url).pathname} ${response.status}`);
        return response;
      };

      before(async () => {
        [server, browser, site] = await Promise.all([
          startServer(backend, { CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES: 'true', DYNAMIC_CLIENT_REGISTRATION: 'true' }),
          launchBrowser(),
          startClientSite(),
        ]);
        await server.createUser('alice');
        example = await startExample(server);
        // The MCP client's metadata document, on a site of its own (https, certificate from the run's CA).
        documents = createServer(serverCertificate(['127.0.0.1']), (request, response) => {
          documentRequests++;
          if (request.url !== '/notes-client.json') return void response.writeHead(404).end();
          const document = {
            ...new Provider(site.redirectUri).clientMetadata,
            client_id: documentUrl,
            client_uri: `https://127.0.0.1:${(documents.address() as AddressInfo).port}/`,
          };
          response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(document));
        });
        documents.listen(0, '127.0.0.1');
        await once(documents, 'listening');
        documentUrl = `https://127.0.0.1:${(documents.address() as AddressInfo).port}/notes-client.json`;
      });
      after(async () => {
        await browser?.close();
        if (example) await stopChild(example.process);
        if (example) rmSync(example.dataDir, { recursive: true, force: true });
        documents?.closeAllConnections();
        documents?.close();
        await site?.close();
        await server?.close();
      });

      /** Alice logs in and presses Authorize in a fresh browser; returns the consent page's text and the code. */
      async function authorizeInChromium(url: URL): Promise<{ consent: string; code: string }> {
        const context = await browser.newContext();
        try {
          const page = await context.newPage();
          await page.goto(url.href);
          if (new URL(page.url()).pathname === '/login') await logIn(page, 'alice');
          await page.getByRole('heading', { name: 'Authorize Notes MCP client' }).waitFor();
          const consent = (await page.locator('main').textContent())!;
          await page.getByRole('button', { name: 'Authorize' }).click();
          await page.waitForURL((address) => address.href.startsWith(site.redirectUri));
          const callback = new URL(page.url()).searchParams;
          assert.equal(callback.get('iss'), server.url);
          assert.equal(callback.get('state'), url.searchParams.get('state'));
          return { consent, code: callback.get('code')! };
        } finally {
          await context.close();
        }
      }

      function transport(provider: Provider): StreamableHTTPClientTransport {
        return new StreamableHTTPClientTransport(new URL(example.url), { authProvider: provider, fetch: recordingFetch });
      }

      /** What an MCP host does on first connection: connect, be sent to authorize, finish, connect again. */
      async function connect(provider: Provider): Promise<{ client: Client; consent: string }> {
        const first = transport(provider);
        await assert.rejects(new Client({ name: 'test host', version: '1.0.0' }).connect(first), UnauthorizedError);
        assert.ok(provider.authorizationUrl, 'the SDK sent the person to authorize');
        const { consent, code } = await authorizeInChromium(provider.authorizationUrl);
        await first.finishAuth(code);
        const client = new Client({ name: 'test host', version: '1.0.0' });
        await client.connect(transport(provider));
        return { client, consent };
      }

      /** `tools/list` with this bearer token, as any MCP client sends it. */
      const call = (token: string) =>
        fetch(example.url, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
          body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
        });

      const prmPath = '/.well-known/oauth-protected-resource/mcp';
      /** An opaque access token the example accepted while it introspected. */
      let opaqueToken: string;
      let cimdProvider: Provider;
      let cimdClient: Client;

      test('the example registered itself and describes itself (RFC 9728)', async () => {
        const metadata = await (await fetch(new URL(prmPath, example.url))).json();
        assert.deepEqual(metadata, {
          resource: example.url,
          authorization_servers: [server.url],
          scopes_supported: ['notes:read', 'notes:write'],
          bearer_methods_supported: ['header'],
          resource_name: 'Example notes (MCP)',
        });
        const refused = await fetch(example.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
        assert.equal(refused.status, 401);
        assert.match(refused.headers.get('www-authenticate')!, new RegExp(`^Bearer .*resource_metadata="${new URL(prmPath, example.url).href}"`));
      });

      test('a client identified by a metadata document connects with no prior setup, and may read and write', async () => {
        seen.length = 0;
        cimdProvider = new Provider(site.redirectUri, { clientMetadataUrl: documentUrl });
        const { client, consent } = await connect(cimdProvider);
        cimdClient = client;
        assertInOrder(seen, ['POST /mcp 401', `GET ${prmPath} 200`, 'GET /.well-known/oauth-authorization-server 200', 'POST /api/token 200', 'POST /mcp 200']);
        assert.ok(!seen.includes('POST /oauth/register 201'), 'no registration: the document is the client');
        const asked = cimdProvider.authorizationUrl!.searchParams;
        assert.equal(asked.get('client_id'), documentUrl);
        assert.equal(asked.get('resource'), example.url);
        assert.equal(asked.get('code_challenge_method'), 'S256');
        assert.equal(asked.get('scope'), 'notes:read notes:write');
        assert.match(consent, /No administrator has checked this application/);
        assert.match(consent, /It runs on this computer/);
        assert.match(consent, /Example notes \(MCP\)/);
        assert.ok(documentRequests >= 1, 'Gatehouse fetched the document');

        assert.equal(cimdProvider.tokens()!.scope, 'notes:read notes:write');
        assert.equal(text(await client.callTool({ name: 'add_note', arguments: { text: 'buy milk' } })), 'Added note 1 for alice.');
        assert.equal(text(await client.callTool({ name: 'list_notes', arguments: {} })), '1. buy milk');
      });

      test('the SDK refreshes with its refresh token; the new access token works', async () => {
        const before = cimdProvider.tokens()!;
        seen.length = 0;
        assert.equal(await auth(cimdProvider, { serverUrl: example.url, fetchFn: recordingFetch }), 'AUTHORIZED');
        assert.ok(seen.includes('POST /api/token 200'));
        const after = cimdProvider.tokens()!;
        assert.notEqual(after.access_token, before.access_token);
        assert.notEqual(after.refresh_token, before.refresh_token);
        assert.equal(text(await cimdClient.callTool({ name: 'list_notes', arguments: {} })), '1. buy milk');
      });

      test('after revocation the next call gets 401, and the SDK sends the person to authorize again', async () => {
        const { access_token, refresh_token } = cimdProvider.tokens()!;
        const revoked = await postForm(server, '/oauth/revoke', { token: refresh_token!, client_id: documentUrl });
        assert.equal(revoked.status, 200);
        const refused = await call(access_token);
        assert.equal(refused.status, 401);
        assert.match(refused.headers.get('www-authenticate')!, /error="invalid_token", error_description="The token is not active", resource_metadata="/);
        cimdProvider.authorizationUrl = undefined;
        await assert.rejects(cimdClient.callTool({ name: 'list_notes', arguments: {} }), UnauthorizedError);
        assert.equal(cimdProvider.tokens(), undefined, 'the refresh failed too: the SDK forgot the tokens');
        assert.ok(cimdProvider.authorizationUrl, 'and asks the person again');
        await cimdClient.close();
      });

      test('a dynamically registered client connects; one that asked only to read cannot write', async () => {
        seen.length = 0;
        const provider = new Provider(site.redirectUri, { onlyScope: 'notes:read' });
        const { client, consent } = await connect(provider);
        assertInOrder(seen, [
          'POST /mcp 401',
          `GET ${prmPath} 200`,
          'GET /.well-known/oauth-authorization-server 200',
          'POST /oauth/register 201',
          'POST /api/token 200',
          'POST /mcp 200',
        ]);
        const clientId = provider.clientInformation()!.client_id;
        assert.match(clientId, /^[0-9a-f-]{36}$/);
        assert.equal(provider.authorizationUrl!.searchParams.get('client_id'), clientId);
        assert.equal(provider.authorizationUrl!.searchParams.get('resource'), example.url);
        assert.match(consent, /No administrator has checked this application/);
        assert.equal(provider.tokens()!.scope, 'notes:read');
        assert.equal(text(await client.callTool({ name: 'list_notes', arguments: {} })), '1. buy milk');
        assert.equal(
          text(await client.callTool({ name: 'add_note', arguments: { text: 'sell milk' } })),
          'error: This needs the notes:write scope, which the token does not carry: authorize the client again and allow "Add notes".',
        );
        opaqueToken = provider.tokens()!.access_token;
        await client.close();
      });

      test('tokens for another resource are refused by the MCP server', async () => {
        const files = await registerResourceServer(server, 'https://files.example/api', [{ name: 'files:read', description: 'Read your files' }]);
        const { client, secret } = await server.createClient({
          name: 'Batch job',
          grantType: 'client_credentials',
          redirectUris: [],
          confidential: true,
          scope: 'annotation:read files:read',
        });
        const basic = { authorization: `Basic ${Buffer.from(`${client.id}:${secret}`).toString('base64')}` };
        const tokenFor = async (resource?: string) => {
          const response = await postForm(server, '/api/token', { grant_type: 'client_credentials', ...(resource ? { resource } : {}) }, basic);
          assert.equal(response.status, 200);
          return ((await response.json()) as { access_token: string }).access_token;
        };
        // The built-in resource's token is described to the MCP server (aud = Gatehouse's own API), which refuses it.
        const builtin = await call(await tokenFor());
        assert.equal(builtin.status, 401);
        assert.match(builtin.headers.get('www-authenticate')!, /error="invalid_token", error_description="Token was not issued for this resource"/);
        // Another resource server's token is not even described to it.
        const other = await call(await tokenFor(files.uri));
        assert.equal(other.status, 401);
        assert.match(other.headers.get('www-authenticate')!, /error="invalid_token", error_description="The token is not active"/);
        assertNoSecretsLogged(server.logs);
        assert.doesNotMatch(example.output.join(''), /g(at|rt|ac|cs)_/, 'the example logs no token or secret');
      });

      let jwtProvider: Provider;

      test('started again in JWT mode, the example has Gatehouse issue it JWTs, and refuses the opaque tokens issued before', async () => {
        await stopChild(example.process);
        example = await startExample(server, { again: example, tokenFormat: 'jwt' });
        assert.match(example.output.join(''), /Gatehouse now issues jwt access tokens for /);
        const resource = (await findResourceNamed(server.app.gatehouse, example.url))!;
        assert.equal(resource.token_format, 'jwt');
        assert.equal(resource.signing_alg, 'ES256');
        // Still active at Gatehouse, but not a JWT: the client gets a 401, refreshes and gets one.
        const refused = await call(opaqueToken);
        assert.equal(refused.status, 401);
        assert.match(refused.headers.get('www-authenticate')!, /error="invalid_token", error_description="The token is not valid", resource_metadata="/);
      });

      test('in JWT mode the SDK client connects and its tools work with a JWT access token', async () => {
        seen.length = 0;
        jwtProvider = new Provider(site.redirectUri);
        const { client } = await connect(jwtProvider);
        assertInOrder(seen, ['POST /mcp 401', `GET ${prmPath} 200`, 'POST /oauth/register 201', 'POST /api/token 200', 'POST /mcp 200']);
        const { access_token } = jwtProvider.tokens()!;
        assert.equal(access_token.split('.').length, 3, 'a JWS in compact form');
        assert.deepEqual(decodeProtectedHeader(access_token).typ, 'at+jwt');
        assert.equal(decodeProtectedHeader(access_token).alg, 'ES256');
        const claims = decodeJwt(access_token);
        assert.equal(claims.aud, example.url);
        assert.equal(claims.scope, 'notes:read notes:write');
        // The notes were in the memory of the process that introspected.
        assert.equal(text(await client.callTool({ name: 'list_notes', arguments: {} })), 'alice has no notes yet.');
        assert.equal(text(await client.callTool({ name: 'add_note', arguments: { text: 'buy bread' } })), 'Added note 1 for alice.');
        assert.equal(text(await client.callTool({ name: 'list_notes', arguments: {} })), '1. buy bread');
        await client.close();
      });

      test('in JWT mode tokens for another resource are refused by the MCP server', async () => {
        const photos = await registerResourceServer(server, 'https://photos.example/api', [{ name: 'photos:read', description: 'See your photos' }]);
        const ctx = server.app.gatehouse;
        await changeTokenSettings(ctx, (await findResourceNamed(ctx, photos.uri))!, { tokenFormat: 'jwt' }, COMMAND_LINE);
        const { client, secret } = await server.createClient({
          name: 'Photo job',
          grantType: 'client_credentials',
          redirectUris: [],
          confidential: true,
          scope: 'annotation:read photos:read',
        });
        const basic = { authorization: `Basic ${Buffer.from(`${client.id}:${secret}`).toString('base64')}` };
        const tokenFor = async (resource?: string) => {
          const response = await postForm(server, '/api/token', { grant_type: 'client_credentials', ...(resource ? { resource } : {}) }, basic);
          assert.equal(response.status, 200);
          return ((await response.json()) as { access_token: string }).access_token;
        };
        // A JWT signed by the same keys, for another audience.
        const photosToken = await tokenFor(photos.uri);
        assert.equal(decodeProtectedHeader(photosToken).typ, 'at+jwt');
        const other = await call(photosToken);
        assert.equal(other.status, 401);
        assert.match(
          other.headers.get('www-authenticate')!,
          /error="invalid_token", error_description="Token was not issued for this resource", resource_metadata="/,
        );
        // Gatehouse's own API's token is opaque.
        const builtin = await call(await tokenFor());
        assert.equal(builtin.status, 401);
        assert.match(builtin.headers.get('www-authenticate')!, /error="invalid_token", error_description="The token is not valid", resource_metadata="/);
      });

      test('in JWT mode a revocation is seen by introspection at once, but not by the offline check until the token expires', async () => {
        const { access_token, refresh_token } = jwtProvider.tokens()!;
        assert.equal((await postForm(server, '/oauth/revoke', { token: refresh_token!, client_id: jwtProvider.clientInformation()!.client_id })).status, 200);
        // Gatehouse knows (asked with the example's own introspection client, as it would).
        const { client_id, client_secret } = JSON.parse(readFileSync(join(example.dataDir, 'resource.json'), 'utf8')) as Record<string, string>;
        const basic = { authorization: `Basic ${Buffer.from(`${client_id}:${client_secret}`).toString('base64')}` };
        const introspected = await postForm(server, '/oauth/introspect', { token: access_token }, basic);
        assert.deepEqual(await introspected.json(), { active: false });
        // The example verifies offline and cannot know: it accepts the JWT until its exp (JWT_ACCESS_TOKEN_TTL,
        // 5 minutes by default) — the trade docs/mcp.md describes. Asserted so that the documented window is real.
        assert.ok(decodeJwt(access_token).exp! > Date.now() / 1000);
        assert.equal((await call(access_token)).status, 200);
        assertNoSecretsLogged(server.logs);
        assert.doesNotMatch(example.output.join(''), /g(at|rt|ac|cs)_|eyJ/, 'the example logs no token or secret');
      });
    });
  }
});
