/**
 * First start (SPEC §1): `gatehouse serve` on an empty database prints a one-time setup
 * link, and a person creates the first administrator with it in Chromium.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { browserOptions, launchBrowser, type TestBrowser } from '../support/browser.ts';
import { freePort } from '../support/ports.ts';

/** Starts `gatehouse serve` on a fresh SQLite database; resolves with what it printed on stderr once listening. */
async function serve(): Promise<{ process: ChildProcess; url: string; stderr: () => string; directory: string }> {
  const directory = mkdtempSync(join(tmpdir(), 'gatehouse-setup-'));
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const { REDIS_URL: _ignored, ...env } = process.env;
  const child = spawn(process.execPath, ['bin/gatehouse.js', 'serve'], {
    env: { ...env, DATABASE_URL: `sqlite:${join(directory, 'gatehouse.db')}`, PORT: String(port), HOST: '127.0.0.1', PUBLIC_URL: url, LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  // Up to 90 s (starting has taken over 20 on a loaded machine); one that does not come up is stopped.
  for (const deadline = Date.now() + 90_000; !/\/setup\?token=\S+/.test(stderr); await new Promise((resolve) => setTimeout(resolve, 50))) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill();
      throw new Error(`serve did not print a setup link:\n${stderr}`);
    }
  }
  return { process: child, url, stderr: () => stderr, directory };
}

describe('first-run setup in a browser', browserOptions(), () => {
  let browser: TestBrowser;
  let server: Awaited<ReturnType<typeof serve>>;

  before(async () => {
    [browser, server] = await Promise.all([launchBrowser(), serve()]);
  });
  after(async () => {
    await browser?.close();
    if (server) {
      server.process.kill('SIGTERM');
      if (server.process.exitCode === null) await once(server.process, 'exit');
      rmSync(server.directory, { recursive: true, force: true });
    }
  });

  test('the printed link creates the first administrator, once', async () => {
    const printed = server.stderr();
    assert.match(printed, /No administrator exists yet\. Open this link within 60 minutes/);
    assert.match(printed, /gatehouse user create <username> --email <email> --admin/);
    const link = new RegExp(`${server.url}/setup\\?token=gsu_[A-Za-z0-9_-]{43}`).exec(printed)?.[0];
    assert.ok(link, 'the link points at PUBLIC_URL and carries a setup token');

    const context = await browser.newContext();
    try {
      const page = await context.newPage();
      await page.goto(link);
      await page.getByRole('heading', { name: 'Set up Gatehouse' }).waitFor();
      await page.getByLabel('Username').fill('root');
      await page.getByLabel('Email').fill('root@example.com');
      await page.getByLabel('Password', { exact: true }).fill('correct horse battery staple');
      await page.getByLabel('Repeat the password').fill('correct horse battery stapel');
      await page.getByRole('button', { name: 'Create administrator' }).click();

      await page.getByRole('alert').getByText('The two passwords differ').waitFor();
      assert.equal(await page.getByLabel('Repeat the password').getAttribute('aria-describedby'), 'password_again-error');
      assert.equal(await page.getByLabel('Username').inputValue(), 'root');
      await page.getByLabel('Password', { exact: true }).fill('correct horse battery staple');
      await page.getByLabel('Repeat the password').fill('correct horse battery staple');
      await page.getByRole('button', { name: 'Create administrator' }).click();

      // The new administrator is logged in and lands in the admin console.
      await page.getByRole('heading', { name: 'OAuth clients' }).waitFor();
      assert.equal(new URL(page.url()).pathname, '/admin/oauthclients');
      await page.getByRole('banner').getByText('root').waitFor();

      const second = await page.goto(link);
      assert.equal(second!.status(), 410);
      await page.getByRole('heading', { name: 'Setup link not valid' }).waitFor();
    } finally {
      await context.close();
    }
  });
});
