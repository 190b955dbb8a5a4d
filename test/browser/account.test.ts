/** The applications page in Chromium: a user reviews what they authorized and takes it back. */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as oauth from 'oauth4webapi';
import { sqlite } from '../support/backends.ts';
import { browserOptions, launchBrowser, logIn, type TestBrowser } from '../support/browser.ts';
import { authorizationUrl, discover, insecure, obtainTokens, profile, type App } from '../support/oauth-client.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';

describe('the applications page in a browser', browserOptions(), () => {
  let server: TestServer;
  let browser: TestBrowser;
  let notes: App;
  let reader: App;

  before(async () => {
    [server, browser] = await Promise.all([startServer(sqlite), launchBrowser()]);
    await server.createUser('alice');
    notes = await discover(server, (await server.createClient({ name: 'Notes' })).client.id);
    reader = await discover(server, (await server.createClient({ name: 'Reader', scope: 'annotation:read' })).client.id);
  });
  after(async () => {
    await browser?.close();
    await server?.close();
  });

  test('revoking an application signs it out at once and forgets the consent', async () => {
    const agent = new UserAgent(server.url);
    const notesTokens = await obtainTokens(notes, agent, 'alice');
    const readerTokens = await obtainTokens(reader, agent, 'alice');

    const context = await browser.newContext();
    try {
      const page = await context.newPage();
      await page.goto(new URL('/account/applications', server.url).href);
      await logIn(page, 'alice');
      await page.getByRole('heading', { name: 'Your applications' }).waitFor();
      const applications = page.locator('ul.applications > li');
      assert.deepEqual(await applications.locator('h2').allTextContents(), ['Notes', 'Reader']);
      const notesEntry = applications.filter({ hasText: 'Notes' });
      await notesEntry.getByText('Read your annotations, including private ones').waitFor();
      await notesEntry.getByText('Create, edit and delete annotations as you').waitFor();
      assert.match((await notesEntry.textContent())!, /Last used \d{4}-\d\d-\d\d \d\d:\d\d UTC/);
      assert.doesNotMatch((await applications.filter({ hasText: 'Reader' }).textContent())!, /Create, edit and delete/);

      await notesEntry.getByRole('button', { name: 'Revoke access' }).click();
      await page.getByRole('status').getByText('Access removed: Notes can no longer use your account.').waitFor();
      assert.deepEqual(await applications.locator('h2').allTextContents(), ['Reader']);
    } finally {
      await context.close();
    }

    const rejected = await profile(server, notesTokens.access_token);
    assert.equal(rejected.status, 401);
    assert.match(rejected.headers.get('www-authenticate')!, /error="invalid_token"/);
    const refreshed = await oauth.refreshTokenGrantRequest(notes.as, notes.client, notes.auth, notesTokens.refresh_token!, insecure);
    assert.equal(refreshed.status, 400);
    assert.equal((await profile(server, readerTokens.access_token)).status, 200, 'the other application keeps its access');

    // The consent is forgotten: Notes has to ask again.
    const again = await authorizationUrl(notes);
    const outcome = await agent.visit(again.url.pathname + again.url.search);
    assert.equal(outcome.redirect, null);
    assert.match(outcome.html, /<h1>Authorize Notes<\/h1>/);
  });
});
