/**
 * OpenID Connect for a single-page application (SPEC §4.10), with oidc-client-ts — the
 * library most browser apps use, unmodified, from its browser bundle — in Chromium. The app
 * lives on another origin, registered as a public client with PKCE and a post-logout
 * redirect URL: it signs in by redirect, renews silently (by refresh token, and in a hidden
 * iframe with `prompt=none`), and signs out through Gatehouse's end-session endpoint.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { BrowserContext, Page } from 'playwright-core';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { browserOptions, launchBrowser, logIn, startClientSite, type ClientSite, type SiteFile, type TestBrowser } from '../support/browser.ts';
import { profile } from '../support/oauth-client.ts';
import { databaseUrl, gatehouse } from '../support/processes.ts';
import { startServer, type TestServer } from '../support/server.ts';

const BUNDLE = fileURLToPath(import.meta.resolve('oidc-client-ts').replace(/esm\/oidc-client-ts\.js$/, 'browser/oidc-client-ts.min.js'));

/** What oidc-client-ts keeps of a signed-in user (the parts the tests read). */
interface SpaUser {
  id_token: string;
  access_token: string;
  refresh_token?: string;
  scope: string;
  profile: Record<string, unknown>;
}

/**
 * The application: one page for every path. `/app` is home; `/app/callback`, `/app/silent` and
 * `/app/signed-out` finish a sign-in, a silent renewal (inside the iframe) and a sign-out, as
 * oidc-client-ts's documentation has them. Its URLs are on the origin it is loaded from, so
 * one site serves it on two: `http://127.0.0.1:<port>`, the same site as Gatehouse, and
 * `http://localhost:<port>`, another site. `window.manager` is the UserManager the tests
 * drive; `window.finished` what the page did on load.
 */
function spa(gatehouseUrl: string, clientId: () => string): Record<string, SiteFile> {
  const html: SiteFile = {
    type: 'text/html; charset=utf-8',
    body: '<!doctype html><title>Notes</title><p id="status">Loading…</p><script src="/oidc-client-ts.js"></script><script src="/app.js"></script>',
  };
  const script = () => `
    window.manager = new oidc.UserManager({
      authority: ${JSON.stringify(gatehouseUrl)},
      client_id: ${JSON.stringify(clientId())},
      redirect_uri: location.origin + '/app/callback',
      silent_redirect_uri: location.origin + '/app/silent',
      post_logout_redirect_uri: location.origin + '/app/signed-out',
      scope: 'openid profile email',
      loadUserInfo: true,
      includeIdTokenInSilentRenew: true,
    });
    const finish = { '/app/callback': () => manager.signinRedirectCallback(), '/app/silent': () => manager.signinSilentCallback(), '/app/signed-out': () => manager.signoutRedirectCallback() }[location.pathname];
    window.finished = (finish ? finish() : Promise.resolve()).then(
      () => (document.getElementById('status').textContent = 'Ready.', 'ok'),
      (error) => (document.getElementById('status').textContent = 'Failed: ' + error.message, error.error || error.message),
    );`;
  return {
    '/oidc-client-ts.js': { type: 'text/javascript; charset=utf-8', body: readFileSync(BUNDLE) },
    '/app.js': {
      type: 'text/javascript; charset=utf-8',
      // Made when served: the client is registered once the site is up (its URLs name the site's port).
      get body() {
        return script();
      },
    },
    '/app': html,
    '/app/callback': html,
    '/app/silent': html,
    '/app/signed-out': html,
  };
}

