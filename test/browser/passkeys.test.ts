/**
 * Passkeys in Chromium (SPEC §4.12), with a virtual WebAuthn authenticator through the
 * DevTools protocol: a person adds a passkey at /account/security, logs out and logs in with
 * **Log in with a passkey**; then every refusal an attacker would try — a forged, replayed,
 * misdirected or doubly answered response, another user's credential, a sign count that
 * went back, an authenticator that did not verify its user — each refused with nothing
 * changed. Responses for the attacks are the browser's own, caught on their way to the server.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as oauth from 'oauth4webapi';
import type { BrowserContext, Page } from 'playwright-core';
import { BACKENDS, backendOptions, sqlite } from '../support/backends.ts';
import { browserOptions, launchBrowser, logIn, type TestBrowser } from '../support/browser.ts';
import { discover, insecure, obtainTokens } from '../support/oauth-client.ts';
import { registerResourceServer } from '../support/resources.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';
import { addVirtualAuthenticator, withoutAutofill, type VirtualAuthenticator } from '../support/webauthn.ts';
import type { User } from '../../src/store/schema.ts';

/** What the page's script posts to /login/passkey, caught and kept from the server. */
type Answer = Record<string, string>;

/** Clicks **Log in with a passkey** and keeps the answer the browser would have sent, which never arrives. */
export async function catchAnswer(page: Page): Promise<Answer> {
  let caught: Answer | undefined;
  await page.route('**/login/passkey', async (route) => {
    caught = Object.fromEntries(new URLSearchParams(route.request().postData() ?? ''));
    await route.abort();
  });
  await page.getByRole('button', { name: 'Log in with a passkey' }).click();
  await page
    .getByRole('alert')
    .filter({ hasText: /passkey/i })
    .waitFor();
  await page.unroute('**/login/passkey');
  assert.ok(caught, 'the browser sent no answer');
  return caught;
}

/** Posts an answer from the page, with its cookies (fetch from the page's own origin). */
export async function postAnswer(
  page: Page,
  answer: Answer,
): Promise<{ status: number; body: { redirect?: string; error?: string; error_description?: string } }> {
  return page.evaluate(async (fields) => {
    const response = await fetch('/login/passkey', { method: 'POST', body: new URLSearchParams(fields), credentials: 'same-origin' });
    return { status: response.status, body: (await response.json()) as { redirect?: string; error?: string; error_description?: string } };
  }, answer);
}

/** The CSRF token of the login form on the page (to send an answer from another page or after a logout). */
const csrfOf = (page: Page) => page.locator('#login-form input[name=_csrf]').inputValue();

/** The credential response inside an answer, to tamper with. */
const credentialOf = (answer: Answer) => JSON.parse(answer.response!) as { id: string; rawId: string; response: Record<string, string> };
const withCredential = (answer: Answer, credential: object): Answer => ({ ...answer, response: JSON.stringify(credential) });

