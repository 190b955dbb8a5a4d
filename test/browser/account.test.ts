/** The applications page in Chromium: a user reviews what they authorized and takes it back. */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as oauth from 'oauth4webapi';
import { BACKENDS, backendOptions, sqlite } from '../support/backends.ts';
import { browserOptions, launchBrowser, logIn, type TestBrowser } from '../support/browser.ts';
import { authorizationUrl, discover, insecure, obtainTokens, profile, type App } from '../support/oauth-client.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { serveMetadataDocument, type MetadataDocument } from '../support/metadata-document.ts';
import { testCaProblem } from '../support/tls.ts';
import { assertDead, assertWorks, type HeldTokens } from '../support/token-checks.ts';
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

// Revoke access for every kind of client ID (SPEC §4.5, §4.8): a registered client's UUID, a
// metadata document's URL (which must not be put into a URL path unencoded), a dynamically
// registered client's UUID. Afterwards every token is dead and prompt=none gets no code.
describe('Revoke access for every kind of client', { ...browserOptions(), ...(testCaProblem() ? { skip: testCaProblem()! } : {}) }, () => {
  let browser: TestBrowser;
  let document: MetadataDocument;
  before(async () => {
    [browser, document] = await Promise.all([launchBrowser(), serveMetadataDocument('Document Notes')]);
  });
  after(async () => {
    await browser?.close();
    document?.close();
  });

  for (const backend of BACKENDS) {
    test(`registered, metadata-document and dynamically registered clients (${backend.name})`, backendOptions(backend), async () => {
      const server = await startServer(backend, { CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES: 'true', DYNAMIC_CLIENT_REGISTRATION: 'true' });
      const context = await browser.newContext();
      try {
        await server.createUser('alice');
        const registration = await fetch(new URL('/oauth/register', server.url), {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ client_name: 'Dynamic Notes', redirect_uris: ['http://127.0.0.1/callback'] }),
        });
        assert.equal(registration.status, 201);
        const redirectUri = 'http://127.0.0.1:51004/callback'; // any port of a loopback redirect URL
        const clients = [
          { name: 'Registered Notes', app: await discover(server, (await server.createClient({ name: 'Registered Notes' })).client.id) },
          { name: 'Document Notes', app: await discover(server, document.url, { redirectUri }) },
          { name: 'Dynamic Notes', app: await discover(server, ((await registration.json()) as { client_id: string }).client_id, { redirectUri }) },
        ];
        const agent = new UserAgent(server.url);
        // Two pairs each, one after another (one browser logs in once): the first proves the
        // tokens work (which rotates its refresh token), the second stays untouched.
        const held: HeldTokens[][] = [];
        for (const { name, app } of clients) {
          const tried = await obtainTokens(app, agent, 'alice');
          await assertWorks({ server, app }, tried).catch((error: Error) => assert.fail(`${name} works before: ${error.message}`));
          held.push([tried, await obtainTokens(app, agent, 'alice')]);
        }

        const page = await context.newPage();
        await page.goto(new URL('/account/applications', server.url).href);
        await logIn(page, 'alice');
        await page.getByRole('heading', { name: 'Your applications' }).waitFor();
        const applications = page.locator('ul.applications > li');
        for (const [i, { name }] of clients.entries()) {
          await applications.filter({ hasText: name }).getByRole('button', { name: 'Revoke access' }).click();
          await page.getByRole('status').getByText(`Access removed: ${name} can no longer use your account.`).waitFor();
          assert.deepEqual(
            (await applications.locator('h2').allTextContents()).sort(),
            clients
              .slice(i + 1)
              .map((c) => c.name)
              .sort(),
            `${name} is no longer listed`,
          );
        }
        // A notice only for what was removed: a link naming a client is not a success.
        await page.goto(new URL(`/account/applications?revoked=${encodeURIComponent(document.url)}`, server.url).href);
        await page.getByRole('heading', { name: 'Your applications' }).waitFor();
        assert.equal(await page.getByRole('status').count(), 0, 'no notice for a link');

        for (const [i, { name, app }] of clients.entries()) {
          await assertDead({ server, app }, held[i]!).catch((error: Error) => assert.fail(`${name}: ${error.message}`));
          // The consent is forgotten: prompt=none gets no code.
          const silent = await authorizationUrl(app, { prompt: 'none' });
          const outcome = await agent.visit(silent.url.pathname + silent.url.search);
          assert.equal(outcome.redirect?.searchParams.get('error'), 'consent_required', `${name}: prompt=none after Revoke access`);
          assert.equal(outcome.redirect?.searchParams.get('code'), null);
        }
      } finally {
        await context.close();
        await server.close();
      }
    });
  }
});
