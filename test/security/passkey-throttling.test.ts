/**
 * Failed passkey logins count as failed logins (SPEC §4.5, §4.12): on the account's counter
 * once the response names a credential of the account — the same counter its password
 * guesses use — and on the address's; of many simultaneous refused answers, at most the
 * limit are checked. Answers are made by hand, as an attacker would: right challenge, right
 * binding cookie, a credential ID of the account's, a signature of nobody's. Also: at the
 * second step after a password only the person's own passkey answers a second-step
 * challenge; and a challenge lasts five minutes, after which the purge removes it.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent, formFields } from '../support/user-agent.ts';
import { userWithStoredPasskey } from '../support/webauthn.ts';
import { purgeOnce } from '../../src/store/purge.ts';
import type { User } from '../../src/store/schema.ts';
import { hashToken } from '../../src/tokens.ts';

const base64url = (text: string) => Buffer.from(text).toString('base64url');

for (const backend of BACKENDS) {
  describe(`failed passkey logins are throttled (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;

    /** A browser at the login page: its cookies (CSRF secret), form fields, and a passkey challenge of its own. */
    async function visitor() {
      const agent = new UserAgent(server.url);
      const fields = formFields((await agent.visit('/login')).html, '/login');
      const options = await agent.fetch('/login/passkey/options', { method: 'POST', body: new URLSearchParams({ _csrf: fields.get('_csrf')! }) });
      assert.equal(options.status, 200);
      const { challenge, userVerification, rpId } = (await options.json()) as { challenge: string; userVerification: string; rpId: string };
      assert.equal(userVerification, 'required');
      assert.equal(rpId, 'localhost');
      return { agent, csrf: fields.get('_csrf')!, challenge };
    }

    /** An answer to the visitor's challenge, for `user`'s credential, signed by no one. */
    async function answer(at: Awaited<ReturnType<typeof visitor>>, user: User, credentialId: string, path = '/login/passkey'): Promise<Response> {
      const response = {
        id: credentialId,
        rawId: credentialId,
        type: 'public-key',
        response: {
          clientDataJSON: base64url(JSON.stringify({ type: 'webauthn.get', challenge: at.challenge, origin: server.url, crossOrigin: false })),
          authenticatorData: base64url('not authenticator data, not signed'),
          signature: base64url('no signature'),
          userHandle: base64url(user.id),
        },
        clientExtensionResults: {},
      };
      const sent = await at.agent.fetch(path, {
        method: 'POST',
        body: new URLSearchParams({ _csrf: at.csrf, response: JSON.stringify(response) }),
      });
      await sent.arrayBuffer();
      return sent;
    }

    const withPasskey = (username: string) => userWithStoredPasskey(server, username);

    before(async () => {
      server = await startServer(backend, { LOGIN_FAILURES_PER_ACCOUNT: '3', LOGIN_FAILURES_PER_ADDRESS: '0' }, 'localhost');
    });
    after(() => server?.close());

    test("refused answers use up the account's login failures, password included", async () => {
      const { user, credentialId } = await withPasskey('alice');
      for (let i = 0; i < 3; i++) assert.equal((await answer(await visitor(), user, credentialId)).status, 401);
      const throttled = await answer(await visitor(), user, credentialId);
      assert.equal(throttled.status, 429);
      assert.ok(Number(throttled.headers.get('retry-after')) > 0);
      // The right password is not checked either: the account's failures are used up.
      const agent = new UserAgent(server.url);
      const login = await agent.submit((await agent.visit('/login')).html, '/login', { username: 'alice', password: 'correct horse battery staple' });
      assert.equal(login.response.status, 429);
      const failed = await server.store.db
        .selectFrom('audit_events')
        .select('detail')
        .where('type', '=', 'login_failed')
        .where('user_id', '=', user.id)
        .execute();
      assert.equal(failed.length, 3);
      assert.ok(failed.every((row) => JSON.parse(row.detail!).method === 'passkey'));
    });

    test('of many simultaneous refused answers, at most the limit are checked', async () => {
      const { user, credentialId } = await withPasskey('bob');
      const visitors = await Promise.all(Array.from({ length: 12 }, () => visitor()));
      const statuses = (await Promise.all(visitors.map((at) => answer(at, user, credentialId)))).map((r) => r.status);
      assert.equal(statuses.filter((s) => s === 401).length, 3);
      assert.equal(statuses.filter((s) => s === 429).length, 9);
      assert.deepEqual(await server.store.db.selectFrom('sessions').selectAll().where('user_id', '=', user.id).execute(), []);
    });

    test("at the second step after a password, only the person's own passkey is taken", async () => {
      const { user: dave, credentialId: davesKey } = await withPasskey('dave');
      const { credentialId: erinsKey } = await withPasskey('erin');
      const agent = new UserAgent(server.url);
      const login = await agent.submit((await agent.visit('/login')).html, '/login', { username: 'dave', password: 'correct horse battery staple' });
      // A passkey makes the password alone insufficient: the second step, offering the passkey.
      assert.match(login.html, /Use a passkey/);
      const csrf = /data-csrf="([^"]+)"/.exec(login.html)![1]!;
      const options = await agent.fetch('/login/second-factor/passkey/options', { method: 'POST', body: new URLSearchParams({ _csrf: csrf }) });
      const { challenge, allowCredentials } = (await options.json()) as { challenge: string; allowCredentials: Array<{ id: string }> };
      assert.deepEqual(
        allowCredentials.map((c) => c.id),
        [davesKey],
      );
      const at = { agent, csrf, challenge };
      const sent = await answer(at, dave, erinsKey, '/login/second-factor/passkey');
      assert.equal(sent.status, 401);
      const [refused] = await server.store.db
        .selectFrom('audit_events')
        .select('detail')
        .where('type', '=', 'login_failed')
        .where('user_id', '=', dave.id)
        .execute();
      assert.equal(JSON.parse(refused!.detail!).reason, 'unknown_credential');
      // A login challenge of this same browser is not a second-step one.
      const loginOptions = await agent.fetch('/login/passkey/options', { method: 'POST', body: new URLSearchParams({ _csrf: csrf }) });
      const loginChallenge = ((await loginOptions.json()) as { challenge: string }).challenge;
      assert.equal((await answer({ agent, csrf, challenge: loginChallenge }, dave, davesKey, '/login/second-factor/passkey')).status, 401);
      const reasons = await server.store.db
        .selectFrom('audit_events')
        .select('detail')
        .where('type', '=', 'login_failed')
        .where('user_id', '=', dave.id)
        .execute();
      assert.deepEqual(
        reasons.map((row) => JSON.parse(row.detail!).reason),
        ['unknown_credential', 'unknown_challenge'],
      );
      assert.deepEqual(await server.store.db.selectFrom('sessions').selectAll().where('user_id', '=', dave.id).execute(), []);
      assert.equal((await server.store.db.selectFrom('pending_logins').selectAll().where('user_id', '=', dave.id).execute()).length, 1);
    });

    test('a challenge five minutes old is refused, and the purge removes it', async () => {
      const { user, credentialId } = await withPasskey('carol');
      const at = await visitor();
      const waiting = await visitor();
      server.advance(5 * 60 + 1);
      assert.equal((await answer(at, user, credentialId)).status, 401);
      const [refused] = await server.store.db
        .selectFrom('audit_events')
        .select('detail')
        .where('type', '=', 'login_failed')
        .where('user_id', '=', user.id)
        .execute();
      assert.equal(JSON.parse(refused!.detail!).reason, 'unknown_challenge');
      const challenge = hashToken(waiting.challenge);
      assert.equal((await server.store.db.selectFrom('webauthn_challenges').selectAll().where('challenge_hash', '=', challenge).execute()).length, 1);
      const counts = await purgeOnce(server.store, Date.now() + 5 * 60 * 1000 + 1000, 0);
      assert.ok((counts?.webauthn_challenges ?? 0) >= 2);
      assert.deepEqual(await server.store.db.selectFrom('webauthn_challenges').selectAll().execute(), []);
    });
  });
}
