/**
 * The popup flow (SPEC §4.1) in Chromium: a single-page application on another origin opens
 * the authorization in a popup and listens for the message the popup posts back.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as oauth from 'oauth4webapi';
import type { Page } from 'playwright-core';
import { sqlite } from '../support/backends.ts';
import { browserOptions, launchBrowser, logIn, startClientSite, type ClientSite, type TestBrowser } from '../support/browser.ts';
import { authorizationUrl, discover, insecure, profile, type App } from '../support/oauth-client.ts';
import { startServer, type TestServer } from '../support/server.ts';

interface Received {
  origin: string;
  data: Record<string, string>;
}

describe('the popup flow in a browser', browserOptions(), () => {
  let server: TestServer;
  let site: ClientSite;
  let browser: TestBrowser;
  let app: App;

  before(async () => {
    [server, site, browser] = await Promise.all([startServer(sqlite), startClientSite(), launchBrowser()]);
    await server.createUser('alice');
    await server.createUser('bob');
    const { client } = await server.createClient({ name: 'Popup Notes', redirectUris: [site.redirectUri], requirePkce: true });
    app = await discover(server, client.id, { redirectUri: site.redirectUri });
  });
  after(async () => {
    await browser?.close();
    await site?.close();
    await server?.close();
  });

  /** Opens the application's page in a fresh browser and clicks its sign-in button. */
  async function openPopup(params: Record<string, string> = {}) {
    const authorization = await authorizationUrl(app, { response_mode: 'web_message', ...params });
    const context = await browser.newContext();
    const page = await context.newPage();
    await page.goto(site.popupOpener(authorization.url));
    const [popup] = await Promise.all([page.waitForEvent('popup'), page.getByRole('button', { name: 'Sign in with Gatehouse' }).click()]);
    await popup.waitForLoadState();
    return { authorization, context, page, popup };
  }

  async function firstMessage(page: Page): Promise<Received> {
    await page.waitForFunction('window.received.length > 0');
    const received = (await page.evaluate('window.received')) as Received[];
    return received[0]!;
  }

  test('approving in the popup posts the code to the opener, which exchanges it', async () => {
    const { authorization, context, page, popup } = await openPopup();
    try {
      // The login page fits the popup and says which application is asking.
      assert.equal(await popup.locator('body').getAttribute('class'), 'popup');
      await popup.getByText('to continue to Popup Notes').waitFor();
      await logIn(popup, 'alice');
      await popup.getByRole('heading', { name: 'Authorize Popup Notes' }).waitFor();
      await popup.getByRole('button', { name: 'Authorize' }).click();

      const message = await firstMessage(page);
      assert.equal(message.origin, server.url, 'the message comes from Gatehouse');
      assert.equal(message.data.type, 'authorization_response');
      assert.equal(message.data.state, authorization.state);
      assert.match(message.data.code!, /^gac_/);
      if (!popup.isClosed()) await popup.waitForEvent('close'); // the popup closes itself

      const params = new URLSearchParams({ code: message.data.code!, state: message.data.state!, iss: server.url });
      const callback = oauth.validateAuthResponse(app.as, app.client, params, authorization.state);
      const response = await oauth.authorizationCodeGrantRequest(app.as, app.client, app.auth, callback, app.redirectUri, authorization.verifier, insecure);
      const tokens = await oauth.processAuthorizationCodeResponse(app.as, app.client, response);
      assert.equal((await profile(server, tokens.access_token)).status, 200);
      assert.equal(site.callbacks.length, 0, 'nothing was redirected to the callback');
    } finally {
      await context.close();
    }
  });

  test('Deny posts authorization_canceled', async () => {
    const { authorization, context, page, popup } = await openPopup({ prompt: 'consent' });
    try {
      await logIn(popup, 'alice');
      await popup.getByRole('button', { name: 'Deny' }).click();
      const message = await firstMessage(page);
      assert.equal(message.origin, server.url);
      assert.deepEqual(message.data, { type: 'authorization_canceled', state: authorization.state });
    } finally {
      await context.close();
    }
  });

  test('closing the popup on the consent page posts authorization_canceled', async () => {
    const { authorization, context, page, popup } = await openPopup({ prompt: 'consent' });
    try {
      await logIn(popup, 'alice');
      await popup.getByRole('button', { name: 'Authorize' }).waitFor();
      await popup.close({ runBeforeUnload: true }); // as when the person closes the window
      const message = await firstMessage(page);
      assert.equal(message.origin, server.url);
      assert.deepEqual(message.data, { type: 'authorization_canceled', state: authorization.state });
    } finally {
      await context.close();
    }
  });

  test('closing the popup on the login page posts authorization_canceled', async () => {
    const { authorization, context, page, popup } = await openPopup();
    try {
      await popup.getByRole('button', { name: 'Log in', exact: true }).waitFor();
      await popup.close({ runBeforeUnload: true });
      const message = await firstMessage(page);
      assert.equal(message.origin, server.url);
      assert.deepEqual(message.data, { type: 'authorization_canceled', state: authorization.state });
    } finally {
      await context.close();
    }
  });

  test('switching account in the popup is not a cancellation', async () => {
    const { authorization, context, page, popup } = await openPopup({ prompt: 'consent' });
    try {
      await logIn(popup, 'alice');
      await popup.getByRole('button', { name: 'Use another account' }).click();
      await logIn(popup, 'bob');
      await popup.getByText('wants to use your account bob').waitFor();
      await popup.getByRole('button', { name: 'Authorize' }).click();
      const message = await firstMessage(page);
      assert.equal(message.data.type, 'authorization_response', 'the first message is the answer, not a cancellation');
      assert.equal(message.data.state, authorization.state);
    } finally {
      await context.close();
    }
  });
});