for (const backend of BACKENDS) {
  describe(`passkeys in a browser (${backend.name})`, { ...backendOptions(backend), ...browserOptions() }, () => {
    let server: TestServer;
    let browser: TestBrowser;
    let alice: User;
    let bob: User;
    let aliceContext: BrowserContext;
    let page: Page;
    let authenticator: VirtualAuthenticator;

    const db = () => server.store.db;
    const sessionsOf = async (user: User) => db().selectFrom('sessions').select(['amr', 'id_hash']).where('user_id', '=', user.id).execute();
    const passkeysOf = (user: User) => db().selectFrom('passkeys').selectAll().where('user_id', '=', user.id).execute();
    const audited = async (type: string) =>
      (
        await db()
          .selectFrom('audit_events')
          .select(['user_id', 'detail'])
          .where('type', '=', type as never)
          .execute()
      ).map((row) => ({
        user: row.user_id,
        detail: JSON.parse(row.detail ?? '{}') as Record<string, unknown>,
      }));
    const failures = async (reason: string) =>
      (await audited('login_failed')).filter((event) => event.detail.method === 'passkey' && event.detail.reason === reason);

    async function addPasskey(on: Page, name: string) {
      await on.goto(new URL('/account/security', server.url).href);
      await on.getByLabel('Passkey name').fill(name);
      await on.getByRole('button', { name: 'Add a passkey' }).click();
      await on.getByRole('status').getByText('Passkey added.').waitFor();
    }

    async function logOut(on: Page) {
      await on.getByRole('button', { name: 'Log out' }).click();
      await on.waitForURL((url) => url.pathname === '/login');
    }

    async function logInWithPasskey(on: Page) {
      await on.getByRole('button', { name: 'Log in with a passkey' }).click();
      await on.waitForURL((url) => url.pathname !== '/login');
    }

    before(async () => {
      [server, browser] = await Promise.all([startServer(backend, {}, 'localhost'), launchBrowser()]);
      alice = await server.createUser('alice');
      bob = await server.createUser('bob');
      aliceContext = await withoutAutofill(browser);
      page = await aliceContext.newPage();
      authenticator = await addVirtualAuthenticator(page);
    });
    after(async () => {
      await browser?.close();
      await server?.close();
    });

    test('a person adds a passkey, logs out, and logs in with it without a password', async () => {
      await page.goto(new URL('/account/security', server.url).href);
      await logIn(page, 'alice');
      await page.getByRole('heading', { name: 'Security', level: 1 }).waitFor();
      await page.getByText('You have no passkey yet.').waitFor();
      await page.getByRole('link', { name: 'Security' }).waitFor();

      await addPasskey(page, 'Work laptop');
      const row = page.getByRole('row').filter({ has: page.getByRole('rowheader', { name: 'Work laptop' }) });
      assert.match((await row.textContent())!, /\d{4}-\d\d-\d\d \d\d:\d\d UTC\s*never/);
      const [credential] = await authenticator.credentials();
      assert.ok(credential?.isResidentCredential, 'a discoverable credential');
      assert.equal(Buffer.from(credential.userHandle!, 'base64').toString('utf8'), alice.id);
      const [stored] = await passkeysOf(alice);
      assert.equal(stored?.name, 'Work laptop');
      assert.equal(stored?.id, Buffer.from(credential.credentialId, 'base64').toString('base64url'));
      const [addedEvent, ...more] = await audited('second_factor_added');
      assert.equal(more.length, 0);
      assert.equal(addedEvent!.detail.factor, 'passkey', 'a passkey added is a second factor added, as an app is');
      assert.equal(addedEvent!.detail.name, 'Work laptop');

      await logOut(page);
      await page.getByLabel('Username or email').waitFor();
      assert.equal(await page.getByLabel('Username or email').getAttribute('autocomplete'), 'username webauthn');
      await logInWithPasskey(page);
      assert.equal(new URL(page.url()).pathname, '/');
      await page.getByRole('button', { name: 'Log out' }).waitFor();
      assert.deepEqual(
        (await sessionsOf(alice)).map((s) => s.amr),
        ['hwk user mfa'],
      );
      assert.deepEqual((await audited('login_succeeded')).at(-1)?.detail, { method: 'passkey', amr: 'hwk user mfa' });
      await page.goto(new URL('/account/security', server.url).href);
      assert.doesNotMatch((await row.textContent())!, /never/);
    });

    test("the browser's autofill offers the passkey on the login page", async () => {
      // Another browser holding the same passkey (synced, as passkeys are), with autofill:
      // the username field's conditional request logs in once the passkey is picked — by the
      // virtual authenticator, at once.
      const [credential] = await authenticator.credentials();
      const synced = await (await browser.newContext()).newPage();
      const copy = await addVirtualAuthenticator(synced);
      await copy.addCredential(credential!);
      await synced.goto(new URL('/login?next=%2Faccount%2Fsecurity', server.url).href);
      await synced.waitForURL((url) => url.pathname === '/account/security');
      await synced.getByRole('heading', { name: 'Security', level: 1 }).waitFor();
      assert.deepEqual(
        (await sessionsOf(alice)).map((s) => s.amr),
        ['hwk user mfa', 'hwk user mfa'],
      );
      // Without the authenticator, the login page's autofill waits (it would log in again at once).
      await copy.cdp.send('WebAuthn.removeVirtualAuthenticator', { authenticatorId: copy.id });
      await logOut(synced);
      await synced.context().close();
      assert.equal((await sessionsOf(alice)).length, 1);
      // The original, whose count the copy overtook, catches up (as a synced passkey's count does).
      const [used] = await passkeysOf(alice);
      await authenticator.removeCredential(credential!.credentialId);
      await authenticator.addCredential({ ...credential!, signCount: used!.sign_count + 5 });
    });

    test("the ID token and introspection carry the passkey login's amr", async () => {
      const agent = new UserAgent(server.url);
      for (const cookie of await aliceContext.cookies()) agent.cookies.set(cookie.name, cookie.value);
      const app = await discover(server, (await server.createClient({ name: 'Wiki' })).client.id);
      const tokens = await obtainTokens(app, agent, 'alice', { scope: 'openid' });
      assert.deepEqual(oauth.getValidatedIdTokenClaims(tokens)?.amr, ['hwk', 'user', 'mfa']);

      const files = await registerResourceServer(server, 'https://files.example', [{ name: 'files:read', description: 'Read your files' }]);
      const reader = await discover(server, (await server.createClient({ name: 'File reader', scope: 'files:read' })).client.id);
      const fileTokens = await obtainTokens(reader, agent, 'alice', { scope: 'files:read', resource: files.uri });
      const introspection = await oauth.processIntrospectionResponse(
        files.introspector.as,
        files.introspector.client,
        await oauth.introspectionRequest(files.introspector.as, files.introspector.client, files.introspector.auth, fileTokens.access_token, insecure),
      );
      assert.equal(introspection.active, true);
      assert.deepEqual(introspection.amr, ['hwk', 'user', 'mfa']);
    });

    test('an authenticator that does not verify its user is refused', async () => {
      await logOut(page);
      await authenticator.setUserVerified(false);
      try {
        await page.getByRole('button', { name: 'Log in with a passkey' }).click();
        await page
          .getByRole('alert')
          .filter({ hasText: /passkey/i })
          .waitFor();
        assert.equal(new URL(page.url()).pathname, '/login');
        assert.deepEqual(await sessionsOf(alice), []);
      } finally {
        await authenticator.setUserVerified(true);
      }
    });

    test('a forged, replayed, misdirected or doubly sent answer is refused, and changes nothing', async () => {
      await page.reload();
      const [before] = await passkeysOf(alice);

      // Forged: the signature altered. The challenge it answered is spent: the genuine answer fails after it.
      const genuine = await catchAnswer(page);
      const credential = credentialOf(genuine);
      const signature = Buffer.from(credential.response.signature!, 'base64url');
      signature[signature.length - 1]! ^= 1;
      const forged = withCredential(genuine, { ...credential, response: { ...credential.response, signature: signature.toString('base64url') } });
      assert.equal((await postAnswer(page, forged)).status, 401);
      assert.equal((await failures('not_verified')).length, 1);
      assert.equal((await postAnswer(page, genuine)).status, 401);
      assert.equal((await failures('unknown_challenge')).length, 1);

      // Another browser: its binding cookie names none of this browser's challenges.
      const misdirected = await catchAnswer(page);
      const other = await (await withoutAutofill(browser)).newPage();
      await other.goto(new URL('/login', server.url).href);
      const fromOther = await postAnswer(other, { ...misdirected, _csrf: await csrfOf(other) });
      assert.equal(fromOther.status, 401);
      assert.equal(fromOther.body.error_description, 'This passkey was not accepted. Try again, or log in with your password.');
      assert.equal((await failures('unknown_challenge')).length, 2);
      assert.deepEqual(await sessionsOf(alice), []);
      assert.deepEqual(await passkeysOf(alice), [before]);
      await other.context().close();

      // The same answer from the browser that asked: accepted — then replayed after a logout, refused.
      const accepted = await postAnswer(page, misdirected);
      assert.equal(accepted.status, 200);
      assert.equal(accepted.body.redirect, '/');
      assert.equal((await sessionsOf(alice)).length, 1);
      await page.goto(new URL('/', server.url).href);
      await logOut(page);
      assert.equal((await postAnswer(page, { ...misdirected, _csrf: await csrfOf(page) })).status, 401);
      assert.equal((await failures('unknown_challenge')).length, 3);
      assert.deepEqual(await sessionsOf(alice), []);

      // Two answers to one challenge at once: exactly one logs in. Both carry the browser's
      // cookies as they were before either was answered — from the page, the second could leave
      // after the first's login had renewed the CSRF secret, and be refused for that (403).
      const twice = await catchAnswer(page);
      const sender = new UserAgent(server.url);
      for (const cookie of await aliceContext.cookies()) sender.cookies.set(cookie.name, cookie.value);
      const send = () => sender.fetch('/login/passkey', { method: 'POST', body: new URLSearchParams(twice) });
      const statuses = (await Promise.all([send(), send()])).map((response) => response.status);
      assert.deepEqual(statuses.sort(), [200, 401]);
      assert.equal((await sessionsOf(alice)).length, 1);
      assert.equal((await failures('unknown_challenge')).length, 4, 'the second found the challenge gone');
      await sender.submit((await sender.visit('/')).html, '/logout');
      assert.deepEqual(await sessionsOf(alice), []);
      await page.reload();

      // A genuine answer, five minutes late: its challenge has expired.
      const late = await catchAnswer(page);
      server.advance(5 * 60 + 1);
      assert.equal((await postAnswer(page, late)).status, 401);
      assert.equal((await failures('unknown_challenge')).length, 5);
      assert.deepEqual(await sessionsOf(alice), []);
    });

    test("another user's credential is refused", async () => {
      const bobPage = await (await withoutAutofill(browser)).newPage();
      const bobAuthenticator = await addVirtualAuthenticator(bobPage);
      await bobPage.goto(new URL('/account/security', server.url).href);
      await logIn(bobPage, 'bob');
      await addPasskey(bobPage, 'Phone');
      assert.equal((await bobAuthenticator.credentials()).length, 1);
      await logOut(bobPage);
      const [alicePasskey] = await passkeysOf(alice);
      const before = await passkeysOf(bob);

      // Bob's credential, claiming to be Alice's account (the user handle), refused.
      const bobs = await catchAnswer(bobPage);
      const credential = credentialOf(bobs);
      const claimed = withCredential(bobs, { ...credential, response: { ...credential.response, userHandle: Buffer.from(alice.id).toString('base64url') } });
      assert.equal((await postAnswer(bobPage, claimed)).status, 401);
      assert.equal((await failures('user_handle_mismatch')).length, 1);

      // Bob's signature under Alice's credential ID and user handle: not Alice's key, refused.
      const again = await catchAnswer(bobPage);
      const signed = credentialOf(again);
      const swapped = withCredential(again, {
        ...signed,
        id: alicePasskey!.id,
        rawId: alicePasskey!.id,
        response: { ...signed.response, userHandle: Buffer.from(alice.id).toString('base64url') },
      });
      assert.equal((await postAnswer(bobPage, swapped)).status, 401);
      assert.equal((await failures('not_verified')).length, 2);
      assert.deepEqual(await sessionsOf(alice), []);
      assert.deepEqual(await sessionsOf(bob), []);
      assert.deepEqual(await passkeysOf(bob), before);
      await bobPage.context().close();
    });

    test('a sign count that does not grow refuses the login and is audited as a possible clone', async () => {
      const [stored] = await passkeysOf(alice);
      assert.ok(stored!.sign_count >= 1, `the authenticator counts (stored ${stored!.sign_count})`);
      const [credential] = await authenticator.credentials();
      // A copy of the key that has signed less often than the original: the next count is at most the stored one.
      await authenticator.removeCredential(credential!.credentialId);
      await authenticator.addCredential({ ...credential!, signCount: stored!.sign_count - 1 });
      await page.getByRole('button', { name: 'Log in with a passkey' }).click();
      await page.getByRole('alert').getByText('This passkey was not accepted. Try again, or log in with your password.').waitFor();
      const [clone] = await audited('passkey_sign_count_regressed');
      assert.equal(clone?.user, alice.id);
      assert.equal(clone?.detail.stored, stored!.sign_count);
      assert.equal(clone?.detail.presented, stored!.sign_count);
      assert.deepEqual(await sessionsOf(alice), []);
      assert.deepEqual(await passkeysOf(alice), [stored]);

      // The original, whose count is ahead, still logs in.
      await authenticator.removeCredential(credential!.credentialId);
      await authenticator.addCredential({ ...credential!, signCount: stored!.sign_count + 10 });
      await logInWithPasskey(page);
      assert.equal((await passkeysOf(alice))[0]?.sign_count, stored!.sign_count + 11);
    });

    test('renaming and removing need a recent login; removing ends the other sessions', async () => {
      // Another session of Alice's, elsewhere: her password, then — as she has a passkey, the
      // password alone no longer logs her in — the passkey as the second step (a synced copy).
      const elsewhere = await (await withoutAutofill(browser)).newPage();
      const copy = await addVirtualAuthenticator(elsewhere);
      const [credential] = await authenticator.credentials();
      await copy.addCredential({ ...credential!, signCount: credential!.signCount + 100 });
      await authenticator.removeCredential(credential!.credentialId);
      await authenticator.addCredential({ ...credential!, signCount: credential!.signCount + 200 });
      await elsewhere.goto(new URL('/account/applications', server.url).href);
      await logIn(elsewhere, 'alice');
      await elsewhere.getByRole('heading', { name: 'Use your passkey' }).waitFor();
      await elsewhere.getByRole('button', { name: 'Use a passkey' }).click();
      await elsewhere.getByRole('heading', { name: 'Your applications' }).waitFor();
      assert.deepEqual((await sessionsOf(alice)).map((s) => s.amr).sort(), ['hwk user mfa', 'pwd hwk user mfa']);

      server.advance(6 * 60);
      await page.goto(new URL('/account/security', server.url).href);
      await page.getByRole('link', { name: 'Log in again' }).waitFor();
      assert.equal(await page.getByRole('button', { name: 'Add a passkey' }).count(), 0);
      const [passkey] = await passkeysOf(alice);
      const csrf = await page.locator('form.logout input[name=_csrf]').inputValue();
      const stale = await page.evaluate(
        async ({ id, csrf }) => (await fetch('/account/security/passkeys/remove', { method: 'POST', body: new URLSearchParams({ id, _csrf: csrf }) })).status,
        { id: passkey!.id, csrf },
      );
      assert.equal(stale, 403);
      assert.equal((await passkeysOf(alice)).length, 1);

      await page.getByRole('link', { name: 'Log in again' }).click();
      await page.getByText('To change how you log in, log in again.').waitFor();
      await logInWithPasskey(page);
      await page.getByRole('heading', { name: 'Security', level: 1 }).waitFor();
      await page.getByLabel('New name for Work laptop').fill('Old laptop');
      await page.getByRole('button', { name: 'Rename' }).click();
      await page.getByRole('status').getByText('Passkey renamed.').waitFor();
      await page.getByRole('rowheader', { name: 'Old laptop' }).waitFor();
      assert.equal((await audited('passkey_renamed')).length, 1);

      const sessionsBefore = (await sessionsOf(alice)).length;
      assert.equal(sessionsBefore, 2);
      await page.getByRole('button', { name: 'Remove' }).click();
      await page.getByRole('status').getByText('Passkey removed.').waitFor();
      await page.getByText('You have no passkey yet.').waitFor();
      assert.equal((await sessionsOf(alice)).length, 1);
      assert.deepEqual(
        (await audited('second_factor_removed')).map((event) => event.detail.factor),
        ['passkey'],
      );
      await elsewhere.goto(new URL('/account/applications', server.url).href);
      assert.equal(new URL(elsewhere.url()).pathname, '/login');
      await elsewhere.context().close();

      // The authenticator still holds the removed passkey: it no longer logs in.
      await logOut(page);
      await page.getByRole('button', { name: 'Log in with a passkey' }).click();
      await page.getByRole('alert').getByText('This passkey was not accepted. Try again, or log in with your password.').waitFor();
      assert.equal((await failures('unknown_credential')).length, 1);
    });

    if (backend === sqlite) {
      test('on an IP address, no page offers passkeys', async () => {
        const onIp = await startServer(sqlite);
        try {
          const other = await (await browser.newContext()).newPage();
          await other.goto(new URL('/account/security', onIp.url).href);
          await onIp.createUser('carol');
          await logIn(other, 'carol');
          await other.getByText('Passkeys are not available on this server').waitFor();
          assert.equal(await other.getByRole('button', { name: 'Add a passkey' }).count(), 0);
          await logOut(other);
          await other.getByLabel('Password').waitFor();
          assert.equal(await other.getByRole('button', { name: 'Log in with a passkey' }).count(), 0);
          assert.equal(await other.getByLabel('Username or email').getAttribute('autocomplete'), 'username');
          const options = await other.evaluate(
            async (csrf) => (await fetch('/login/passkey/options', { method: 'POST', body: new URLSearchParams({ _csrf: csrf }) })).status,
            await csrfOf(other),
          );
          assert.equal(options, 404);
          await other.context().close();
        } finally {
          await onIp.close();
        }
      });
    }
  });
}
