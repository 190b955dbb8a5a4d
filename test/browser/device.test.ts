/** The /device pages in Chromium: a person follows a device's link, logs in, checks the code and authorizes. */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as oauth from 'oauth4webapi';
import { sqlite } from '../support/backends.ts';
import { browserOptions, launchBrowser, logIn, type TestBrowser } from '../support/browser.ts';
import { deviceApp, pollRequest, requestCodes } from '../support/device.ts';
import { profile, type App } from '../support/oauth-client.ts';
import { startServer, type TestServer } from '../support/server.ts';

describe('the /device pages in a browser', browserOptions(), () => {
  let server: TestServer;
  let browser: TestBrowser;
  let app: App;

  before(async () => {
    [server, browser] = await Promise.all([startServer(sqlite), launchBrowser()]);
    await server.createUser('alice');
    app = await deviceApp(server);
  });
  after(async () => {
    await browser?.close();
    await server?.close();
  });

  test('log in, the code is filled in, the warning is shown, Authorize, back to the device', async () => {
    const codes = await requestCodes(app);
    const context = await browser.newContext();
    try {
      const page = await context.newPage();
      await page.goto(codes.verification_uri_complete!);
      await logIn(page, 'alice');
      const field = page.getByLabel('Code');
      assert.equal(await field.inputValue(), codes.user_code);
      await page.getByRole('button', { name: 'Continue' }).click();
      await page.getByRole('heading', { name: 'Authorize Kitchen TV' }).waitFor();
      await page.getByText('Only continue if you started this on a device of your own').waitFor();
      assert.match((await page.locator('.warning').textContent())!, new RegExp(codes.user_code));
      // The code the person compares with the device's is the largest text on the page.
      // (A string: this project's types have no DOM.)
      const sizes = (await page.evaluate(`(() => {
        const size = (element) => parseFloat(getComputedStyle(element).fontSize);
        const code = document.querySelector('code.user-code');
        const texts = [...document.body.querySelectorAll('*')].filter(
          (element) => element !== code && [...element.childNodes].some((node) => node.nodeType === Node.TEXT_NODE && node.textContent.trim() !== ''),
        );
        return { code: code.textContent, codeSize: size(code), largestElse: Math.max(...texts.map(size)) };
      })()`)) as { code: string; codeSize: number; largestElse: number };
      assert.equal(sizes.code, codes.user_code);
      assert.ok(sizes.codeSize > sizes.largestElse, `the code is ${sizes.codeSize}px, other text up to ${sizes.largestElse}px`);
      await page.getByRole('button', { name: 'Authorize' }).click();
      await page.getByRole('heading', { name: 'Device connected' }).waitFor();
      await page.getByText('Return to your device').waitFor();
    } finally {
      await context.close();
    }
    server.advance(5);
    const tokens = await oauth.processDeviceCodeResponse(app.as, app.client, await pollRequest(app, codes.device_code));
    assert.equal((await profile(server, tokens.access_token)).status, 200);
  });

  test('a wrong code shows an error on the form, next to the field', async () => {
    const context = await browser.newContext();
    try {
      const page = await context.newPage();
      await page.goto(new URL('/device', server.url).href);
      await logIn(page, 'alice');
      await page.getByLabel('Code').fill('bcdf ghjk');
      await page.getByRole('button', { name: 'Continue' }).click();
      await page.getByRole('alert').getByText('That code is not valid').waitFor();
      assert.equal(await page.getByLabel('Code').getAttribute('aria-invalid'), 'true');
    } finally {
      await context.close();
    }
  });
});
