/**
 * Connections (SPEC §4.13) in Chromium, both backends.
 *
 * 1. The MCP "front door": an MCP server whose users live at a provider with no metadata
 *    documents, no dynamic registration and no `resource` (here: panva's oidc-provider, to
 *    which Gatehouse is an ordinary OpenID Connect relying party). Gatehouse has
 *    PASSWORD_LOGIN=none and one connection; the example MCP server (examples/mcp-server,
 *    started as `npm run example:mcp` starts it) and the MCP TypeScript SDK's own client do
 *    what test/browser/mcp-client.test.ts has them do — 401, protected resource metadata,
 *    Gatehouse's metadata, the client identified by a metadata document (then, a second client,
 *    by dynamic registration), authorization with `resource` and PKCE — while the person, in
 *    Chromium, finds only the connection's button, goes to the provider (which approves at
 *    once) and back, consents, and lands on the client's redirect URL. The tools then work as
 *    that person, whose token says `amr` `["fed"]`, and the MCP client never talked to the
 *    provider.
 * 2. The login page on a phone (390 px wide, touch): two connections' buttons usable by a thumb
 *    and inside the screen, each logging the person in; the "Work email" path going to the
 *    connection that serves the domain, and staying with a message for any other domain.
 *
 * Chromium does not trust the test CA that the providers' https certificates come from: the
 * contexts that visit a provider are made with `ignoreHTTPSErrors` (everything else they
 * visit — Gatehouse, the example, the client's site — is plain http on loopback).
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { BrowserContext, Locator, Page } from 'playwright-core';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import type { FetchLike } from '@modelcontextprotocol/sdk/shared/transport.js';
import { findUserNamed } from '../../src/accounts/users.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { browserOptions, launchBrowser, startClientSite, type ClientSite, type TestBrowser } from '../support/browser.ts';
import { postForm } from '../support/oauth-client.ts';
import { stopChild } from '../support/processes.ts';
import { assertInOrder, Provider, startExample, text, type Example } from '../support/mcp-host.ts';
import { assertNoSecretsLogged } from '../support/responses.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { serverCertificate, testCaProblem } from '../support/tls.ts';
import { connect } from '../support/upstream-login.ts';
import { startOidcUpstream, type OidcUpstream } from '../support/upstream-providers.ts';

/** The origins and paths of the top-level documents `page` navigates to, from now on, in order. */
function recordNavigations(page: Page): string[] {
  const navigations: string[] = [];
  page.on('request', (request) => {
    if (request.isNavigationRequest() && request.frame() === page.mainFrame()) {
      const url = new URL(request.url());
      navigations.push(`${url.origin}${url.pathname}`);
    }
  });
  return navigations;
}

/** What the person can see and use in the page's main part: its visible buttons and links, by their text. */
async function visibleControls(page: Page): Promise<string[]> {
  const controls: string[] = [];
  for (const control of await page.locator('main').locator('button, a, input:not([type=hidden])').all()) {
    if (await control.isVisible()) controls.push(((await control.textContent()) ?? '').trim() || `<input ${await control.getAttribute('name')}>`);
  }
  return controls;
}

