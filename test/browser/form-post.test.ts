/**
 * `response_mode=form_post` (SPEC §4.1) in Chromium: the page Gatehouse serves posts the
 * authorization response to the application's redirect URL by itself, under the pages'
 * CSP (no inline script), and with scripts off the person's click on its button does it.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as client from 'openid-client';
import { sqlite } from '../support/backends.ts';
import { browserOptions, launchBrowser, logIn, startClientSite, type ClientSite, type TestBrowser } from '../support/browser.ts';
import { startServer, type TestServer } from '../support/server.ts';

describe('response_mode=form_post in a browser', browserOptions(), () => {
  let server: TestServer;
  let site: ClientSite;
  let browser: TestBrowser;
  let rp: client.Configuration;

  before(async () => {
    [server, site, browser] = await Promise.all([startServer(sqlite), startClientSite(), launchBrowser()]);
    await server.createUser('alice');
    const { client: registered } = await server.createClient({ name: 'Form Post Wiki', redirectUris: [site.redirectUri], requirePkce: true });
    rp = await client.discovery(new URL(server.url), registered.id, { redirect_uris: [site.redirectUri] }, client.None(), {
      execute: [client.allowInsecureRequests],
    });
  });
  after(async () => {
    await browser?.close();
    await site?.close();
    await server?.close();
  });

  /** Signs in through the browser; returns what the application's redirect URL received, and the checks to exchange it with. */
  async function signIn(javaScriptEnabled: boolean) {
    const verifier = client.randomPKCECodeVerifier();
    const nonce = client.randomNonce();
    const state = client.randomState();
    const url = client.buildAuthorizationUrl(rp, {
      redirect_uri: site.redirectUri,
      scope: 'openid profile',
      response_mode: 'form_post',
      prompt: 'consent', // the consent page each time: its Authorize button leads to the form post
      code_challenge: await client.calculatePKCECodeChallenge(verifier),
      code_challenge_method: 'S256',
      nonce,
      state,
    });
    const context = await browser.browser.newContext({ javaScriptEnabled });
    const errors: string[] = [];
    const page = await context.newPage();
    page.on('pageerror', (error) => errors.push(error.message));
    page.on('console', (message) => /Content Security Policy|Refused to/.test(message.text()) && errors.push(message.text()));
    const before = site.callbacks.length;
    try {
      await page.goto(url.href);
      await logIn(page, 'alice');
      await page.getByRole('button', { name: 'Authorize' }).click();
      if (!javaScriptEnabled) await page.getByRole('button', { name: 'Continue' }).click();
      await page.locator('#done').waitFor();
      assert.deepEqual(errors, [], 'no CSP violation or script error');
      assert.equal(site.callbacks.length, before + 1);
      return { received: site.callbacks.at(-1)!, checks: { pkceCodeVerifier: verifier, expectedNonce: nonce, expectedState: state } };
    } finally {
      await context.close();
    }
  }

  test('the page posts code, state and iss to the redirect URL by itself; the application exchanges them', async () => {
    const { received, checks } = await signIn(true);
    assert.deepEqual([...received.keys()].sort(), ['code', 'iss', 'state']);
    const callback = new URL(site.redirectUri);
    callback.search = received.toString();
    const tokens = await client.authorizationCodeGrant(rp, callback, checks);
    assert.equal(tokens.claims()!.preferred_username, 'alice');
  });

  test('with scripts off, the Continue button posts it', async () => {
    const { received } = await signIn(false);
    assert.match(received.get('code')!, /^gac_/);
  });
});
