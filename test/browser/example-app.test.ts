/**
 * The example application (examples/webapp) against a real Gatehouse, in Chromium. It is
 * started as `npm run example` starts it and registers itself through the command line;
 * then people sign in by redirect and in a popup, the access token expires (short
 * ACCESS_TOKEN_TTL) so the real-time connection is closed with 4001 and comes back after a
 * refresh, signing out revokes the tokens, and **Revoke access** signs the application out.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { BrowserContext, Page } from 'playwright-core';
import { listClients } from '../../src/store/clients.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { browserOptions, launchBrowser, logIn, type TestBrowser } from '../support/browser.ts';
import { startExample, stopExample, type Example } from '../support/examples.ts';
import { postForm } from '../support/oauth-client.ts';
import { startServer, type TestServer } from '../support/server.ts';

/** Short enough to expire during a test, long enough to finish a sign-in on a slow machine. */
const ACCESS_TOKEN_TTL = 12;

interface Tokens {
  access_token: string;
  refresh_token: string;
}

/** What the application holds right now (it keeps its tokens in sessionStorage). */
async function heldTokens(page: Page): Promise<Tokens> {
  return JSON.parse((await page.evaluate(() => sessionStorage.getItem('tokens')))!) as Tokens;
}

async function log(page: Page): Promise<string[]> {
  return page.locator('#log li').allTextContents();
}

