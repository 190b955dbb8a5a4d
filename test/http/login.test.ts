/**
 * Logging in and out (SPEC §4.5): who gets in, what a failure tells, where a login lands,
 * and what the session cookie and the sessions table hold.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { COMMAND_LINE } from '../../src/audit.ts';
import { disableUser } from '../../src/accounts/users.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { PASSWORD, startServer, type TestServer } from '../support/server.ts';
import { UserAgent, formFields } from '../support/user-agent.ts';

const SESSION_COOKIE = 'gatehouse_session';

/** Opens the login page and posts the form (with `next` put in, if given); the answer is not followed. */
async function submitLogin(agent: UserAgent, username: string, password: string, next?: string): Promise<Response> {
  const page = await agent.visit('/login');
  const fields = formFields(page.html, '/login');
  fields.set('username', username);
  fields.set('password', password);
  if (next !== undefined) fields.set('next', next);
  return agent.fetch('/login', { method: 'POST', body: fields });
}

/** The Set-Cookie line that sets the session cookie, if any. */
function sessionSetCookie(response: Response, name = SESSION_COOKIE): string | undefined {
  return response.headers.getSetCookie().find((line) => line.startsWith(`${name}=`) && !line.startsWith(`${name}=;`));
}

/** Whether `cookie` opens a session: the home page shows the user instead of sending to /login. */
async function isLoggedIn(server: TestServer, cookie: string): Promise<boolean> {
  const response = await fetch(new URL('/', server.url), { headers: { cookie: `${SESSION_COOKIE}=${cookie}` }, redirect: 'manual' });
  return response.status === 200;
}

/** A failed login: 401, the login page again with one message, and no session. */
async function assertRefused(response: Response): Promise<string> {
  assert.equal(response.status, 401);
  assert.equal(sessionSetCookie(response), undefined);
  const html = await response.text();
  assert.match(html, /<p class="error" role="alert" id="login-error">Wrong username or password.<\/p>/);
  return html;
}