for (const backend of BACKENDS) {
  describe(`a single-page application with oidc-client-ts (${backend.name})`, { ...backendOptions(backend), ...browserOptions() }, () => {
    let server: TestServer;
    let site: ClientSite;
    let browser: TestBrowser;
    let clientId = '';
    /** The app served from another site than Gatehouse's (localhost is not 127.0.0.1). */
    let otherSite: string;

    before(async () => {
      [server, browser] = await Promise.all([startServer(backend), launchBrowser()]);
      site = await startClientSite(spa(server.url, () => clientId));
      otherSite = site.origin.replace('127.0.0.1', 'localhost');
      // One person per test: each signs in for the first time, so the consent page shows.
      for (const username of ['alice', 'bob', 'carol', 'dave', 'erin']) await server.createUser(username);
      // Registered as the documentation tells an operator to: a public client (PKCE), with the
      // app's callbacks and the page Gatehouse may send people back to after logging out.
      const created = await gatehouse(
        [
          'client',
          'create',
          '--name',
          'Notes',
          '--redirect-uri',
          `${site.origin}/app/callback`,
          '--redirect-uri',
          `${site.origin}/app/silent`,
          '--redirect-uri',
          `${otherSite}/app/callback`,
          '--redirect-uri',
          `${otherSite}/app/silent`,
          '--post-logout-redirect-uri',
          `${site.origin}/app/signed-out`,
          '--json',
        ],
        { DATABASE_URL: databaseUrl(server.config) },
      );
      assert.equal(created.code, 0, created.stderr);
      clientId = (JSON.parse(created.stdout) as { client_id: string }).client_id;
    });
    after(async () => {
      await browser?.close();
      await site?.close();
      await server?.close();
    });

    async function finished(page: Page): Promise<string> {
      return page.evaluate('window.finished') as Promise<string>;
    }

    async function user(page: Page): Promise<SpaUser | null> {
      return page.evaluate('manager.getUser()') as Promise<SpaUser | null>;
    }

    /** Opens the app in a fresh browser and signs in by redirect as `username`, approving the consent page. */
    async function signIn(username: string, scope?: string, origin = site.origin): Promise<{ context: BrowserContext; page: Page }> {
      const context = await browser.newContext();
      const page = await context.newPage();
      await page.goto(`${origin}/app`);
      assert.equal(await finished(page), 'ok');
      await page.evaluate(`void manager.signinRedirect(${scope ? JSON.stringify({ scope }) : ''})`); // it navigates away
      await page.waitForURL((url) => url.origin === server.url && url.pathname === '/login');
      await logIn(page, username);
      await page.getByRole('heading', { name: 'Authorize Notes' }).waitFor();
      await page.getByRole('button', { name: 'Authorize' }).click();
      await page.waitForURL(`${origin}/app/callback?**`);
      assert.equal(await finished(page), 'ok', 'signinRedirectCallback accepted the answer and the ID token');
      return { context, page };
    }

    test('sign in by redirect: the user has the identity claims of the scopes asked for, from the ID token and userinfo', async () => {
      const { context, page } = await signIn('alice');
      try {
        const signedIn = (await user(page))!;
        assert.equal(signedIn.profile.sub, `acct:alice@${new URL(server.url).hostname}`);
        assert.equal(signedIn.profile.preferred_username, 'alice');
        assert.equal(signedIn.profile.email, 'alice@example.com');
        assert.equal(signedIn.profile.email_verified, false);
        assert.equal(signedIn.profile.groups, undefined, 'no groups without the groups scope');
        assert.deepEqual(signedIn.scope.split(' ').sort(), ['email', 'openid', 'profile']);
        assert.equal((await profile(server, signedIn.access_token)).status, 403, 'identity scopes alone do not reach /api/profile');
      } finally {
        await context.close();
      }
    });

    test('without the email scope there is no email', async () => {
      const { context, page } = await signIn('bob', 'openid profile');
      try {
        const signedIn = (await user(page))!;
        assert.equal(signedIn.profile.preferred_username, 'bob');
        assert.equal(signedIn.profile.email, undefined);
        assert.equal(signedIn.profile.email_verified, undefined);
      } finally {
        await context.close();
      }
    });

    test('silent renewal, by refresh token and in an iframe with prompt=none, keeps the same person', async () => {
      const { context, page } = await signIn('carol');
      try {
        const first = (await user(page))!;

        // The library's default: its refresh token. The refresh answers with a new ID token too.
        await page.evaluate('manager.signinSilent()');
        const refreshed = (await user(page))!;
        assert.notEqual(refreshed.access_token, first.access_token);
        assert.notEqual(refreshed.id_token, first.id_token);
        assert.equal(refreshed.profile.sub, first.profile.sub);

        // An app that keeps no refresh token asks again in a hidden iframe, with prompt=none and
        // its ID token as the hint: Gatehouse answers by redirect, without showing a page.
        const gatehousePages: string[] = [];
        page.on('response', (response) => {
          const rendered = response.url().startsWith(server.url) && response.status() === 200 && response.headers()['content-type']?.startsWith('text/html');
          if (rendered) gatehousePages.push(response.url());
        });
        await page.evaluate('manager.signinSilent({ forceIframeAuth: true })');
        const renewed = (await user(page))!;
        assert.notEqual(renewed.access_token, refreshed.access_token);
        assert.equal(renewed.profile.sub, first.profile.sub);
        assert.equal(renewed.profile.email, 'carol@example.com');
        assert.deepEqual(gatehousePages, [], 'no Gatehouse page was rendered in the iframe');
        assert.equal((await page.evaluate('document.querySelectorAll("iframe").length')) as number, 0, 'the library removed its iframe');
      } finally {
        await context.close();
      }
    });

    test('an app on another site: the iframe cannot see the SameSite=Lax session, so it gets login_required; the refresh token still renews', async () => {
      const { context, page } = await signIn('dave', undefined, otherSite);
      try {
        const first = (await user(page))!;
        const silently = `manager.signinSilent({ forceIframeAuth: true }).then(() => 'signed in', (error) => error.error)`;
        assert.equal(await page.evaluate(silently), 'login_required', 'an answer, not a hang or a login page in the iframe');
        await page.evaluate('manager.signinSilent()');
        const renewed = (await user(page))!;
        assert.notEqual(renewed.access_token, first.access_token);
        assert.equal(renewed.profile.sub, first.profile.sub);
      } finally {
        await context.close();
      }
    });

    test('sign out: Gatehouse ends the session and sends the person back to the app; a silent renewal then needs a login', async () => {
      const { context, page } = await signIn('erin');
      try {
        // With state to carry (oidc-client-ts sends `state` only then), and its ID token as the hint.
        await page.evaluate(`void manager.signoutRedirect({ state: 'from the test' })`);
        // The hint names the person logged in: no confirmation page, straight back, with the state.
        await page.waitForURL(`${site.origin}/app/signed-out?state=*`);
        assert.equal(await finished(page), 'ok', 'signoutRedirectCallback found the state it sent');
        assert.equal(await user(page), null);

        // Gatehouse's session is over: prompt=none answers login_required, and its pages ask for a login.
        assert.equal(await page.evaluate(`manager.signinSilent({ forceIframeAuth: true }).then(() => 'signed in', (error) => error.error)`), 'login_required');
        const account = await context.newPage();
        await account.goto(`${server.url}/account/applications`);
        assert.equal(new URL(account.url()).pathname, '/login');
      } finally {
        await context.close();
      }
    });
  });
}
