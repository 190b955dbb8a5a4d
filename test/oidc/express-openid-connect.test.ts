/**
 * docs/oidc.md's express-openid-connect recipe against a real Gatehouse: a tiny Express app
 * with the library's `auth()` middleware, run over plain HTTP on loopback, and a person who
 * logs in through it, reaches a page that needs a login, and signs out through Gatehouse
 * (`idpLogout`). The library asks for `response_type=id_token` unless told otherwise, which
 * Gatehouse refuses (it issues codes only): the recipe's `authorizationParams: {
 * response_type: 'code' }` is what makes it work, and the refusal is checked too.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import express from 'express';
import expressOpenidConnect, { type ConfigParams } from 'express-openid-connect';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { formFields, UserAgent } from '../support/user-agent.ts';

// A CommonJS module: its functions come as properties of the default export.
const { auth, requiresAuth } = expressOpenidConnect;

/** The application's side of a browser: its own cookies, for the app's origin only (Gatehouse's are the UserAgent's). */
class AppBrowser {
  readonly cookies = new Map<string, string>();
  readonly base: string;

  constructor(base: string) {
    this.base = base;
  }

  async fetch(url: string | URL, init: RequestInit = {}): Promise<Response> {
    const target = new URL(url, this.base);
    assert.equal(target.origin, new URL(this.base).origin, 'only the application is fetched here');
    const headers = new Headers(init.headers);
    if (this.cookies.size > 0) headers.set('cookie', [...this.cookies].map(([name, value]) => `${name}=${value}`).join('; '));
    const response = await fetch(target, { ...init, headers, redirect: 'manual' });
    for (const cookie of response.headers.getSetCookie()) {
      const [pair] = cookie.split(';');
      const at = pair!.indexOf('=');
      const [name, value] = [pair!.slice(0, at), pair!.slice(at + 1)];
      if (/expires=Thu, 01 Jan 1970/i.test(cookie) || value === '') this.cookies.delete(name);
      else this.cookies.set(name, value);
    }
    return response;
  }
}

/**
 * Starts the recipe's app on a loopback port: `/` says who is logged in, `/profile` needs a
 * login. Its settings are read at its first request, once its port (in `baseURL`) is known.
 */