for (const backend of BACKENDS) {
  describe(`logging in and out (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;

    before(async () => {
      server = await startServer(backend);
      await server.createUser('alice');
    });
    after(() => server?.close());

    describe('the login form', () => {
      test('has labelled username and password fields, a Log in button and a CSRF token', async () => {
        const page = await new UserAgent(server.url).visit('/login');
        assert.equal(page.response.status, 200);
        assert.match(page.html, /<label for="username">Username or email<\/label>/);
        assert.match(page.html, /<input id="username" name="username"/);
        assert.match(page.html, /<label for="password">Password<\/label>/);
        assert.match(page.html, /<input id="password" name="password" type="password"/);
        assert.match(page.html, /<button type="submit">Log in<\/button>/);
        assert.ok(formFields(page.html, '/login').get('_csrf'));
      });

      for (const login of ['ALICE', 'Alice@Example.COM']) {
        test(`logs in with "${login}"`, async () => {
          const agent = new UserAgent(server.url);
          const response = await submitLogin(agent, login, PASSWORD);
          assert.equal(response.status, 303);
          assert.equal(response.headers.get('location'), '/');
          const home = await agent.visit('/');
          assert.match(home.html, /You are logged in as <strong>alice<\/strong>/);
        });
      }

      test('a post without the CSRF token is refused', async () => {
        const agent = new UserAgent(server.url);
        await agent.visit('/login');
        const response = await agent.fetch('/login', { method: 'POST', body: new URLSearchParams({ username: 'alice', password: PASSWORD }) });
        assert.equal(response.status, 403);
        assert.equal(sessionSetCookie(response), undefined);
      });
    });

    describe('refused logins', () => {
      test('a wrong password and an unknown user get the same page, with no hint which was wrong', async () => {
        const agent = new UserAgent(server.url);
        const wrongPassword = await assertRefused(await submitLogin(agent, 'alice', 'not the password'));
        const unknownUser = await assertRefused(await submitLogin(agent, 'mallory', PASSWORD));
        // The pages differ only by the one-time CSRF token and the name typed back into the field.
        const neutral = (html: string) => html.replace(/name="_csrf" value="[^"]*"/, '').replace(/value="(alice|mallory)"/, '');
        assert.equal(neutral(wrongPassword), neutral(unknownUser));
      });

      test('a disabled user cannot log in, and their open session ends', async () => {
        const carol = await server.createUser('carol');
        const agent = new UserAgent(server.url);
        await submitLogin(agent, 'carol', PASSWORD);
        const cookie = agent.cookies.get(SESSION_COOKIE)!;
        assert.ok(await isLoggedIn(server, cookie));

        await disableUser(server.app.gatehouse, carol, COMMAND_LINE);
        assert.equal(await isLoggedIn(server, cookie), false);
        await assertRefused(await submitLogin(new UserAgent(server.url), 'carol', PASSWORD));
      });
    });

    describe('where a login lands', () => {
      test('a same-site path in next is followed', async () => {
        const next = '/oauth/authorize?client_id=x&state=a%20b';
        const response = await submitLogin(new UserAgent(server.url), 'alice', PASSWORD, next);
        assert.equal(response.status, 303);
        assert.equal(response.headers.get('location'), next);
      });

      const offsite = [
        'https://evil.example/',
        '//evil.example/',
        '/\\evil.example/',
        '\\\\evil.example/',
        '/.//evil.example/',
        '/%2e//evil.example/',
        'https:evil.example',
        '/\t/evil.example/',
        'javascript:alert(1)',
      ];

      test('after logging in, an off-site next lands on /', async () => {
        const response = await submitLogin(new UserAgent(server.url), 'alice', PASSWORD, '/.//evil.example/');
        assert.equal(response.status, 303);
        assert.equal(response.headers.get('location'), '/');
      });

      test('when already logged in, an off-site next lands on /', async () => {
        const agent = new UserAgent(server.url);
        await submitLogin(agent, 'alice', PASSWORD);
        for (const next of offsite) {
          const response = await agent.fetch(`/login?${new URLSearchParams({ next })}`);
          assert.equal(response.status, 302, next);
          assert.equal(response.headers.get('location'), '/', next);
        }
      });

      test('the login form does not carry an off-site next', async () => {
        const agent = new UserAgent(server.url);
        for (const next of offsite) {
          const page = await agent.visit(`/login?${new URLSearchParams({ next })}`);
          assert.equal(formFields(page.html, '/login').get('next'), '/', next);
        }
      });
    });

    describe('the session', () => {
      test('the cookie is HttpOnly and SameSite=Lax, and the database keeps only a hash of it', async () => {
        const response = await submitLogin(new UserAgent(server.url), 'alice', PASSWORD);
        const setCookie = sessionSetCookie(response)!;
        assert.match(setCookie, /; HttpOnly/i);
        assert.match(setCookie, /; SameSite=Lax/i);
        assert.match(setCookie, /; Path=\//i);
        const token = /^[^=]+=([^;]*)/.exec(setCookie)![1]!;
        assert.ok(token.length >= 43);

        const rows = await server.store.db.selectFrom('sessions').selectAll().execute();
        assert.ok(rows.length > 0);
        const stored = JSON.stringify(rows);
        assert.ok(!stored.includes(token), 'the sessions table holds the raw session token');
        assert.ok(!stored.includes(token.slice(4)), 'the sessions table holds the secret part of the session token');
      });

      test('behind https the cookie is Secure and __Host- prefixed', async (t) => {
        const https = await startServer(backend, { PUBLIC_URL: 'https://gatehouse.example' });
        t.after(() => https.close());
        await https.createUser('alice');
        const response = await submitLogin(new UserAgent(https.url), 'alice', PASSWORD);
        assert.equal(response.status, 303);
        const setCookie = sessionSetCookie(response, `__Host-${SESSION_COOKIE}`)!;
        assert.ok(setCookie, 'the __Host- session cookie is set');
        assert.match(setCookie, /; Secure/i);
        assert.match(setCookie, /; HttpOnly/i);
      });

      test('logging out (with the CSRF token) ends the session on the server: the old cookie no longer works', async () => {
        const agent = new UserAgent(server.url);
        await submitLogin(agent, 'alice', PASSWORD);
        const cookie = agent.cookies.get(SESSION_COOKIE)!;
        const sessions = await server.store.db.selectFrom('sessions').select('id_hash').execute();

        const forged = await agent.fetch('/logout', { method: 'POST', body: new URLSearchParams() });
        assert.equal(forged.status, 403, 'a logout without the CSRF token is refused');
        assert.ok(await isLoggedIn(server, cookie));

        const home = await agent.visit('/');
        const response = await agent.fetch('/logout', { method: 'POST', body: formFields(home.html, '/logout') });
        assert.equal(response.status, 303);
        assert.equal(response.headers.get('location'), '/login');
        assert.equal(agent.cookies.get(SESSION_COOKIE), undefined, 'the browser is told to drop the cookie');
        assert.equal(await isLoggedIn(server, cookie), false);
        assert.equal((await server.store.db.selectFrom('sessions').select('id_hash').execute()).length, sessions.length - 1);
      });
    });
  });
}
