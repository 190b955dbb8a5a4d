/**
 * The admin console in Chromium, as an administrator who never read the code would use it:
 * registering a client through the form and authorizing with it, changing and deleting a
 * client, managing users; and everyone else kept out.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as oauth from 'oauth4webapi';
import type { BrowserContext, Page } from 'playwright-core';
import { sqlite } from '../support/backends.ts';
import { browserOptions, launchBrowser, follow, logIn, openAs, startClientSite, type ClientSite, type TestBrowser } from '../support/browser.ts';
import { authorizationUrl, discover, insecure, obtainTokens, profile } from '../support/oauth-client.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe('the admin console in a browser', browserOptions(), () => {
  let server: TestServer;
  let site: ClientSite;
  let browser: TestBrowser;
  const contexts: BrowserContext[] = [];

  before(async () => {
    [server, site, browser] = await Promise.all([startServer(sqlite), startClientSite(), launchBrowser()]);
    await server.createUser('root', { admin: true });
    await server.createUser('alice');
  });
  after(async () => {
    await browser?.close();
    await site?.close();
    await server?.close();
  });

  const open = (path: string, username: string): Promise<Page> => openAs(browser, new URL(path, server.url).href, username);

  after(() => Promise.all(contexts.map((context) => context.close())));

  test('an administrator registers a client through the form and a user authorizes it', async () => {
    const admin = await open('/admin/oauthclients', 'root');
    await admin.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: server.url });
    await admin.getByRole('link', { name: 'Register a new OAuth client' }).click();

    await admin.getByLabel('Name', { exact: true }).fill('Notes <Pro> & Co');
    await admin.getByLabel('Grant type').selectOption('authorization_code');
    await admin.getByLabel('Redirect URL').fill('http://notes.example.com/callback');
    await admin.getByLabel('Confidential').check();
    await admin.getByRole('button', { name: 'Register client' }).click();

    // The mistake is announced, shown next to its field, and nothing typed is lost.
    await admin.getByRole('alert').getByText('Redirect URL must use https (http is allowed only for loopback hosts)').waitFor();
    const redirect = admin.getByLabel('Redirect URL');
    assert.equal(await redirect.getAttribute('aria-invalid'), 'true');
    assert.match((await redirect.getAttribute('aria-describedby'))!, /\bredirect_uri-error\b/);
    assert.equal(await admin.locator('#redirect_uri-error').textContent(), 'Redirect URL must use https (http is allowed only for loopback hosts)');
    assert.equal(await redirect.inputValue(), 'http://notes.example.com/callback');
    assert.equal(await admin.getByLabel('Name', { exact: true }).inputValue(), 'Notes <Pro> & Co');
    assert.equal(await admin.getByLabel('Confidential').isChecked(), true);
    assert.equal(await admin.getByLabel('Require PKCE').isChecked(), true);

    await redirect.fill(site.redirectUri);
    await admin.getByRole('button', { name: 'Register client' }).click();
    await admin.getByRole('heading', { name: 'Client registered' }).waitFor();
    const clientId = (await admin.locator('#client-id').textContent())!;
    const secret = (await admin.locator('#client-secret').textContent())!;
    assert.match(clientId, UUID);
    assert.match(secret, /^gcs_/);
    await admin.getByRole('button', { name: 'Copy secret' }).click();
    await admin.getByRole('status').getByText('Copied to the clipboard.').waitFor();
    assert.equal(await admin.evaluate('navigator.clipboard.readText()'), secret);

    await admin.getByRole('link', { name: 'All OAuth clients' }).click();
    const row = admin.getByRole('row', { name: /Notes <Pro> & Co/ });
    assert.match((await row.textContent())!, new RegExp(`${clientId}\\s*Copy\\s*authorization_code\\s*no\\s*client_secret_basic`));

    // alice authorizes the new client in her own browser; the application gets its tokens.
    const app = await discover(server, clientId, { secret, redirectUri: site.redirectUri });
    const authorization = await authorizationUrl(app);
    const user = await open(authorization.url.href, 'alice');
    await user.getByRole('heading', { name: 'Authorize Notes <Pro> & Co' }).waitFor();
    await user.getByText('wants to use your account alice to:').waitFor();
    await user.getByText('Read your annotations, including private ones').waitFor();
    await user.getByText('Create, edit and delete annotations as you').waitFor();
    await user.getByRole('button', { name: 'Authorize' }).click();
    await user.getByText('Back at the application.').waitFor();

    const callback = oauth.validateAuthResponse(app.as, app.client, new URL(user.url()), authorization.state);
    const response = await oauth.authorizationCodeGrantRequest(app.as, app.client, app.auth, callback, app.redirectUri, authorization.verifier, insecure);
    const tokens = await oauth.processAuthorizationCodeResponse(app.as, app.client, response);
    const me = await profile(server, tokens.access_token);
    assert.equal(me.status, 200);
    assert.equal(((await me.json()) as { username: string }).username, 'alice');
  });

  test('an administrator edits a client, gives it a new secret and deletes it', async () => {
    const { client, secret } = await server.createClient({ name: 'Old Name', confidential: true, redirectUris: [site.redirectUri] });
    const app = await discover(server, client.id, { secret, redirectUri: site.redirectUri });
    const tokens = await obtainTokens(app, new UserAgent(server.url), 'alice');

    const admin = await open(`/admin/oauthclients`, 'root');
    await admin.getByRole('link', { name: 'Old Name' }).click();
    await admin.getByLabel('Name', { exact: true }).fill('New Name');
    await admin.getByRole('button', { name: 'Save changes' }).click();
    await admin.getByRole('status').getByText('Changes saved.').waitFor();
    assert.equal(await admin.getByRole('heading', { level: 1 }).textContent(), 'Edit New Name');

    await admin.getByRole('button', { name: 'Generate a new secret' }).click();
    await admin.getByRole('heading', { name: 'New client secret' }).waitFor();
    const newSecret = (await admin.locator('#client-secret').textContent())!;
    assert.match(newSecret, /^gcs_/);
    assert.notEqual(newSecret, secret);
    const withOld = await oauth.refreshTokenGrantRequest(app.as, app.client, app.auth, tokens.refresh_token!, insecure);
    assert.equal(withOld.status, 401, 'the old secret stopped working');

    await admin.getByRole('link', { name: 'Edit this client' }).click();
    await admin.getByRole('link', { name: 'Delete this client…' }).click();
    await admin.getByRole('heading', { name: 'Delete New Name?' }).waitFor();
    assert.equal((await profile(server, tokens.access_token)).status, 200, 'the confirmation page changes nothing');
    await admin.getByRole('button', { name: 'Delete client' }).click();
    await admin.getByRole('status').getByText('The client was deleted and everything issued to it was revoked.').waitFor();
    assert.equal(await admin.getByRole('link', { name: 'New Name' }).count(), 0);
    assert.equal((await profile(server, tokens.access_token)).status, 401, 'its tokens are revoked');
  });

  test('an administrator finds, creates, promotes and disables users', async () => {
    const { client } = await server.createClient({ name: 'Reader' });
    await server.createUser('carol');
    const carolsTokens = await obtainTokens(await discover(server, client.id), new UserAgent(server.url), 'carol');

    const admin = await open('/admin/users', 'root');
    await admin.getByLabel('Search users').fill('caro');
    await follow(admin, admin.getByRole('button', { name: 'Search' }));
    assert.deepEqual(await admin.locator('tbody tr td:first-child').allTextContents(), ['carol']);

    await admin.getByLabel('Username').fill('carol');
    await admin.getByLabel('Email', { exact: true }).fill('dave@example.com');
    await admin.getByLabel('Password', { exact: true }).fill('a long enough password');
    await admin.getByRole('button', { name: 'Create user' }).click();
    await admin.getByRole('alert').getByText('The user was not created.').waitFor();
    assert.equal(await admin.locator('#username-error').textContent(), 'Username "carol" is taken');
    assert.equal(await admin.getByLabel('Email', { exact: true }).inputValue(), 'dave@example.com');

    await admin.getByLabel('Username').fill('dave');
    await admin.getByLabel('Password', { exact: true }).fill('a long enough password');
    await admin.getByRole('button', { name: 'Create user' }).click();
    await admin.getByRole('status').getByText('User created.').waitFor();
    const dave = admin.getByRole('row', { name: /dave@example\.com/ });
    await dave.getByRole('button', { name: 'Make administrator' }).click();
    await admin.getByRole('status').getByText('User promoted to administrator.').waitFor();
    assert.match((await admin.getByRole('row', { name: /dave@example\.com/ }).textContent())!, /administrator/);
    assert.equal(await admin.getByRole('row', { name: /root/ }).getByRole('button', { name: 'Disable' }).count(), 0, 'no way to lock oneself out');

    await admin
      .getByRole('row', { name: /carol@example\.com/ })
      .getByRole('button', { name: 'Disable' })
      .click();
    await admin.getByRole('status').getByText('User disabled').waitFor();
    assert.match((await admin.getByRole('row', { name: /carol@example\.com/ }).textContent())!, /disabled/);
    assert.equal((await profile(server, carolsTokens.access_token)).status, 401, "the disabled user's tokens are revoked");
  });

  test('only administrators reach /admin', async () => {
    const anonymous = await browser.newContext();
    contexts.push(anonymous);
    const visitor = await anonymous.newPage();
    await visitor.goto(new URL('/admin/users', server.url).href);
    assert.equal(new URL(visitor.url()).pathname, '/login', 'a visitor is asked to log in first');
    assert.equal(new URL(visitor.url()).searchParams.get('next'), '/admin/users');

    await logIn(visitor, 'alice');
    await visitor.getByRole('heading', { name: 'Administrators only' }).waitFor();
    assert.equal(await visitor.getByRole('link', { name: 'OAuth clients' }).count(), 0, 'no admin links for a user');
    const response = await visitor.goto(new URL('/admin/oauthclients', server.url).href);
    assert.equal(response!.status(), 403);
    await visitor.getByText('You are logged in as alice, which is not an administrator account.').waitFor();
  });
});
