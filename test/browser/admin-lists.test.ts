/**
 * Every admin list on a phone (390 px wide) and a desktop (1280 px), in Chromium: the page
 * does not scroll sideways, every row's actions are on screen, and IDs stay on one line, with
 * a Copy button that copies the whole ID.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Page } from 'playwright-core';
import { createConnection } from '../../src/accounts/connections/connections.ts';
import { COMMAND_LINE } from '../../src/audit.ts';
import { registerResource } from '../../src/clients/resources.ts';
import { createIssuer } from '../../src/oauth/assertions/issuers.ts';
import { sqlite } from '../support/backends.ts';
import { browserOptions, launchBrowser, openAs, type TestBrowser } from '../support/browser.ts';
import { startServer, type TestServer } from '../support/server.ts';

const LISTS = ['/admin/oauthclients', '/admin/resources', '/admin/users', '/admin/keys', '/admin/issuers', '/admin/connections', '/admin/audit'];

interface Layout {
  scrollWidth: number;
  /** Each row's links and buttons: where they start and end across the page. */
  actions: Array<{ text: string; left: number; right: number }>;
  /** How many lines each ID in a list takes. */
  idLines: number[];
}

/** (A string: this project's types have no DOM.) */
const LAYOUT = `(() => ({
  scrollWidth: document.documentElement.scrollWidth,
  actions: [...document.querySelectorAll('tbody tr a, tbody tr button:not([hidden])')].map((element) => {
    const box = element.getBoundingClientRect();
    return { text: element.textContent.trim(), left: box.left, right: box.right };
  }),
  idLines: [...document.querySelectorAll('.id-line code.id')].map((code) => code.getClientRects().length),
}))()`;

describe('the admin lists at phone and desktop widths', browserOptions(), () => {
  let server: TestServer;
  let browser: TestBrowser;
  let admin: Page;

  before(async () => {
    [server, browser] = await Promise.all([startServer(sqlite, { DYNAMIC_CLIENT_REGISTRATION: 'true' }), launchBrowser()]);
    await server.createUser('root', { admin: true });
    await server.createUser('alice');
    await server.createClient({ name: 'A registered application with a long name' });
    // A client no administrator registered: its row has a Block button.
    const registered = await fetch(new URL('/oauth/register', server.url), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ client_name: 'Self-registered tool', redirect_uris: ['http://127.0.0.1:8765/callback'], token_endpoint_auth_method: 'none' }),
    });
    assert.equal(registered.status, 201);
    await registerResource(
      server.app.gatehouse,
      { uri: 'https://files.example/mcp', name: 'Files', scopes: [{ name: 'files:read', description: 'Read your files' }] },
      COMMAND_LINE,
    );
    const agent = await server.createClient({ name: 'Enterprise agent', confidential: true });
    await createIssuer(
      server.app.gatehouse,
      {
        issuer: 'https://login.enterprise-identity.example/oauth2/aus1a2b3c4d5e6f7g8h9',
        profile: 'id-jag',
        clients: [agent.client.id],
        scope: 'annotation:read',
      },
      COMMAND_LINE,
    );
    await createConnection(
      server.app.gatehouse,
      {
        name: 'Enterprise single sign-on',
        issuer: 'https://login.enterprise-identity.example/oauth2/aus1a2b3c4d5e6f7g8h9',
        clientId: '0oa1b2c3d4e5f6g7h8i9',
        clientSecret: 'secret',
        domains: ['enterprise-identity.example'],
      },
      COMMAND_LINE,
    );
    admin = await openAs(browser, new URL('/admin/oauthclients', server.url).href, 'root');
    await admin.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: server.url });
  });
  after(async () => {
    await browser?.close();
    await server?.close();
  });

  for (const width of [390, 1280]) {
    test(`at ${width} px every list fits, its rows' actions are on screen and IDs take one line`, async () => {
      await admin.setViewportSize({ width, height: 844 });
      for (const path of LISTS) {
        await admin.goto(new URL(path, server.url).href);
        const layout = (await admin.evaluate(LAYOUT)) as Layout;
        assert.ok(layout.scrollWidth <= width, `${path} is ${layout.scrollWidth} px wide`);
        for (const action of layout.actions)
          assert.ok(action.left >= 0 && action.right <= width, `${path}: "${action.text}" is off screen (${action.left}–${action.right})`);
        for (const lines of layout.idLines) assert.equal(lines, 1, `${path}: an ID wraps`);
      }
      await admin.goto(new URL('/admin/oauthclients', server.url).href);
      assert.ok(
        ((await admin.evaluate(LAYOUT)) as Layout).actions.some((action) => action.text === 'Block'),
        'the Block button is listed',
      );
    });
  }

  test('Copy copies the whole client ID, however much of it the list shows', async () => {
    await admin.setViewportSize({ width: 390, height: 844 });
    await admin.goto(new URL('/admin/oauthclients', server.url).href);
    const first = admin.locator('.id-line').first();
    const shown = (await first.locator('code.id').textContent())!;
    await first.getByRole('button', { name: /^Copy the client ID of / }).click();
    await admin.getByRole('status').getByText('Copied to the clipboard.').waitFor();
    assert.equal(await admin.evaluate('navigator.clipboard.readText()'), shown);
    assert.equal(await first.locator('code.id').getAttribute('title'), shown);
  });
});
