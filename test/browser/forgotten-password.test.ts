/**
 * Forgotten passwords and one's own email address in Chromium, on a phone-sized screen (SPEC
 * §4.16): from the login page to the mail a real SMTP server receives, the link, the new
 * password and the next login; and verifying one's address from /account/security. Nothing
 * overflows the screen sideways.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Page } from 'playwright-core';
import { sqlite } from '../support/backends.ts';
import { browserOptions, launchBrowser, logIn, type TestBrowser } from '../support/browser.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { linkIn, startSmtpServer, type TestSmtpServer } from '../support/smtp.ts';

const PHONE = { width: 390, height: 844 };
const NEW_PASSWORD = 'a new and rather long passphrase';

describe('forgotten passwords and email addresses in a browser', browserOptions(), () => {
  let server: TestServer;
  let browser: TestBrowser;
  let smtp: TestSmtpServer;

  before(async () => {
    smtp = await startSmtpServer();
    [server, browser] = await Promise.all([startServer(sqlite, { SMTP_URL: smtp.url }), launchBrowser()]);
  });
  after(async () => {
    await browser?.close();
    await server?.close();
    await smtp?.close();
  });

  // (A string: this project's types have no DOM.)
  const fitsSideways = async (page: Page) => assert.ok(await page.evaluate('document.documentElement.scrollWidth <= window.innerWidth'), page.url());

  test('Forgot your password? → the mail → a new password → logging in with it', async () => {
    await server.createUser('alice');
    const context = await browser.newContext({ viewport: PHONE });
    try {
      const page = await context.newPage();
      await page.goto(new URL('/login', server.url).href);
      await page.getByRole('link', { name: 'Forgot your password?' }).click();
      await page.getByRole('heading', { name: 'Forgot your password?' }).waitFor();
      await fitsSideways(page);
      await page.getByLabel('Email address').fill('alice@example.com');
      await page.getByRole('button', { name: 'Send me a link' }).click();
      await page.getByRole('status').getByText('a link to choose a new password is on its way').waitFor();

      const link = linkIn(await smtp.next('alice@example.com'), server.url, '/password/reset');
      await page.goto(link);
      await fitsSideways(page);
      await page.getByLabel('New password').fill('password1');
      await page.getByLabel('Repeat the password').fill('password1');
      await page.getByRole('button', { name: 'Set the new password' }).click();
      await page.getByText('Password is one of the most common passwords: choose another').waitFor();
      await page.getByLabel('New password').fill(NEW_PASSWORD);
      await page.getByLabel('Repeat the password').fill(NEW_PASSWORD);
      await page.getByRole('button', { name: 'Set the new password' }).click();
      await page.getByRole('status').getByText('Your password has been changed').waitFor();
      await page.getByRole('link', { name: 'Log in with your new password' }).click();
      await logIn(page, 'alice', NEW_PASSWORD);
      await page.waitForURL((url) => url.pathname === '/');
    } finally {
      await context.close();
    }
  });

  test('Verify your email on the security page', async () => {
    await server.createUser('bob');
    const context = await browser.newContext({ viewport: PHONE });
    try {
      const page = await context.newPage();
      await page.goto(new URL('/account/security', server.url).href);
      await logIn(page, 'bob');
      await page.getByRole('heading', { name: 'Email address' }).waitFor();
      await fitsSideways(page);
      await page.getByRole('button', { name: 'Verify your email' }).click();
      await page.getByRole('status').getByText('A link to verify your address is on its way').waitFor();
      const link = linkIn(await smtp.next('bob@example.com'), server.url, '/email/verify');
      await page.goto(link);
      await page.getByRole('button', { name: 'Verify this address' }).click();
      await page.getByRole('status').getByText('is verified').waitFor();
      await page.getByRole('link', { name: 'Go to your account' }).click();
      await page.getByText('bob@example.com — verified').waitFor();
    } finally {
      await context.close();
    }
  });
});
