/**
 * What a session survives (SPEC §4.5, issue 11 items 7 and 8): a password change from the
 * command line ends the user's sessions; the CSRF secret is renewed at login and logout, and
 * behind https its cookie is `__Host-` prefixed like the session cookie.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { databaseUrl, gatehouse } from '../support/processes.ts';
import { PASSWORD, startServer, type TestServer } from '../support/server.ts';
import { UserAgent, formFields } from '../support/user-agent.ts';

/** Whether the agent's session cookie opens the home page instead of sending to /login. */
async function signedIn(agent: UserAgent): Promise<boolean> {
  return (await agent.fetch('/')).status === 200;
}

for (const backend of BACKENDS) {
  describe(`what a session survives (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;

    before(async () => {
      server = await startServer(backend);
      await server.createUser('alice');
      await server.createUser('bob');
    });
    after(() => server?.close());

    test('gatehouse user set-password ends every session of the user, and only theirs', async () => {
      const [phone, laptop, other] = [new UserAgent(server.url), new UserAgent(server.url), new UserAgent(server.url)];
      await phone.login('alice');
      await laptop.login('alice');
      await other.login('bob');
      assert.ok((await signedIn(phone)) && (await signedIn(laptop)) && (await signedIn(other)));

      const run = await gatehouse(
        ['user', 'set-password', 'alice', '--password-stdin'],
        { DATABASE_URL: databaseUrl(server.config) },
        'a brand new password\n',
      );
      assert.equal(run.code, 0, run.stderr);

      assert.equal(await signedIn(phone), false, 'the old session cookie still works');
      assert.equal(await signedIn(laptop), false, 'the old session cookie still works');
      assert.equal(await signedIn(other), true, "another user's session ended too");
      assert.equal((await new UserAgent(server.url).login('alice', 'a brand new password')).response.status, 200);
    });

    test('the CSRF secret is renewed at login and at logout', async () => {
      const agent = new UserAgent(server.url);
      await agent.visit('/login');
      const beforeLogin = agent.cookies.get('gatehouse_csrf');
      assert.ok(beforeLogin);
      await agent.login('bob');
      const afterLogin = agent.cookies.get('gatehouse_csrf');
      assert.ok(afterLogin);
      assert.notEqual(afterLogin, beforeLogin, 'the secret from before the login is still in use');

      const home = await agent.visit('/');
      const loggedOut = await agent.submit(home.html, '/logout');
      assert.equal(loggedOut.response.status, 200);
      const afterLogout = agent.cookies.get('gatehouse_csrf');
      assert.ok(afterLogout);
      assert.notEqual(afterLogout, afterLogin, 'the secret of the session is still in use after logout');
    });

    test('on the first page after a login, every form of the page works — Log out included', async () => {
      const agent = new UserAgent(server.url);
      const form = formFields((await agent.visit('/login')).html, '/login');
      form.set('username', 'bob');
      form.set('password', PASSWORD);
      form.set('next', '/account/applications');
      assert.equal((await agent.fetch('/login', { method: 'POST', body: form })).status, 303);
      // The login renewed the CSRF secret: this page, the first after it, makes the new one for both its forms.
      const page = await agent.visit('/account/applications');
      assert.equal(page.response.status, 200);
      const out = await agent.fetch('/logout', { method: 'POST', body: formFields(page.html, '/logout') });
      assert.equal(out.status, 303, "the navigation's Log out was refused");
    });

    test('a CSRF token from before the login is refused after it', async () => {
      const agent = new UserAgent(server.url);
      const page = await agent.visit('/login');
      const stale = formFields(page.html, '/login').get('_csrf')!;
      await agent.login('bob');
      const response = await agent.fetch('/logout', { method: 'POST', body: new URLSearchParams({ _csrf: stale }) });
      assert.equal(response.status, 403);
      assert.equal(await signedIn(agent), true);
    });
  });
}

describe('behind https', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer(BACKENDS[0]!, { PUBLIC_URL: 'https://gatehouse.example' });
  });
  after(() => server?.close());

  test('the CSRF cookie is __Host- prefixed, Secure, with Path=/', async () => {
    const response = await new UserAgent(server.url).fetch('/login');
    const line = response.headers.getSetCookie().find((cookie) => cookie.includes('gatehouse_csrf='));
    assert.ok(line, 'a CSRF cookie is set');
    assert.match(line, /^__Host-gatehouse_csrf=[^;]+/);
    assert.match(line, /; Secure/i);
    assert.match(line, /; Path=\/(;|$)/i);
    assert.doesNotMatch(line, /; Domain=/i);
  });
});
