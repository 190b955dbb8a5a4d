/**
 * The connection pages in Chromium (SPEC §4.5, §4.13): an administrator adds a connection with
 * the form as a person would (labels, the provider choice) and copies the callback URL from the
 * result; `/admin/connections`, its form and `/account/security` with connected identities
 * fit a phone (390 px) and a desktop (1280 px) without scrolling sideways — neither the page
 * nor a table in it — every button on screen.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Page } from 'playwright-core';
import { COMMAND_LINE } from '../../src/audit.ts';
import { createConnection, setConnectionEnabled } from '../../src/accounts/connections/connections.ts';
import { insertIdentity } from '../../src/store/connections.ts';
import { sqlite } from '../support/backends.ts';
import { browserOptions, launchBrowser, openAs, type TestBrowser } from '../support/browser.ts';
import { startServer, type TestServer } from '../support/server.ts';

interface Layout {
  scrollWidth: number;
  /** The page's buttons and button-like links: where they start and end across the page. */
  actions: Array<{ text: string; left: number; right: number }>;
  /** How far each list's table is wider than its box (it would scroll sideways). */
  tableOverflows: number[];
}

/** (A string: this project's types have no DOM.) */
const LAYOUT = `(() => ({
  scrollWidth: document.documentElement.scrollWidth,
  actions: [...document.querySelectorAll('main button:not([hidden]), main a.button, tbody a')].map((element) => {
    const box = element.getBoundingClientRect();
    return { text: element.textContent.trim(), left: box.left, right: box.right };
  }),
  tableOverflows: [...document.querySelectorAll('.table-scroll')].map((box) => box.scrollWidth - box.clientWidth),
}))()`;

describe('the connection pages in a browser, at phone and desktop widths', browserOptions(), () => {
  let server: TestServer;
  let browser: TestBrowser;
  let admin: Page;
  let person: Page;

  before(async () => {
    [server, browser] = await Promise.all([startServer(sqlite), launchBrowser()]);
    await server.createUser('root', { admin: true });
    const carol = await server.createUser('carol');
    const ctx = server.app.gatehouse;
    await createConnection(ctx, { name: 'GitHub', preset: 'github', clientId: 'Iv1.0123456789abcdef', clientSecret: 's' }, COMMAND_LINE);
    await createConnection(
      ctx,
      {
        name: 'Example Corporation single sign-on',
        issuer: 'https://login.enterprise-identity.example/oauth2/aus1a2b3c4d5e6f7g8h9',
        clientId: '0oa1b2c3d4e5f6g7h8i9',
        clientSecret: 's',
        domains: ['example-corporation.example', 'subsidiary.example-corporation.example'],
        required: true,
      },
      COMMAND_LINE,
    );
    await createConnection(ctx, { name: 'ORCID', preset: 'orcid', clientId: 'APP-0123456789ABCDEF', clientSecret: 's' }, COMMAND_LINE);
    await setConnectionEnabled(ctx, 'orcid', false, COMMAND_LINE);
    await insertIdentity(server.store.db, {
      connectionId: 'github',
      subject: '583231',
      userId: carol.id,
      email: 'carol.with-a-rather-long-address@users.noreply.github.example',
      now: Date.now(),
    });
    admin = await openAs(browser, new URL('/admin/connections', server.url).href, 'root');
    await admin.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: server.url });
    person = await openAs(browser, new URL('/account/security', server.url).href, 'carol');
  });
  after(async () => {
    await browser?.close();
    await server?.close();
  });

  test('an administrator adds a connection with the form and copies its callback URL', async () => {
    await admin.setViewportSize({ width: 390, height: 844 });
    await admin.goto(new URL('/admin/connections', server.url).href);
    await admin.getByRole('link', { name: 'Add a connection' }).click();
    await admin.getByLabel('Name', { exact: true }).fill('Keycloak');
    await admin.getByLabel('Provider', { exact: true }).selectOption({ label: 'Other OpenID Connect provider' });
    await admin.getByLabel('Issuer URL (other OpenID Connect provider)').fill('https://keycloak.example/realms/staff');
    await admin.getByLabel('Client ID').fill('gatehouse');
    await admin.getByLabel('Client secret').fill('keycloak-client-secret');
    assert.equal(await admin.getByRole('checkbox', { name: /Create accounts/ }).isChecked(), true);
    await admin.getByRole('button', { name: 'Add connection' }).click();
    await admin.getByRole('heading', { name: 'Connection added' }).waitFor();
    const callback = `${server.url}/login/connections/keycloak/callback`;
    assert.equal((await admin.locator('#callback-url').textContent())?.trim(), callback);
    // The clipboard takes text only from the focused page: the person's page, opened beside this one, may hold the focus.
    await admin.bringToFront();
    await admin.getByRole('button', { name: 'Copy callback URL' }).click();
    await admin.getByRole('status').getByText('Copied to the clipboard.').waitFor();
    assert.equal(await admin.evaluate('navigator.clipboard.readText()'), callback);
    assert.ok(!(await admin.content()).includes('keycloak-client-secret'));
  });

  for (const width of [390, 1280]) {
    test(`at ${width} px the admin pages and the security page fit, every button on screen`, async () => {
      const pages: Array<[Page, string]> = [
        [admin, '/admin/connections'],
        [admin, '/admin/connections/new'],
        [admin, '/admin/connections/example-corporation-single-sign-on/edit'],
        [admin, '/admin/connections/github/delete'],
        [admin, '/admin/users'],
        [person, '/account/security'],
      ];
      for (const [page, path] of pages) {
        await page.setViewportSize({ width, height: 844 });
        await page.goto(new URL(path, server.url).href);
        const layout = (await page.evaluate(LAYOUT)) as Layout;
        assert.ok(layout.scrollWidth <= width, `${path} is ${layout.scrollWidth} px wide`);
        assert.ok(layout.actions.length > 0, `${path} has buttons`);
        for (const overflow of layout.tableOverflows) assert.ok(overflow <= 0, `${path}: a table is ${overflow} px too wide`);
        for (const action of layout.actions)
          assert.ok(action.left >= 0 && action.right <= width, `${path}: "${action.text}" is off screen (${action.left}–${action.right})`);
      }
      await person.goto(new URL('/account/security', server.url).href);
      const identities = person.getByRole('region', { name: 'Connected identities' });
      await identities.getByRole('button', { name: 'Disconnect' }).waitFor();
      assert.equal(await identities.getByRole('button', { name: 'Connect', exact: true }).count(), 2, 'GitHub connected; the others offered');
      assert.equal(await identities.getByText('ORCID').count(), 0, 'a disabled connection is not offered');
      await admin.goto(new URL('/admin/connections', server.url).href);
      for (const name of ['Disable', 'Enable', 'Delete'])
        assert.ok((await admin.getByRole('button', { name }).or(admin.getByRole('link', { name })).count()) > 0, name);
    });
  }
});
