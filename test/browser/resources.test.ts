/**
 * Resource servers in Chromium, as an administrator would register one: through the admin
 * navigation and the form, copying the introspection credentials shown once; then a person
 * authorizing an application for it sees the resource server named on the consent page.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Page } from 'playwright-core';
import { sqlite } from '../support/backends.ts';
import { browserOptions, launchBrowser, openAs, type TestBrowser } from '../support/browser.ts';
import { authorizationUrl, discover } from '../support/oauth-client.ts';
import { startServer, type TestServer } from '../support/server.ts';

describe('resource servers in a browser', browserOptions(), () => {
  let server: TestServer;
  let browser: TestBrowser;

  before(async () => {
    [server, browser] = await Promise.all([startServer(sqlite), launchBrowser()]);
    await server.createUser('root', { admin: true });
    await server.createUser('alice');
  });
  after(async () => {
    await browser?.close();
    await server?.close();
  });

  const open = (path: string, username: string): Promise<Page> => openAs(browser, new URL(path, server.url).href, username);

  test('an administrator registers a resource server; the consent page names it', async () => {
    const admin = await open('/admin/oauthclients', 'root');
    await admin.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Resource servers' }).click();
    await admin.getByRole('link', { name: 'Register a resource server' }).click();
    await admin.getByLabel('Name').fill('Files & Folders');
    await admin.getByLabel('URI').fill('http://files.example.com/mcp');
    await admin.getByLabel('Scopes').fill('files:read=Read your files');
    await admin.getByRole('button', { name: 'Register resource server' }).click();
    await admin.getByRole('alert').getByText('URI must use https (http is allowed only for loopback hosts)').waitFor();
    assert.equal(await admin.getByLabel('Scopes').inputValue(), 'files:read=Read your files', 'nothing typed is lost');

    await admin.getByLabel('URI').fill('https://files.example.com/mcp/');
    await admin.getByRole('button', { name: 'Register resource server' }).click();
    await admin.getByRole('heading', { name: 'Resource server registered' }).waitFor();
    assert.equal(
      await admin
        .locator('#client-secret')
        .textContent()
        .then((t) => t!.startsWith('gcs_')),
      true,
    );
    await admin.getByRole('link', { name: 'All resource servers' }).click();
    await admin.getByRole('cell', { name: 'https://files.example.com/mcp', exact: true }).waitFor();

    const { client } = await server.createClient({ name: 'Sync app', scope: 'files:read' });
    const { url } = await authorizationUrl(await discover(server, client.id), { resource: 'https://files.example.com/mcp' });
    const person = await open(url.href, 'alice');
    await person.getByRole('heading', { name: 'Authorize Sync app' }).waitFor();
    assert.match((await person.locator('main').textContent())!, /on Files & Folders/);
    await person.getByText('Read your files').waitFor();
  });
});
