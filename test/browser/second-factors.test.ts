/**
 * The authenticator app and recovery codes in Chromium (SPEC §4.12), driven by the pages'
 * labels as a person would: set up an app at /account/security from the QR code's secret
 * shown as text (codes computed with otpauth, as the app would), generate recovery codes,
 * log out, log in with the password and a code; a recovery code works once; the same app
 * code twice is refused; an over-long code gets a clear message.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Page } from 'playwright-core';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { browserOptions, launchBrowser, logIn, type TestBrowser } from '../support/browser.ts';
import { totpCode } from '../support/second-factors.ts';
import { startServer, type TestServer } from '../support/server.ts';

for (const backend of BACKENDS) {
  describe(`authenticator app and recovery codes in a browser (${backend.name})`, { ...backendOptions(backend), ...browserOptions() }, () => {
    let server: TestServer;
    let browser: TestBrowser;
    let page: Page;
    let secret: string;
    let recoveryCodes: string[];
    let offset = 0;
    const serverNow = () => Date.now() + offset;
    /** Moves the server's clock on: each login gets time steps no earlier one used. */
    const nextSteps = () => {
      server.advance(90);
      offset += 90_000;
    };

    before(async () => {
      server = await startServer(backend, { LOG_LEVEL: 'warn' });
      await server.createUser('alice');
      browser = await launchBrowser();
      page = await (await browser.newContext()).newPage();
    });
    after(async () => {
      await browser?.close();
      await server?.close();
    });

    async function logOut() {
      await page.getByRole('button', { name: 'Log out' }).click();
      await page.getByLabel('Username or email').waitFor();
    }

    /** Password, then the code: ends on the page after the login, or on the code page with its error. */
    async function logInWithCode(code: string) {
      await logIn(page, 'alice');
      await page.getByRole('heading', { name: 'Enter a code' }).waitFor();
      await page.getByLabel('Code', { exact: true }).fill(code);
      await page.getByRole('button', { name: 'Verify' }).click();
    }

    test('a person sets up an authenticator app from its secret and confirms it with a code', async () => {
      await page.goto(new URL('/login?next=%2Faccount%2Fsecurity', server.url).href);
      await logIn(page, 'alice');
      await page.getByRole('heading', { name: 'Security', level: 1 }).waitFor();
      await page.getByRole('button', { name: 'Set up an authenticator app' }).click();
      await page.getByRole('heading', { name: 'Set up an authenticator app' }).waitFor();
      assert.equal(
        await page
          .getByRole('img', { name: /QR code/ })
          .locator('svg')
          .count(),
        1,
        'the QR code is an SVG',
      );
      secret = (await page.locator('#totp-secret').textContent())!.replace(/\s/g, '');
      assert.match(secret, /^[A-Z2-7]{32}$/);
      await page.getByLabel('Code from the app').fill('000000' === totpCode(secret, serverNow()) ? '111111' : '000000');
      await page.getByRole('button', { name: 'Confirm' }).click();
      await page.getByRole('alert').filter({ hasText: 'That code is not right' }).waitFor();
      await page.getByLabel('Code from the app').fill(totpCode(secret, serverNow()));
      await page.getByRole('button', { name: 'Confirm' }).click();
      await page.getByRole('status').filter({ hasText: 'Authenticator app set up' }).waitFor();
      await page.getByRole('button', { name: 'Remove' }).waitFor();
      assert.equal(await page.getByRole('button', { name: 'Set up an authenticator app' }).count(), 0, 'a second app is not offered');
    });

    test('ten recovery codes, shown once', async () => {
      await page.getByRole('button', { name: 'Generate recovery codes' }).click();
      await page.getByRole('heading', { name: 'Your recovery codes' }).waitFor();
      recoveryCodes = (await page.getByRole('list', { name: 'Recovery codes' }).getByRole('listitem').allTextContents()).map((c) => c.trim());
      assert.equal(recoveryCodes.length, 10);
      await page.getByRole('link', { name: /back to your security page/ }).click();
      assert.match((await page.locator('#recovery-heading + p').textContent())!, /You have 10 unused/);
    });

    test('log out; the password alone no longer logs in; password and code do', async () => {
      await logOut();
      nextSteps();
      await logIn(page, 'alice');
      await page.getByRole('heading', { name: 'Enter a code' }).waitFor();
      await page.goto(new URL('/account/applications', server.url).href);
      await page.getByLabel('Username or email').waitFor(); // nothing works before the second step
      const code = totpCode(secret, serverNow());
      await logInWithCode(code);
      await page.getByRole('button', { name: 'Log out' }).waitFor();

      await logOut();
      await logInWithCode(code);
      await page.getByRole('alert').filter({ hasText: 'not right, or was used already' }).waitFor();
      assert.equal(await page.getByRole('button', { name: 'Log out' }).count(), 0, 'the same code twice is refused');
      await page.getByLabel('Code', { exact: true }).fill('9'.repeat(80));
      await page.getByRole('button', { name: 'Verify' }).click();
      // The field holds at most 64 characters; what the browser sent is refused by the format.
      await page.getByRole('alert').waitFor();
      assert.equal(await page.getByRole('button', { name: 'Log out' }).count(), 0);
    });

    test('a recovery code logs in once', async () => {
      await page.goto(new URL('/login', server.url).href);
      await logInWithCode(recoveryCodes[0]!);
      await page.getByRole('button', { name: 'Log out' }).waitFor();
      await logOut();
      await logInWithCode(recoveryCodes[0]!);
      await page.getByRole('alert').filter({ hasText: 'not right, or was used already' }).waitFor();
      await page.getByLabel('Code', { exact: true }).fill(recoveryCodes[1]!);
      await page.getByRole('button', { name: 'Verify' }).click();
      await page.getByRole('button', { name: 'Log out' }).waitFor();
    });

    test('removing the app: the password alone logs in again', async () => {
      await page.goto(new URL('/account/security', server.url).href);
      await page.getByRole('button', { name: 'Remove' }).click();
      await page.getByRole('status').filter({ hasText: 'Authenticator app removed' }).waitFor();
      await page.getByRole('button', { name: 'Set up an authenticator app' }).waitFor();
      await logOut();
      await logIn(page, 'alice');
      await page.getByRole('button', { name: 'Log out' }).waitFor();
    });
  });
}
