/**
 * Adding a factor counts as using it (SPEC §4.12): the session that just added a person's first
 * passkey (a registration with user verification) or authenticator app (confirmed by a current
 * code) goes on — rename, remove, add another, generate recovery codes — without logging in
 * again, within five minutes of that proof. And what it must not give: a stale session cannot
 * add a factor; another session of the person, or a copy of the old cookie, gains nothing; the
 * window ends five minutes after the proof, and adding more factors does not stretch it. Driven
 * over HTTP as a browser would, passkeys made by a software authenticator; both backends.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { BACKENDS, backendOptions, sqlite } from '../support/backends.ts';
import { secretOnPage, totpCode } from '../support/second-factors.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';
import { softwareAuthenticator } from '../support/webauthn.ts';
import type { User } from '../../src/store/schema.ts';

const SECURITY = '/account/security';
const SESSION_COOKIE = 'gatehouse_session';

/** The CSRF token of a page (every page has the log-out form). */
function csrfOf(html: string): string {
  const token = /name="_csrf" value="([^"]+)"/.exec(html)?.[1];
  assert.ok(token, 'a CSRF token on the page');
  return token;
}

/** Whether the security page offers the changes (no "log in again" in their place). */
const offersChanges = (html: string) => !html.includes('id="reauth"') && html.includes('Add a passkey</button>');