for (const backend of BACKENDS) {
  describe(`the example web application (${backend.name})`, { ...backendOptions(backend), ...browserOptions() }, () => {
    let server: TestServer;
    let example: Example;
    let browser: TestBrowser;
    let clientId: string;

    before(async () => {
      [server, browser] = await Promise.all([startServer(backend, { ACCESS_TOKEN_TTL: String(ACCESS_TOKEN_TTL) }), launchBrowser()]);
      await server.createUser('alice');
      await server.createUser('bob');
      example = await startExample(server, 'webapp', '/config.json');
      clientId = (JSON.parse(readFileSync(join(example.dataDir, 'client.json'), 'utf8')) as { client_id: string }).client_id;
    });
    after(async () => {
      await browser?.close();
      if (example) await stopExample(example);
      await server?.close();
    });

    /** The example's page in a fresh browser (its own cookies and storage). */
    async function openExample(): Promise<{ context: BrowserContext; page: Page }> {
      const context = await browser.newContext();
      const page = await context.newPage();
      await page.goto(example.origin);
      await page.getByRole('status').getByText('Not signed in.').waitFor();
      return { context, page };
    }

    async function profileStatus(accessToken: string): Promise<number> {
      return (await fetch(new URL('/api/profile', server.url), { headers: { authorization: `Bearer ${accessToken}` } })).status;
    }

    test('it registered itself through the command line, as a public client that must use PKCE', async () => {
      const clients = (await listClients(server.store.db, {}, 1000)).rows;
      assert.equal(clients.length, 1);
      const registered = clients[0]!;
      assert.equal(registered.id, clientId);
      assert.equal(registered.name, 'Example web app');
      assert.equal(registered.redirect_uris, JSON.stringify([`${example.origin}/callback`]));
      assert.equal(registered.secret_hash, null);
      assert.equal(registered.require_pkce, 1);
      assert.equal(registered.scopes, 'annotation:read');
    });

    test('redirect flow: sign in, refresh when the token expires, keep the real-time connection, sign out', async () => {
      const { context, page } = await openExample();
      try {
        await page.getByRole('button', { name: 'Sign in with Gatehouse' }).click();
        await logIn(page, 'alice');
        await page.getByRole('heading', { name: 'Authorize Example web app' }).waitFor();
        await page.getByRole('button', { name: 'Authorize' }).click();

        await page.getByRole('status').getByText('Signed in as alice.').waitFor();
        assert.equal(new URL(page.url()).pathname, '/', 'the code is gone from the address bar');
        const userid = `acct:alice@${new URL(server.url).hostname}`;
        await page.locator('#whoami').getByText(userid).waitFor();
        assert.equal(await page.locator('#socket').textContent(), 'connected');
        assert.match((await page.locator('#profile').textContent())!, /"scopes": \[\s*"annotation:read"\s*\]/);
        const first = await heldTokens(page);
        assert.equal(await profileStatus(first.access_token), 200);

        // The token expires: Gatehouse closes the socket with 4001, the app refreshes and reconnects.
        await page
          .locator('#refreshes')
          .getByText('1')
          .waitFor({ timeout: (ACCESS_TOKEN_TTL + 10) * 1000 });
        await page.locator('#socket').getByText('connected').waitFor();
        const events = await log(page);
        const closedAt = events.findIndex((line) => line.endsWith('The real-time connection closed with code 4001.'));
        assert.ok(closedAt > 0, events.join('\n'));
        assert.deepEqual(
          events.slice(closedAt + 1, closedAt + 3).map((line) => line.replace(/^\S+ (AM |PM )?/, '')),
          ['Refreshed the tokens.', 'Connected to the real-time API.'],
        );
        const second = await heldTokens(page);
        assert.notEqual(second.access_token, first.access_token);
        assert.notEqual(second.refresh_token, first.refresh_token);
        assert.equal(await profileStatus(second.access_token), 200);
        await page.getByRole('button', { name: 'Call /api/profile' }).click();
        await page.locator('#log li').getByText('Called /api/profile.').waitFor();

        const held = await heldTokens(page);
        await page.getByRole('button', { name: 'Sign out' }).click();
        await page.getByRole('status').getByText('Signed out.').waitFor();
        await page.getByRole('button', { name: 'Sign in with Gatehouse' }).waitFor();
        assert.equal(await page.evaluate(() => sessionStorage.getItem('tokens')), null);
        // Revoking the refresh token took the whole grant: every token the app ever held is dead.
        for (const accessToken of [first.access_token, second.access_token, held.access_token]) assert.equal(await profileStatus(accessToken), 401);
        const refreshed = await postForm(server, '/api/token', { grant_type: 'refresh_token', refresh_token: held.refresh_token, client_id: clientId });
        assert.equal(refreshed.status, 400);
        assert.equal(((await refreshed.json()) as { error: string }).error, 'invalid_grant');
      } finally {
        await context.close();
      }
    });

    test('popup flow: Deny cancels, Authorize signs in; Revoke access at Gatehouse signs the app out', async () => {
      const { context, page } = await openExample();
      try {
        const [denying] = await Promise.all([page.waitForEvent('popup'), page.getByRole('button', { name: 'Sign in with a popup' }).click()]);
        await logIn(denying, 'bob');
        await denying.getByRole('button', { name: 'Deny' }).click();
        await page.getByRole('status').getByText('Sign-in canceled.').waitFor();

        const [popup] = await Promise.all([page.waitForEvent('popup'), page.getByRole('button', { name: 'Sign in with a popup' }).click()]);
        await popup.getByRole('heading', { name: 'Authorize Example web app' }).waitFor(); // still logged in at Gatehouse
        await popup.getByRole('button', { name: 'Authorize' }).click();
        await page.getByRole('status').getByText('Signed in as bob.').waitFor();
        await page
          .locator('#whoami')
          .getByText(`acct:bob@${new URL(server.url).hostname}`)
          .waitFor();
        assert.equal(page.url(), `${example.origin}/`, 'the page never left the application');
        assert.equal((await log(page)).filter((line) => line.endsWith('Exchanged the authorization code for tokens.')).length, 1);
        const held = await heldTokens(page);

        // Bob takes the access back on Gatehouse's own page, in another tab.
        const account = await context.newPage();
        await account.goto(new URL('/account/applications', server.url).href);
        await account.getByRole('button', { name: 'Revoke access' }).click();
        await account.getByText('Access removed').waitFor();
        await page.getByRole('status').getByText('Your access was revoked: sign in again.').waitFor();
        await page.getByRole('button', { name: 'Sign in with a popup' }).waitFor();
        assert.equal(await profileStatus(held.access_token), 401);
      } finally {
        await context.close();
      }
    });
  });
}
