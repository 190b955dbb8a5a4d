/**
 * Attacks on the second step of a login (SPEC §4.12), performed as an attacker would, over
 * HTTP: someone who knows only the password must not reach a session of a person who has a
 * second factor, whatever page of the second step they try.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { secretOnPage, totpCode } from '../support/second-factors.ts';
import { databaseUrl, gatehouse } from '../support/processes.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent, formFields } from '../support/user-agent.ts';
import { userWithStoredPasskey } from '../support/webauthn.ts';

for (const backend of BACKENDS) {
  describe(`second-step attacks (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;

    before(async () => {
      server = await startServer(backend, { LOG_LEVEL: 'warn' }, 'localhost');
    });
    after(async () => {
      await server?.close();
    });

    /** A person whose only second factor is a passkey (its row as registration stores it). */
    const withPasskey = async (username: string) => (await userWithStoredPasskey(server, username)).user;

    const signedIn = async (agent: UserAgent) => (await agent.fetch('/account/applications')).status === 200;

    test('a password alone cannot set up an authenticator app at the second step of a person with a passkey', async () => {
      await withPasskey('pia');
      const attacker = new UserAgent(server.url);
      const login = await attacker.login('pia');
      assert.match(login.response.url + login.html, /second-factor|passkey/i);
      assert.ok(!(await signedIn(attacker)), 'the password alone opens nothing');
      // The set-up page is for a person who must set up a first factor, not for one who has one.
      const setup = await attacker.visit('/login/second-factor/set-up?next=/');
      if (setup.html.includes('id="totp-secret"')) {
        const secret = secretOnPage(setup.html);
        await attacker.visit('/login/second-factor/set-up', {
          method: 'POST',
          body: (() => {
            const fields = formFields(setup.html, '/login/second-factor/set-up');
            fields.set('code', totpCode(secret));
            return fields;
          })(),
        });
      }
      assert.ok(!(await signedIn(attacker)), 'an app of the attacker set up with the password alone logs in');
      const apps = await server.store.db.selectFrom('authenticator_apps').selectAll().execute();
      assert.equal(apps.filter((a) => a.confirmed_at !== null).length, 0, 'no app was added');
    });
  });

  describe(`a pending login after the password changes (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;

    before(async () => {
      server = await startServer(backend, { LOG_LEVEL: 'warn', REQUIRE_SECOND_FACTOR: 'all' });
    });
    after(async () => {
      await server?.close();
    });

    test('a set-up begun with the old password cannot complete once the password has changed', async () => {
      await server.createUser('quinn');
      // The attacker has the old password: it opens a pending login that must set up an app.
      const attacker = new UserAgent(server.url);
      const page = await attacker.login('quinn');
      assert.ok(page.html.includes('id="totp-secret"'), 'at the set-up of the pending login');
      // The person (or an administrator) changes the password: whoever knew the old one is out.
      const changed = await gatehouse(
        ['user', 'set-password', 'quinn', '--password-stdin'],
        { DATABASE_URL: databaseUrl(server.config), PUBLIC_URL: server.url },
        'a brand new passphrase for quinn\n',
      );
      assert.equal(changed.code, 0, changed.stderr);
      const secret = secretOnPage(page.html);
      await attacker.submit(page.html, '/login/second-factor/set-up', { code: totpCode(secret) });
      assert.equal((await attacker.fetch('/account/applications')).status, 303, 'the old password still completed a login');
      const apps = await server.store.db.selectFrom('authenticator_apps').selectAll().where('confirmed_at', 'is not', null).execute();
      assert.equal(apps.length, 0, "the attacker's app was not added");
    });
  });

  describe(`a stolen session setting up an app (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;

    before(async () => {
      server = await startServer(backend, { LOG_LEVEL: 'warn' });
    });
    after(async () => {
      await server?.close();
    });

    test("an old session without a second factor cannot enrol the attacker's app through the step-up set-up", async () => {
      await server.createUser('rosa');
      // Rosa logged in with her password long ago; her session cookie is the attacker's now.
      const stolen = new UserAgent(server.url);
      await stolen.login('rosa');
      server.advance(30 * 60);
      assert.equal((await stolen.fetch('/account/applications')).status, 200, 'the session still works');
      // The security page's set-up needs a recent login; the step-up set-up must too.
      const page = await stolen.visit('/login/second-factor/set-up?next=/');
      if (page.html.includes('id="totp-secret"')) {
        const secret = secretOnPage(page.html);
        await stolen.submit(page.html, '/login/second-factor/set-up', { code: totpCode(secret, Date.now() + 30 * 60_000) });
      }
      const apps = await server.store.db.selectFrom('authenticator_apps').selectAll().where('confirmed_at', 'is not', null).execute();
      assert.equal(apps.length, 0, 'a stale session added a second factor without logging in again');
    });
  });
}