for (const backend of BACKENDS) {
  describe(`adding a factor counts as using it (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let authenticator: ReturnType<typeof softwareAuthenticator>;
    /** The server's clock, as TOTP codes need it. */
    let offset = 0;
    const advance = (seconds: number) => {
      server.advance(seconds);
      offset += seconds * 1000;
    };

    before(async () => {
      server = await startServer(backend, { LOG_LEVEL: 'warn' }, 'localhost');
      authenticator = softwareAuthenticator(server.url);
    });
    after(async () => {
      await server?.close();
    });

    const sessionsOf = async (user: User) =>
      (await server.store.db.selectFrom('sessions').select(['amr', 'sid']).where('user_id', '=', user.id).execute()).map((s) => ({ ...s }));
    const passkeysOf = (user: User) => server.store.db.selectFrom('passkeys').select(['id', 'name']).where('user_id', '=', user.id).execute();
    const security = async (agent: UserAgent) => (await agent.visit(SECURITY)).html;

    /** Posts a form of the security page (with its CSRF token, read afresh): the answer. */
    async function post(agent: UserAgent, path: string, fields: Record<string, string> = {}): Promise<Response> {
      const body = new URLSearchParams({ _csrf: csrfOf(await security(agent)), ...fields });
      return agent.fetch(path, { method: 'POST', body });
    }

    /** **Add a passkey**, as /static/passkeys.js does it: the options, then the authenticator's answer. */
    async function addPasskey(agent: UserAgent, name: string): Promise<Response> {
      const csrf = csrfOf(await security(agent));
      const options = await agent.fetch(`${SECURITY}/passkeys/options`, { method: 'POST', body: new URLSearchParams({ _csrf: csrf }) });
      if (options.status !== 200) return options;
      const { response } = authenticator.register((await options.json()) as { challenge: string; rp: { id?: string } });
      return agent.fetch(`${SECURITY}/passkeys`, { method: 'POST', body: new URLSearchParams({ _csrf: csrf, name, response }) });
    }

    /** **Set up an authenticator app** and confirm it with the current code; the confirmation's answer. */
    async function addApp(agent: UserAgent): Promise<Response> {
      const setUp = await post(agent, `${SECURITY}/app`);
      if (setUp.status !== 200) return setUp;
      const html = await setUp.text();
      const code = totpCode(secretOnPage(html), Date.now() + offset);
      return agent.fetch(`${SECURITY}/app/confirm`, { method: 'POST', body: new URLSearchParams({ _csrf: csrfOf(html), code }) });
    }

    async function loggedIn(username: string): Promise<{ user: User; agent: UserAgent }> {
      const user = await server.createUser(username);
      const agent = new UserAgent(server.url);
      await agent.login(username);
      return { user, agent };
    }

    test('the session that added its first passkey renames, removes, adds another and generates recovery codes without logging in again', async () => {
      const { user, agent } = await loggedIn('alice');
      const before = agent.cookies.get(SESSION_COOKIE);
      const [{ sid }] = (await sessionsOf(user)) as [{ amr: string; sid: string }];

      const added = await addPasskey(agent, 'Phone');
      assert.equal(added.status, 200, await added.clone().text());
      assert.ok(offersChanges(await security(agent)), 'the page offers Rename, Remove and Add at once');
      assert.notEqual(agent.cookies.get(SESSION_COOKIE), before, 'a new session token, as at a login');
      assert.deepEqual(await sessionsOf(user), [{ amr: 'pwd hwk user mfa', sid }], 'the same login, now with the passkey');

      assert.equal((await addPasskey(agent, 'Security key')).status, 200, 'adds a second passkey');
      const [phone, key] = await passkeysOf(user);
      assert.equal((await post(agent, `${SECURITY}/passkeys/rename`, { id: phone!.id, name: 'Old phone' })).status, 303);
      assert.equal((await post(agent, `${SECURITY}/recovery-codes`)).status, 200, 'generates recovery codes');
      assert.equal((await post(agent, `${SECURITY}/passkeys/remove`, { id: key!.id })).status, 303);
      assert.deepEqual(
        (await passkeysOf(user)).map((p) => p.name),
        ['Old phone'],
      );
      const events = await server.store.db
        .selectFrom('audit_events')
        .select(['type', 'detail'])
        .where('user_id', '=', user.id)
        .where('type', 'in', ['second_factor_added', 'passkey_renamed', 'second_factor_removed', 'recovery_codes_generated'])
        .orderBy('id')
        .execute();
      // Adding and removing a passkey are factor changes like an app's: one type each, the factor in the detail.
      assert.deepEqual(
        events.map((e) => [e.type, JSON.parse(e.detail!).factor]),
        [
          ['second_factor_added', 'passkey'],
          ['second_factor_added', 'passkey'],
          ['passkey_renamed', undefined],
          ['recovery_codes_generated', undefined],
          ['second_factor_removed', 'passkey'],
        ],
      );
      assert.equal(JSON.parse(events[0]!.detail!).session_upgraded, true, 'the trail says the first one made the session a login with it');
      assert.equal(JSON.parse(events[1]!.detail!).session_upgraded, undefined, 'the second changed nothing of the session');
    });

    test('the session that set up its first authenticator app goes on: a passkey, recovery codes, removing the app', async () => {
      const { user, agent } = await loggedIn('bob');
      const [{ sid }] = (await sessionsOf(user)) as [{ amr: string; sid: string }];
      const confirmed = await addApp(agent);
      assert.equal(confirmed.status, 303);
      assert.ok(offersChanges(await security(agent)));
      assert.equal((await addPasskey(agent, 'Security key')).status, 200, 'a phone, then a security key: one login');
      assert.equal((await post(agent, `${SECURITY}/recovery-codes`)).status, 200);
      assert.equal((await post(agent, `${SECURITY}/app/remove`)).status, 303);
      const apps = await server.store.db.selectFrom('authenticator_apps').select('user_id').where('user_id', '=', user.id).execute();
      assert.equal(apps.length, 0);
      assert.equal((await passkeysOf(user)).length, 1);
      // The same login, with the app proven in it (its clients are not logged out): the sid stays.
      assert.deepEqual(await sessionsOf(user), [{ amr: 'pwd otp mfa', sid }]);
    });

    test('a stale session cannot add a factor, so gains nothing', async () => {
      const { user, agent } = await loggedIn('carol');
      advance(6 * 60);
      assert.ok(!offersChanges(await security(agent)));
      assert.equal((await addPasskey(agent, 'Attacker key')).status, 403);
      assert.equal((await addApp(agent)).status, 403);
      assert.equal((await post(agent, `${SECURITY}/recovery-codes`)).status, 403);
      assert.deepEqual(await passkeysOf(user), []);
      assert.deepEqual(
        (await sessionsOf(user)).map((s) => s.amr),
        ['pwd'],
      );
    });

    test("the person's other sessions, and a copy of the old cookie, gain nothing", async () => {
      const { user, agent } = await loggedIn('dave');
      const other = new UserAgent(server.url);
      await other.login('dave');
      const copy = new UserAgent(server.url);
      copy.cookies.set(SESSION_COOKIE, agent.cookies.get(SESSION_COOKIE)!);

      assert.equal((await addPasskey(agent, 'Phone')).status, 200);
      const [phone] = await passkeysOf(user);
      assert.ok(!offersChanges(await security(other)), 'the other session must log in again');
      assert.equal((await post(other, `${SECURITY}/passkeys/rename`, { id: phone!.id, name: 'Mine now' })).status, 403);
      assert.equal((await post(other, `${SECURITY}/passkeys/remove`, { id: phone!.id })).status, 403);
      assert.equal((await addPasskey(other, 'Attacker key')).status, 403);
      assert.equal((await post(other, `${SECURITY}/recovery-codes`)).status, 403);
      assert.deepEqual(
        (await passkeysOf(user)).map((p) => p.name),
        ['Phone'],
      );
      assert.deepEqual((await sessionsOf(user)).map((s) => s.amr).sort(), ['pwd', 'pwd hwk user mfa']);
      assert.equal((await copy.fetch('/account/applications')).status, 303, 'the old token is no session any more');
    });

    test('the window ends five minutes after the proof, and adding more factors does not stretch it', async () => {
      const { user, agent } = await loggedIn('erin');
      advance(4 * 60);
      assert.equal((await addPasskey(agent, 'Phone')).status, 200, 'four minutes after the login: still recent');
      advance(4 * 60);
      assert.ok(offersChanges(await security(agent)), 'eight minutes after the password, four after the passkey');
      assert.equal((await addPasskey(agent, 'Security key')).status, 200);
      advance(90);
      const [phone] = await passkeysOf(user);
      assert.ok(!offersChanges(await security(agent)), 'five and a half minutes after the first passkey: log in again');
      assert.equal((await post(agent, `${SECURITY}/passkeys/remove`, { id: phone!.id })).status, 403);
      assert.equal((await addPasskey(agent, 'Third')).status, 403);
      assert.equal((await passkeysOf(user)).length, 2);
    });

    test('the recovery codes hint names the factors this server offers', async () => {
      const { agent } = await loggedIn('fred');
      assert.match(await security(agent), /Add a passkey or an authenticator app first/);
      if (backend !== sqlite) return;
      // PUBLIC_URL on an IP address and no WEBAUTHN_RP_ID: passkeys are off.
      const onIp = await startServer(sqlite, { LOG_LEVEL: 'warn' });
      try {
        await onIp.createUser('gina');
        const gina = new UserAgent(onIp.url);
        await gina.login('gina');
        const html = (await gina.visit(SECURITY)).html;
        assert.match(html, /Passkeys are not available on this server/);
        assert.doesNotMatch(html, /Add a passkey/);
        assert.match(html, /Set up an authenticator app first/);
      } finally {
        await onIp.close();
      }
    });
  });
}
