/**
 * The authenticator app and recovery codes as the second step of a login (SPEC §4.12), driven
 * over HTTP as a browser would (the Chromium suite is test/browser/second-factors.test.ts):
 * a code accepted once, also when sent twice at once; wrong codes counted as login failures
 * per account and per address, under concurrency; malformed and over-long codes; a second
 * app refused; the half-done login opening nothing else.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { secretOnPage, setUpApp, totpCode } from '../support/second-factors.ts';
import { PASSWORD, startServer, type TestServer } from '../support/server.ts';
import { UserAgent, formFields } from '../support/user-agent.ts';

const STEP = '/login/second-factor';

/** A client address no other test uses. */
const freshAddress = () => `2001:db8:${randomBytes(2).toString('hex')}:${randomBytes(2).toString('hex')}::1`;

for (const backend of BACKENDS) {
  describe(`second factors at login (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    /** The server's clock: moved on between tests, so each has time steps of its own. */
    let offset = 0;
    const serverNow = () => Date.now() + offset;
    const advance = (seconds: number) => {
      server.advance(seconds);
      offset += seconds * 1000;
    };

    before(async () => {
      server = await startServer(backend, { TRUST_PROXY: '127.0.0.1', LOG_LEVEL: 'warn', LOGIN_FAILURES_PER_ACCOUNT: '10' });
    });
    after(async () => {
      await server?.close();
    });

    /** A person with an app (set up at the server's now); returns their agent, signed in, and the secret. */
    async function personWithApp(username: string) {
      await server.createUser(username);
      const agent = new UserAgent(server.url);
      await agent.login(username);
      const secret = await setUpApp(agent, serverNow());
      // The next login needs codes of later steps.
      advance(90);
      return { agent, secret };
    }

    /** A new browser that has typed the right password: at the second step. */
    async function atSecondStep(username: string, address = freshAddress()) {
      const agent = new UserAgent(server.url);
      const login = await agent.visit('/login', { headers: { 'x-forwarded-for': address } });
      const fields = formFields(login.html, '/login');
      fields.set('username', username);
      fields.set('password', PASSWORD);
      const answer = await agent.fetch('/login', { method: 'POST', body: fields, headers: { 'x-forwarded-for': address } });
      assert.equal(answer.status, 303);
      assert.match(answer.headers.get('location')!, /^\/login\/second-factor\?next=/);
      const page = await agent.visit(answer.headers.get('location')!, { headers: { 'x-forwarded-for': address } });
      return { agent, address, page, fields: formFields(page.html, STEP) };
    }

    async function sendCode(at: Awaited<ReturnType<typeof atSecondStep>>, code: string): Promise<Response> {
      const fields = new URLSearchParams(at.fields);
      fields.set('code', code);
      const response = await at.agent.fetch(STEP, { method: 'POST', body: fields, headers: { 'x-forwarded-for': at.address } });
      await response.arrayBuffer();
      return response;
    }

    const signedIn = async (agent: UserAgent) => (await agent.fetch('/account/applications')).status === 200;

    test('a right password alone opens no session; the right app code does, once', async () => {
      const { secret } = await personWithApp('alice');
      const at = await atSecondStep('alice');
      assert.ok(!(await signedIn(at.agent)), 'nothing works at the second step');
      assert.ok(at.page.html.includes('<label for="code">Code</label>'));
      const code = totpCode(secret, serverNow());
      const ok = await sendCode(at, code);
      assert.equal(ok.status, 303);
      assert.equal(ok.headers.get('location'), '/');
      assert.ok(await signedIn(at.agent));

      const again = await atSecondStep('alice');
      const replay = await sendCode(again, code);
      assert.equal(replay.status, 401, 'the same code again fails');
      assert.ok(!(await signedIn(again.agent)));
    });

    test('two concurrent submissions of one code: exactly one logs in', async () => {
      const { secret } = await personWithApp('bob');
      const first = await atSecondStep('bob');
      const second = await atSecondStep('bob');
      const code = totpCode(secret, serverNow());
      const answers = await Promise.all([sendCode(first, code), sendCode(second, code)]);
      assert.deepEqual(answers.map((a) => a.status).sort(), [303, 401]);
      // One pending login, the same code twice at once: one login too.
      advance(90);
      const third = await atSecondStep('bob');
      const code2 = totpCode(secret, serverNow());
      const twice = await Promise.all([sendCode(third, code2), sendCode(third, code2)]);
      const places = twice.map((a) => a.headers.get('location')).sort();
      assert.equal(places.filter((p) => p === '/').length, 1, `one login, not two: ${places.join(', ')}`);
      assert.match(
        places.find((p) => p !== '/')!,
        /^\/login\?/,
        'the other finds the login completed: back to the login page',
      );
    });

    test('over-long and malformed codes are refused with a clear message, uncounted', async () => {
      await personWithApp('carol');
      const at = await atSecondStep('carol');
      for (const [code, message] of [
        ['1'.repeat(65), 'too long'],
        ['12345', 'not a code'],
        ['<script>', 'not a code'],
        ['', 'Enter the 6-digit code'],
      ] as const) {
        const fields = new URLSearchParams(at.fields);
        fields.set('code', code);
        const answer = await at.agent.fetch(STEP, { method: 'POST', body: fields, headers: { 'x-forwarded-for': at.address } });
        assert.equal(answer.status, 400);
        const html = await answer.text();
        assert.ok(html.includes(message), `${JSON.stringify(code.slice(0, 10))}: ${message}`);
        assert.ok(!html.includes('<script>'));
      }
    });

    test('enrolling a second app while one exists is refused', async () => {
      const { secret } = await personWithApp('dave');
      const at = await atSecondStep('dave');
      const setUp = await at.agent.fetch('/login/second-factor/set-up', { headers: { 'x-forwarded-for': at.address } });
      assert.equal(setUp.status, 303);
      assert.match(setUp.headers.get('location')!, /^\/login\/second-factor\?/, 'no new secret: the code page instead');
      const fields = new URLSearchParams(at.fields);
      fields.set('code', totpCode(secret, serverNow()));
      const confirm = await at.agent.fetch('/login/second-factor/set-up', { method: 'POST', body: fields, headers: { 'x-forwarded-for': at.address } });
      assert.equal(confirm.status, 303);
      assert.match(confirm.headers.get('location')!, /^\/login\/second-factor\?/);
      assert.ok(!(await signedIn(at.agent)), 'a code sent to the set-up does not log in');
      assert.equal((await sendCode(at, totpCode(secret, serverNow()))).status, 303, 'the app in place still works');
    });

    test('a signed-in person without a second factor is sent back, and the set-up page opens only for them', async () => {
      const agent = new UserAgent(server.url);
      const page = await agent.visit(STEP);
      assert.ok(page.html.includes('action="/login"'), 'nobody at a second step: the login page');
      assert.throws(() => secretOnPage(page.html));
    });
  });
}
