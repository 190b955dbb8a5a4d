/**
 * The OpenID Connect example (examples/oidc-webapp: Express and openid-client) against a real
 * Gatehouse, in Chromium. It is started as `npm run example:oidc` starts it and registers
 * itself through the command line; a person signs in and sees the ID token's claims and
 * userinfo, signs out through Gatehouse, and logging out at Gatehouse signs the app out too
 * (back-channel logout).
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { SignJWT, generateKeyPair } from 'jose';
import type { BrowserContext, Page } from 'playwright-core';
import { listClients } from '../../src/store/clients.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { browserOptions, launchBrowser, logIn, type TestBrowser } from '../support/browser.ts';
import { startExample, stopExample, type Example } from '../support/examples.ts';
import { databaseUrl, gatehouse } from '../support/processes.ts';
import { startServer, type TestServer } from '../support/server.ts';

/** Waits until the example has printed `line` (at most 30 seconds: delivery is retried with back-off). */
async function printed(example: Example, line: string): Promise<void> {
  for (let waited = 0; !example.output.join('').includes(line); waited += 100) {
    if (waited > 30_000) throw new Error(`the example never printed "${line}": ${example.output.join('')}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

for (const backend of BACKENDS) {
  describe(`the OpenID Connect example application (${backend.name})`, { ...backendOptions(backend), ...browserOptions() }, () => {
    let server: TestServer;
    let example: Example;
    let browser: TestBrowser;
    let clientId: string;

    before(async () => {
      [server, browser] = await Promise.all([startServer(backend), launchBrowser()]);
      await server.createUser('alice');
      // What an administrator would set up for the claims to show (SPEC §2).
      const env = { DATABASE_URL: databaseUrl(server.config) };
      for (const args of [
        ['user', 'update', 'alice', '--name', 'Alice Liddell', '--email-verified'],
        ['group', 'create', 'staff'],
        ['group', 'add', 'staff', 'alice'],
      ]) {
        const run = await gatehouse(args, env);
        assert.equal(run.code, 0, `gatehouse ${args.join(' ')}: ${run.stderr}`);
      }
      example = await startExample(server, 'oidc-webapp');
      clientId = (JSON.parse(readFileSync(join(example.dataDir, 'client.json'), 'utf8')) as { client_id: string }).client_id;
    });
    after(async () => {
      await browser?.close();
      if (example) await stopExample(example);
      await server?.close();
    });

    /** A fresh browser signed in to the example as alice (approving the consent page when it shows). */
    async function signIn(): Promise<{ context: BrowserContext; page: Page }> {
      const context = await browser.newContext();
      const page = await context.newPage();
      await page.goto(example.origin);
      await page.getByRole('status').getByText('Not signed in.').waitFor();
      await page.getByRole('link', { name: 'Sign in with Gatehouse' }).click();
      await logIn(page, 'alice');
      // The first time, Gatehouse asks; once approved, it sends her straight back.
      const consent = page.getByRole('heading', { name: 'Authorize Example OIDC app' });
      const signedIn = page.getByRole('status').getByText('Signed in as alice.');
      await consent.or(signedIn).waitFor();
      if (await consent.isVisible()) await page.getByRole('button', { name: 'Authorize' }).click();
      await signedIn.waitFor();
      return { context, page };
    }

    async function shown(page: Page, id: 'claims' | 'userinfo'): Promise<Record<string, unknown>> {
      return JSON.parse((await page.locator(`#${id}`).textContent())!) as Record<string, unknown>;
    }

    test('it registered itself as a confidential client with its logout settings', async () => {
      const clients = (await listClients(server.store.db, {}, 1000)).rows;
      assert.equal(clients.length, 1);
      const registered = clients[0]!;
      assert.equal(registered.id, clientId);
      assert.notEqual(registered.secret_hash, null);
      assert.deepEqual(registered.scopes.split(' ').sort(), ['email', 'groups', 'openid', 'profile']);
      assert.deepEqual(JSON.parse(registered.post_logout_redirect_uris), [`${example.origin}/`]);
      assert.equal(registered.backchannel_logout_uri, `http://127.0.0.1:${new URL(example.origin).port}/backchannel-logout`);
    });

    test('sign in: the page shows the checked ID token and userinfo, with the same claims; sign out goes through Gatehouse and back', async () => {
      const { context, page } = await signIn();
      try {
        const userid = `acct:alice@${new URL(server.url).hostname}`;
        const claims = await shown(page, 'claims');
        assert.equal(claims.iss, server.url);
        assert.equal(claims.aud, clientId);
        assert.equal(claims.sub, userid);
        assert.equal(claims.azp, clientId);
        assert.equal(typeof claims.nonce, 'string');
        assert.equal(typeof claims.sid, 'string');
        assert.equal(typeof claims.at_hash, 'string');
        assert.deepEqual(claims.amr, ['pwd']);
        assert.ok(Number.isInteger(claims.auth_time) && (claims.auth_time as number) <= (claims.iat as number), 'auth_time: the login, before the token');
        assert.equal((claims.exp as number) - (claims.iat as number), 3600, 'ID_TOKEN_TTL, default 3600 seconds');
        const identity = {
          sub: userid,
          preferred_username: 'alice',
          name: 'Alice Liddell',
          email: 'alice@example.com',
          email_verified: true,
          groups: ['staff'],
        };
        for (const [claim, value] of Object.entries(identity)) assert.deepEqual(claims[claim], value, `ID token claim ${claim}`);
        const userinfo = await shown(page, 'userinfo');
        for (const [claim, value] of Object.entries(identity)) assert.deepEqual(userinfo[claim], value, `userinfo claim ${claim}`);

        await page.getByRole('button', { name: 'Sign out' }).click();
        // Its ID token names the person logged in at Gatehouse: logged out there at once, and back.
        await page.getByRole('status').getByText('Not signed in.').waitFor();
        assert.equal(page.url(), `${example.origin}/`);
        await page.goto(`${server.url}/account/applications`);
        assert.equal(new URL(page.url()).pathname, '/login', 'the Gatehouse session ended too');
      } finally {
        await context.close();
      }
    });

    test('logging out at Gatehouse signs the app out by back-channel logout', async () => {
      const { context, page } = await signIn();
      try {
        const gatehousePage = await context.newPage();
        await gatehousePage.goto(server.url);
        await gatehousePage.getByRole('main').getByRole('button', { name: 'Log out' }).click();
        await gatehousePage.getByRole('button', { name: 'Log in', exact: true }).waitFor();

        // Delivery runs in the background: wait until the app says it received the logout token.
        await printed(example, 'Back-channel logout: ended 1 session(s).');
        await page.reload();
        await page.getByRole('status').getByText('Not signed in.').waitFor();
      } finally {
        await context.close();
      }
    });

    test('a logout token signed by anyone but Gatehouse ends nothing', async () => {
      const { context, page } = await signIn();
      try {
        const { sid } = await shown(page, 'claims');
        const { privateKey } = await generateKeyPair('RS256');
        const forged = await new SignJWT({ sid, events: { 'http://schemas.openid.net/event/backchannel-logout': {} } })
          .setProtectedHeader({ alg: 'RS256', typ: 'logout+jwt' })
          .setIssuer(server.url)
          .setAudience(clientId)
          .setIssuedAt()
          .setJti(randomUUID())
          .sign(privateKey);
        const backchannel = `http://127.0.0.1:${new URL(example.origin).port}/backchannel-logout`;
        const refused = await fetch(backchannel, { method: 'POST', body: new URLSearchParams({ logout_token: forged }) });
        assert.equal(refused.status, 400);
        await page.reload();
        await page.getByRole('status').getByText('Signed in as alice.').waitFor();
      } finally {
        await context.close();
      }
    });
  });
}