describe('connections in Chromium', { skip: testCaProblem() ?? false, ...browserOptions() }, () => {
  let browser: TestBrowser;
  before(async () => {
    browser = await launchBrowser();
  });
  after(async () => {
    await browser?.close();
  });

  for (const backend of BACKENDS) {
    describe(`the MCP front door: an MCP server whose people log in at a plain OpenID Connect provider (${backend.name})`, backendOptions(backend), () => {
      let server: TestServer;
      let upstream: OidcUpstream;
      let example: Example;
      let site: ClientSite;
      let documents: Server;
      let documentUrl: string;
      /** Every request the MCP client made, as `METHOD /path status`, and the origins it made them to. */
      const seen: string[] = [];
      const origins = new Set<string>();
      const recordingFetch: FetchLike = async (url, init) => {
        const response = await fetch(url, init);
        const { origin, pathname } = new URL(url);
        seen.push(`${init?.method ?? 'GET'} ${pathname} ${response.status}`);
        origins.add(origin);
        return response;
      };

      before(async () => {
        [server, upstream, site] = await Promise.all([
          startServer(backend, { PASSWORD_LOGIN: 'none', CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES: 'true', DYNAMIC_CLIENT_REGISTRATION: 'true' }),
          startOidcUpstream(),
          startClientSite(),
        ]);
        await connect(server, upstream, { name: 'Corp SSO', issuer: upstream.issuer });
        example = await startExample(server);
        // The MCP client's metadata document, on a site of its own (https, certificate from the run's CA).
        documents = createServer(serverCertificate(['127.0.0.1']), (request, response) => {
          if (request.url !== '/notes-client.json') return void response.writeHead(404).end();
          const document = { ...new Provider(site.redirectUri).clientMetadata, client_id: documentUrl };
          response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(document));
        });
        documents.listen(0, '127.0.0.1');
        await once(documents, 'listening');
        documentUrl = `https://127.0.0.1:${(documents.address() as AddressInfo).port}/notes-client.json`;
      });
      after(async () => {
        if (example) await stopChild(example.process);
        if (example) rmSync(example.dataDir, { recursive: true, force: true });
        documents?.closeAllConnections();
        documents?.close();
        await site?.close();
        await upstream?.close();
        await server?.close();
      });

      /**
       * The person, in a fresh Chromium, opens the authorization URL: the login page offers
       * only the connection; its button goes to the provider and back; they authorize; the
       * browser lands on the client's redirect URL. Returns the login page's controls, the
       * consent page's text, the main frame's navigations, and the code.
       */
      async function authorizeInChromium(url: URL) {
        const context = await browser.newContext({ ignoreHTTPSErrors: true });
        try {
          const page = await context.newPage();
          const navigations = recordNavigations(page);
          await page.goto(url.href);
          assert.equal(new URL(page.url()).pathname, '/login', 'sent to log in');
          const button = page.getByRole('link', { name: 'Continue with Corp SSO' });
          await button.waitFor();
          const controls = await visibleControls(page);
          assert.equal(await page.getByLabel('Password').count(), 0, 'no password field');
          assert.equal(await page.getByLabel('Username or email').count(), 0, 'no username field');
          await button.click();
          await page.getByRole('heading', { name: 'Authorize Notes MCP client' }).waitFor();
          const consent = (await page.locator('main').textContent())!;
          await page.getByRole('button', { name: 'Authorize' }).click();
          await page.waitForURL((address) => address.href.startsWith(site.redirectUri));
          const callback = new URL(page.url()).searchParams;
          assert.equal(callback.get('iss'), server.url);
          assert.equal(callback.get('state'), url.searchParams.get('state'));
          return { controls, consent, navigations, code: callback.get('code')! };
        } finally {
          await context.close();
        }
      }

      const transport = (provider: Provider) => new StreamableHTTPClientTransport(new URL(example.url), { authProvider: provider, fetch: recordingFetch });

      /** What an MCP host does on first connection: connect, be sent to authorize, finish, connect again. */
      async function connectClient(provider: Provider) {
        const first = transport(provider);
        await assert.rejects(new Client({ name: 'test host', version: '1.0.0' }).connect(first), UnauthorizedError);
        assert.ok(provider.authorizationUrl, 'the SDK sent the person to authorize');
        const authorized = await authorizeInChromium(provider.authorizationUrl);
        await first.finishAuth(authorized.code);
        const client = new Client({ name: 'test host', version: '1.0.0' });
        await client.connect(transport(provider));
        return { client, ...authorized };
      }

      /** Gatehouse's introspection of `token`, asked with the example's own introspection client, as the example asks. */
      async function introspect(token: string) {
        const { client_id, client_secret } = JSON.parse(readFileSync(join(example.dataDir, 'resource.json'), 'utf8')) as Record<string, string>;
        const basic = { authorization: `Basic ${Buffer.from(`${client_id}:${client_secret}`).toString('base64')}` };
        const response = await postForm(server, '/oauth/introspect', { token }, basic);
        assert.equal(response.status, 200);
        return (await response.json()) as Record<string, unknown>;
      }

      test('a client identified by a metadata document connects; the person logs in only through the connection, in Chromium; the tools work as them; the token says amr fed', async () => {
        seen.length = 0;
        origins.clear();
        const authorizeRequests = upstream.requests('/auth');
        upstream.nextLogin({ sub: 'fm-1013', email: 'mulder@corp.example', email_verified: true, name: 'Fox Mulder', preferred_username: 'mulder' });
        const provider = new Provider(site.redirectUri, { clientMetadataUrl: documentUrl });
        const { client, controls, consent, navigations } = await connectClient(provider);

        // The SDK did what it does against any authorization server, and talked only to the MCP server and Gatehouse.
        assertInOrder(seen, [
          'POST /mcp 401',
          'GET /.well-known/oauth-protected-resource/mcp 200',
          'GET /.well-known/oauth-authorization-server 200',
          'POST /api/token 200',
          'POST /mcp 200',
        ]);
        assert.deepEqual([...origins].sort(), [new URL(example.url).origin, server.url].sort(), 'the MCP client never talks to the provider');
        const asked = provider.authorizationUrl!.searchParams;
        assert.equal(asked.get('client_id'), documentUrl);
        assert.equal(asked.get('resource'), example.url);
        assert.equal(asked.get('code_challenge_method'), 'S256');

        // The person: the login page offered the connection alone (PASSWORD_LOGIN=none), and the browser went to the provider and back.
        assert.deepEqual(
          controls.filter((control) => control !== 'Log in with a passkey'),
          ['Continue with Corp SSO'],
          `only the connection (and passkeys) offered: ${controls.join(', ')}`,
        );
        assert.equal(upstream.requests('/auth'), authorizeRequests + 1, 'one authorization request at the provider');
        const gatehouse = (path: string) => `${server.url}${path}`;
        const at = (prefix: string) => navigations.findIndex((navigation) => navigation.startsWith(prefix));
        assert.ok(
          at(`${upstream.issuer}/auth`) > at(gatehouse('/login/connections/')),
          `Gatehouse sent the browser to the provider: ${navigations.join(' → ')}`,
        );
        assert.ok(at(gatehouse('/login/connections/')) > at(gatehouse('/login')));
        assert.ok(
          navigations.some((navigation) => navigation.endsWith('/callback') && navigation.startsWith(gatehouse('/login/connections/'))),
          'and back',
        );
        assert.match(consent, /Example notes \(MCP\)/);
        assert.match(consent, /No administrator has checked this application/);

        // The tools work, as the person the provider named (a new account, just in time).
        assert.equal(text(await client.callTool({ name: 'add_note', arguments: { text: 'trust no one' } })), 'Added note 1 for mulder.');
        assert.equal(text(await client.callTool({ name: 'list_notes', arguments: {} })), '1. trust no one');
        const mulder = (await findUserNamed(server.app.gatehouse, 'mulder'))!;
        assert.equal(mulder.password_hash, '', 'no password');

        // What the MCP server learns of the token: the person, the resource, and that they logged in through a federation.
        const described = await introspect(provider.tokens()!.access_token);
        assert.equal(described.active, true);
        assert.equal(described.username, 'mulder');
        assert.equal(described.sub, `acct:mulder@${new URL(server.url).hostname}`);
        assert.equal(described.aud, example.url);
        assert.deepEqual(described.amr, ['fed']);
        await client.close();
      });

      test('a dynamically registered client, in another browser: the same identity is the same person, with the same notes', async () => {
        seen.length = 0;
        upstream.nextLogin({ sub: 'fm-1013', email: 'mulder@corp.example', email_verified: true, name: 'Fox Mulder', preferred_username: 'mulder' });
        const provider = new Provider(site.redirectUri);
        const { client } = await connectClient(provider);
        assertInOrder(seen, ['POST /mcp 401', 'POST /oauth/register 201', 'POST /api/token 200', 'POST /mcp 200']);
        assert.equal(text(await client.callTool({ name: 'list_notes', arguments: {} })), '1. trust no one');
        assert.deepEqual((await introspect(provider.tokens()!.access_token)).amr, ['fed']);
        const people = await server.app.gatehouse.db.selectFrom('users').select('username').execute();
        assert.deepEqual(
          people.map((person) => person.username),
          ['mulder'],
          'one person, made by the first login',
        );
        await client.close();
        assertNoSecretsLogged(server.logs);
        assert.doesNotMatch(example.output.join(''), /g(at|rt|ac|cs)_|eyJ/, 'the example logs no token or secret');
      });
    });

    describe(`the login page on a phone, with two connections and passwords (${backend.name})`, backendOptions(backend), () => {
      let server: TestServer;
      let corp: OidcUpstream;
      let partner: OidcUpstream;
      const PHONE = { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, ignoreHTTPSErrors: true };
      let context: BrowserContext | undefined;

      before(async () => {
        [server, corp, partner] = await Promise.all([startServer(backend, { PASSWORD_LOGIN: 'all' }), startOidcUpstream(), startOidcUpstream()]);
        await server.createUser('alice');
        await connect(server, corp, { name: 'Corp SSO', issuer: corp.issuer, domains: ['corp.example'] });
        await connect(server, partner, { name: 'Partner Identity', issuer: partner.issuer });
      });
      after(async () => {
        await context?.close();
        await server?.close();
        await corp?.close();
        await partner?.close();
      });

      /** A fresh phone-sized browser (the one before closed), on the login page. */
      async function loginPageOnPhone(): Promise<Page> {
        await context?.close();
        context = await browser.newContext(PHONE);
        const page = await context.newPage();
        await page.goto(`${server.url}/login`);
        return page;
      }

      /** `control` is visible and wholly inside the screen's width; returns its height in CSS pixels. */
      async function assertOnScreen(page: Page, control: Locator, what: string): Promise<number> {
        assert.ok(await control.isVisible(), `${what} is visible`);
        const box = (await control.boundingBox())!;
        assert.ok(box.x >= 0 && box.x + box.width <= page.viewportSize()!.width, `${what} spans x ${box.x}–${box.x + box.width}`);
        return box.height;
      }

      /** The page is no wider than the screen: nothing to scroll sideways. */
      async function assertNoSidewaysScroll(page: Page) {
        const { scrollWidth, innerWidth } = (await page.evaluate('({ scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth })')) as {
          scrollWidth: number;
          innerWidth: number;
        };
        assert.equal(innerWidth, 390, 'laid out for the phone (a viewport meta tag)');
        assert.ok(scrollWidth <= innerWidth, `the page is ${scrollWidth} px wide on a ${innerWidth} px screen`);
      }

      test('both "Continue with …" buttons and the work email form are there, inside the screen, at least 44 px tall', async () => {
        const page = await loginPageOnPhone();
        await assertNoSidewaysScroll(page);
        // The password form is still there (PASSWORD_LOGIN=all), and the work email path (a connection serves a domain).
        await assertOnScreen(page, page.getByRole('button', { name: 'Log in', exact: true }), 'the password form’s button');
        // What a thumb must hit: at least 44 CSS pixels tall (WCAG 2.5.5, Apple's and Google's guidelines).
        const heights: Record<string, number> = {};
        for (const [what, control] of [
          ['Continue with Corp SSO', page.getByRole('link', { name: 'Continue with Corp SSO' })],
          ['Continue with Partner Identity', page.getByRole('link', { name: 'Continue with Partner Identity' })],
          ['the Work email field', page.getByLabel('Work email')],
          ['Continue with work email', page.getByRole('button', { name: 'Continue with work email' })],
        ] as const)
          heights[what] = await assertOnScreen(page, control, what);
        const small = Object.entries(heights).filter(([, height]) => height < 44);
        assert.deepEqual(small, [], `thumb targets under 44 px: ${small.map(([what, height]) => `${what} (${height} px)`).join(', ')}`);
      });

      test('tapping a connection’s button logs the person in, at the provider and back, to the home page', async () => {
        partner.nextLogin({ sub: 'p-42', email: 'pat@partner.example', email_verified: true, name: 'Pat Partner', preferred_username: 'pat' });
        const page = await loginPageOnPhone();
        const navigations = recordNavigations(page);
        await page.getByRole('link', { name: 'Continue with Partner Identity' }).tap();
        await page.waitForURL(`${server.url}/`);
        assert.match((await page.locator('main').textContent())!, /You are logged in as pat\./);
        assert.ok(
          navigations.some((navigation) => navigation === `${partner.issuer}/auth`),
          `through the partner’s provider: ${navigations.join(' → ')}`,
        );
        assert.ok(!navigations.some((navigation) => navigation.startsWith(corp.issuer)), 'not the other one');
        await assertNoSidewaysScroll(page);
      });

      test('a work email of the connection’s domain goes to that connection’s provider, with the address as a hint, and back logged in', async () => {
        corp.nextLogin({ sub: 'c-7', email: 'someone@corp.example', email_verified: true, name: 'Some One', preferred_username: 'someone' });
        const page = await loginPageOnPhone();
        const hints: (string | null)[] = [];
        page.on('request', (request) => {
          const url = new URL(request.url());
          if (`${url.origin}${url.pathname}` === `${corp.issuer}/auth`) hints.push(url.searchParams.get('login_hint'));
        });
        await page.getByLabel('Work email').fill('someone@corp.example');
        await page.getByRole('button', { name: 'Continue with work email' }).tap();
        await page.waitForURL(`${server.url}/`);
        assert.match((await page.locator('main').textContent())!, /You are logged in as someone\./);
        assert.deepEqual(hints, ['someone@corp.example'], 'the provider was asked once, with the address as login_hint');
      });

      test('a work email of another domain stays on the login page with a message; no provider is asked', async () => {
        const asked = corp.requests('/auth') + partner.requests('/auth');
        const page = await loginPageOnPhone();
        await page.getByLabel('Work email').fill('x@other.example');
        const [response] = await Promise.all([page.waitForNavigation(), page.getByRole('button', { name: 'Continue with work email' }).tap()]);
        assert.equal(response!.status(), 400);
        assert.equal(new URL(page.url()).origin, server.url, 'still at Gatehouse');
        const alert = page.getByRole('alert');
        assert.equal((await alert.textContent())!.trim(), 'No company login is set up for that address. Use one of the other ways to log in.');
        assert.ok(await alert.isVisible());
        // Still the login page, with every way in.
        await assertOnScreen(page, page.getByRole('button', { name: 'Continue with work email' }), 'the work email button');
        await assertOnScreen(page, page.getByRole('link', { name: 'Continue with Corp SSO' }), 'the Corp SSO button');
        assert.ok(await page.getByLabel('Username or email').isVisible());
        await assertNoSidewaysScroll(page);
        assert.equal(corp.requests('/auth') + partner.requests('/auth'), asked, 'no provider asked');
        await page.goto(`${server.url}/`);
        assert.equal(new URL(page.url()).pathname, '/login', 'not logged in');
      });
    });
  }
});