async function startApp(settings: (baseURL: string) => ConfigParams): Promise<{ url: string; close(): Promise<void> }> {
  const app = express();
  let baseURL = '';
  let middleware: express.RequestHandler | undefined;
  app.use((request, response, next) => (middleware ??= auth(settings(baseURL)))(request, response, next));
  app.get('/', (request, response) => {
    response.json({ user: request.oidc.isAuthenticated() ? request.oidc.user : null });
  });
  app.get('/profile', requiresAuth(), (request, response) => {
    response.json({ user: request.oidc.user, idToken: request.oidc.idToken, accessToken: request.oidc.accessToken?.access_token ?? null });
  });
  const server: Server = await new Promise((resolve) => {
    const listening = app.listen(0, '127.0.0.1', () => resolve(listening));
  });
  baseURL = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url: baseURL, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

/** The settings the test app uses, as docs/oidc.md's recipe writes them: the recipe is what is tested. */
const RECIPE = [
  "authorizationParams: { response_type: 'code', scope: 'openid profile email' }",
  'idpLogout: true',
  'authRequired: false',
  '--post-logout-redirect-uri https://app.example.com \\',
  '--confidential --require-pkce',
];

test("docs/oidc.md's express-openid-connect recipe has the settings tested here", async () => {
  const docs = await readFile(new URL('../../docs/oidc.md', import.meta.url), 'utf8');
  const recipe = docs.slice(docs.indexOf('### An Express app with express-openid-connect'), docs.indexOf('## When something goes wrong'));
  for (const line of RECIPE) assert.ok(recipe.includes(line), `the recipe does not say ${line}`);
});

for (const backend of BACKENDS) {
  describe(`express-openid-connect, as docs/oidc.md sets it up (${backend.name})`, backendOptions(backend), () => {
    let gatehouse: TestServer;
    let app: { url: string; close(): Promise<void> };
    let clientId = '';
    let clientSecret = '';

    before(async () => {
      gatehouse = await startServer(backend);
      const alice = await gatehouse.createUser('alice');
      await gatehouse.store.db.updateTable('users').set({ display_name: 'Alice Liddell', email_verified: 1 }).where('id', '=', alice.id).execute();
      app = await startApp((baseURL) => ({
        // docs/oidc.md's recipe: everything else is the library's default.
        issuerBaseURL: gatehouse.url,
        baseURL,
        clientID: clientId,
        clientSecret,
        secret: randomBytes(32).toString('base64url'),
        authRequired: false,
        idpLogout: true,
        authorizationParams: { response_type: 'code', scope: 'openid profile email' },
      }));
      // Registered as docs/oidc.md says: confidential, its /callback, and its base URL to come back to after logout.
      const registered = await gatehouse.createClient({
        name: 'Express app',
        confidential: true,
        redirectUris: [`${app.url}/callback`],
        postLogoutRedirectUris: [app.url],
        scope: 'openid profile email',
        requirePkce: true,
      });
      clientId = registered.client.id;
      clientSecret = registered.secret!;
    });
    after(async () => {
      await app?.close();
      await gatehouse?.close();
    });

    test('with response_type code: a person logs in over HTTP, the app has their claims, a page that needs a login opens', async () => {
      const browser = new AppBrowser(app.url);
      const person = new UserAgent(gatehouse.url);
      assert.deepEqual(await (await browser.fetch('/')).json(), { user: null });

      // /profile needs a login: the app sends the browser to Gatehouse with a code request.
      const start = await browser.fetch('/profile');
      assert.equal(start.status, 302);
      const authorize = new URL(start.headers.get('location')!);
      assert.equal(authorize.origin + authorize.pathname, `${gatehouse.url}/oauth/authorize`);
      assert.equal(authorize.searchParams.get('response_type'), 'code');
      assert.equal(authorize.searchParams.get('code_challenge_method'), 'S256', 'the library uses PKCE');

      // The person logs in and approves; Gatehouse sends the code back to the app's /callback.
      const outcome = await person.authorize(authorize, { username: 'alice' });
      assert.ok(outcome.redirect, `Gatehouse answered ${outcome.response.status}: ${outcome.html.slice(0, 300)}`);
      assert.equal(outcome.redirect.origin + outcome.redirect.pathname, `${app.url}/callback`);
      assert.ok(outcome.redirect.searchParams.get('code'));

      // The app exchanges the code (client_secret_basic), checks the ID token, and goes back to /profile.
      const callback = await browser.fetch(outcome.redirect);
      assert.equal(callback.status, 302, await callback.clone().text());
      assert.equal(new URL(callback.headers.get('location')!, app.url).pathname, '/profile');
      const profile = await browser.fetch('/profile');
      assert.equal(profile.status, 200);
      const seen = (await profile.json()) as { user: Record<string, unknown>; idToken: string; accessToken: string | null };
      assert.equal(seen.user.sub, 'acct:alice@127.0.0.1');
      assert.equal(seen.user.preferred_username, 'alice');
      assert.equal(seen.user.name, 'Alice Liddell');
      assert.equal(seen.user.email, 'alice@example.com');
      assert.equal(seen.user.email_verified, true);
      assert.ok(seen.accessToken, 'the app holds an access token too');
      // The access token (for Gatehouse itself: no resource) opens userinfo.
      const info = await fetch(new URL('/oauth/userinfo', gatehouse.url), { headers: { authorization: `Bearer ${seen.accessToken}` } });
      assert.equal(((await info.json()) as { sub: string }).sub, 'acct:alice@127.0.0.1');

      // Sign out (idpLogout): through Gatehouse's end_session_endpoint with the ID token, and back to the app.
      const logout = await browser.fetch('/logout');
      assert.equal(logout.status, 302);
      const endSession = new URL(logout.headers.get('location')!);
      assert.equal(endSession.origin + endSession.pathname, `${gatehouse.url}/oauth/logout`);
      assert.equal(endSession.searchParams.get('id_token_hint'), seen.idToken);
      const ended = await person.visit(endSession.pathname + endSession.search);
      assert.equal(ended.redirect?.origin, app.url, `Gatehouse sent the person back to the app (${ended.response.status}, ${endSession.href})`);
      assert.deepEqual(await (await browser.fetch('/')).json(), { user: null });
      const home = await person.visit('/');
      assert.doesNotMatch(home.html, /You are logged in as/, 'logged out of Gatehouse too');
    });

    test("the library's default, response_type id_token, is refused: the app gets unsupported_response_type, and no login", async () => {
      let defaultsClient = '';
      const defaults = await startApp((baseURL) => ({
        issuerBaseURL: gatehouse.url,
        baseURL,
        clientID: defaultsClient,
        secret: randomBytes(32).toString('base64url'),
        authRequired: false,
      }));
      try {
        defaultsClient = (await gatehouse.createClient({ name: 'Defaults', redirectUris: [`${defaults.url}/callback`], scope: 'openid profile email' })).client
          .id;
        const browser = new AppBrowser(defaults.url);
        const start = await browser.fetch('/login');
        assert.equal(start.status, 302);
        const authorize = new URL(start.headers.get('location')!);
        assert.equal(authorize.searchParams.get('response_type'), 'id_token');
        assert.equal(authorize.searchParams.get('response_mode'), 'form_post');
        // Refused before any login: the error goes back to the app, posted as it asked.
        const outcome = await new UserAgent(gatehouse.url).visit(authorize.pathname + authorize.search);
        const fields = formFields(outcome.html, `${defaults.url}/callback`);
        assert.equal(fields.get('error'), 'unsupported_response_type');
        assert.equal(fields.get('id_token'), null);
        const answer = await browser.fetch('/callback', { method: 'POST', body: fields });
        // What a newcomer sees: the library's 400 page, "authorization response from the server is an error".
        assert.equal(answer.status, 400, `the app took the refusal as a login (${answer.status})`);
        assert.match(await answer.text(), /authorization response from the server is an error/);
        assert.deepEqual(await (await browser.fetch('/')).json(), { user: null });
      } finally {
        await defaults.close();
      }
    });
  });
}
