/**
 * Second-factor policy (SPEC §4.12): REQUIRE_SECOND_FACTOR forcing the set-up before a login
 * completes; step-up for a resource server made with `gatehouse resource create
 * --require-second-factor` (the code flow as oauth4webapi runs it, and the device flow); `amr`
 * in ID tokens and introspection; recovery codes; the throttles; and `gatehouse user
 * reset-second-factor` ending sessions. Driven over HTTP as a browser would, both backends.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import * as jose from 'jose';
import * as oauth from 'oauth4webapi';
import { BACKENDS, backendOptions, type Backend } from '../support/backends.ts';
import { deviceApp, poll, requestCodes } from '../support/device.ts';
import { authorizationUrl, discover, insecure, type App } from '../support/oauth-client.ts';
import { databaseUrl, gatehouse, type Run } from '../support/processes.ts';
import { secretOnPage, setUpApp, totpCode } from '../support/second-factors.ts';
import { PASSWORD, startServer, type TestServer } from '../support/server.ts';
import { UserAgent, formFields, type Outcome } from '../support/user-agent.ts';

const STEP = '/login/second-factor';
const SET_UP = '/login/second-factor/set-up';
const freshAddress = () => `2001:db8:${randomBytes(2).toString('hex')}:${randomBytes(2).toString('hex')}::1`;

function printed(run: Run): Record<string, unknown> {
  assert.equal(run.code, 0, `exit ${run.code}: ${run.stderr}`);
  return JSON.parse(run.stdout) as Record<string, unknown>;
}

/** A test server and its clock, moved on between logins so that each has TOTP steps of its own. */
async function clockedServer(backend: Backend, env: Record<string, string> = {}) {
  const server = await startServer(backend, { TRUST_PROXY: '127.0.0.1', LOG_LEVEL: 'warn', ...env });
  let offset = 0;
  return {
    server,
    now: () => Date.now() + offset,
    advance(seconds: number) {
      server.advance(seconds);
      offset += seconds * 1000;
    },
    cli: (...args: string[]) => gatehouse(args, { DATABASE_URL: databaseUrl(server.config), PUBLIC_URL: server.url }),
  };
}

const signedIn = async (agent: UserAgent) => (await agent.fetch('/account/applications')).status === 200;

/** The CSRF token of the signed-in page's forms (the navigation's Log out). */
async function csrfOf(agent: UserAgent): Promise<string> {
  const home = await agent.visit('/');
  return formFields(home.html, '/logout').get('_csrf')!;
}

/** Logs in with the password, then the code (password + app code: a complete login). */
async function logInWithCode(agent: UserAgent, username: string, code: string): Promise<Outcome> {
  const atStep = await agent.login(username);
  assert.ok(atStep.html.includes(`action="${STEP}"`), 'the second step is asked for');
  return agent.submit(atStep.html, STEP, { code });
}

for (const backend of BACKENDS) {
  describe(`REQUIRE_SECOND_FACTOR (${backend.name})`, backendOptions(backend), () => {
    const servers: TestServer[] = [];
    after(async () => {
      for (const server of servers) await server.close();
    });

    test('admins: an administrator without one sets up an app before anything else works; a user logs in as before', async () => {
      const { server, now } = await clockedServer(backend, { REQUIRE_SECOND_FACTOR: 'admins' });
      servers.push(server);
      await server.createUser('root', { admin: true });
      await server.createUser('user');
      const admin = new UserAgent(server.url);
      const page = await admin.login('root');
      assert.ok(page.html.includes('Your account needs a second factor before you can continue.'));
      assert.ok(page.html.includes(`action="${SET_UP}"`));
      assert.ok(!(await signedIn(admin)), 'nothing else works until it is set up');
      assert.equal((await admin.fetch('/admin/users')).status, 303);
      const secret = secretOnPage(page.html);
      const done = await admin.submit(page.html, SET_UP, { code: totpCode(secret, now()) });
      assert.equal(done.response.status, 200);
      assert.ok(await signedIn(admin));
      const users = await admin.visit('/admin/users');
      assert.match(users.html, /<td data-label="Second factor">authenticator app<\/td>/);
      assert.match(users.html, /<td data-label="Second factor">none<\/td>/);

      const plain = new UserAgent(server.url);
      await plain.login('user');
      assert.ok(await signedIn(plain), 'a user who is not an administrator is not asked');
    });

    test('all: everyone must set one up; removing the last factor is refused', async () => {
      const { server, now } = await clockedServer(backend, { REQUIRE_SECOND_FACTOR: 'all' });
      servers.push(server);
      await server.createUser('user');
      const agent = new UserAgent(server.url);
      const page = await agent.login('user');
      assert.ok(page.html.includes(`action="${SET_UP}"`));
      const wrong = await agent.submit(page.html, SET_UP, { code: totpCode(secretOnPage(page.html), now()) === '000000' ? '111111' : '000000' });
      assert.equal(wrong.response.status, 401);
      assert.ok(!(await signedIn(agent)), 'a wrong code sets nothing up');
      await agent.submit(wrong.html, SET_UP, { code: totpCode(secretOnPage(wrong.html), now()) });
      assert.ok(await signedIn(agent));
      const remove = await agent.fetch('/account/security/app/remove', { method: 'POST', body: new URLSearchParams({ _csrf: await csrfOf(agent) }) });
      assert.equal(remove.status, 409);
      assert.match(await remove.text(), /must have a second factor/);
    });

    test('a stricter setting ends, at their next request, the password-only sessions it now covers; the login then asks for the set-up', async () => {
      const { server: before } = await clockedServer(backend);
      const url = databaseUrl(before.config);
      await before.createUser('root', { admin: true });
      await before.createUser('user');
      const then = { admin: new UserAgent(before.url), person: new UserAgent(before.url) };
      await then.admin.login('root');
      await then.person.login('user');
      assert.ok((await signedIn(then.admin)) && (await signedIn(then.person)));

      // The same database (kept by the first server, which drops it on close), served with
      // REQUIRE_SECOND_FACTOR=admins; the browsers keep their session cookies.
      const { server, now } = await clockedServer(backend, { DATABASE_URL: url, REQUIRE_SECOND_FACTOR: 'admins' });
      servers.unshift(server);
      servers.push(before);
      const [admin, person] = [then.admin, then.person].map((agent) => {
        const moved = new UserAgent(server.url);
        for (const [name, value] of agent.cookies) moved.cookies.set(name, value);
        return moved;
      }) as [UserAgent, UserAgent];
      assert.ok(await signedIn(person), 'a person the setting does not cover keeps their session');
      assert.equal((await admin.fetch('/admin/users')).status, 303, 'the administrator’s password-only session no longer works');
      assert.ok(!(await signedIn(admin)));
      const sessions = await server.store.db.selectFrom('sessions').select('user_id').execute();
      assert.equal(sessions.length, 1, 'the session ended: its row is gone');
      const page = await admin.login('root');
      assert.ok(page.html.includes(`action="${SET_UP}"`), 'the login asks for the set-up');
      await admin.submit(page.html, SET_UP, { code: totpCode(secretOnPage(page.html), now()) });
      assert.ok(await signedIn(admin), 'with a second factor, the session lives');
    });

    test('an invalid value stops start-up with one clear line', async () => {
      const run = await gatehouse(['user', 'list'], { DATABASE_URL: 'sqlite::memory:', REQUIRE_SECOND_FACTOR: 'sometimes' });
      assert.notEqual(run.code, 0);
      assert.match(run.stderr.trim(), /^.*REQUIRE_SECOND_FACTOR must be one of none, admins, all, got "sometimes".*$/);
      assert.equal(run.stderr.trim().split('\n').length, 1);
    });
  });

  describe(`step-up, amr, recovery codes and reset (${backend.name})`, backendOptions(backend), () => {
    let clocked: Awaited<ReturnType<typeof clockedServer>>;
    let server: TestServer;
    let app: App;
    let resource: { uri: string; introspector: App };

    before(async () => {
      clocked = await clockedServer(backend, { LOGIN_FAILURES_PER_ACCOUNT: '10' });
      server = clocked.server;
      for (const name of ['alice', 'bob', 'dave', 'erin', 'frank']) await server.createUser(name);
      const created = printed(
        await clocked.cli(
          'resource',
          'create',
          '--uri',
          'https://vault.example/',
          '--name',
          'Vault',
          '--scope',
          'vault:read=Read the vault',
          '--require-second-factor',
          '--json',
        ),
      );
      resource = { uri: created.uri as string, introspector: await discover(server, created.client_id as string, { secret: created.client_secret as string }) };
      const { client } = await server.createClient({ name: 'Vault client', scope: 'openid vault:read' });
      app = await discover(server, client.id);
    });
    after(() => server?.close());

    async function exchange(authorization: Awaited<ReturnType<typeof authorizationUrl>>, outcome: Outcome) {
      assert.ok(outcome.redirect, `redirected back to the client (status ${outcome.response.status})`);
      const callback = oauth.validateAuthResponse(app.as, app.client, outcome.redirect, authorization.state);
      const response = await oauth.authorizationCodeGrantRequest(app.as, app.client, app.auth, callback, app.redirectUri, authorization.verifier, insecure);
      return oauth.processAuthorizationCodeResponse(app.as, app.client, response);
    }

    async function introspect(token: string) {
      const { as, client, auth } = resource.introspector;
      return oauth.processIntrospectionResponse(as, client, await oauth.introspectionRequest(as, client, auth, token, insecure));
    }

    test('a password login gets amr ["pwd"] for an ordinary resource; the vault asks for a second factor (set up on the way) before consent', async () => {
      const agent = new UserAgent(server.url);
      await agent.login('alice');
      const plain = await authorizationUrl(app, { scope: 'openid' });
      const plainTokens = await exchange(plain, await agent.authorize(plain.url));
      assert.deepEqual(jose.decodeJwt(plainTokens.id_token!).amr, ['pwd']);

      const vault = await authorizationUrl(app, { scope: 'openid vault:read', resource: resource.uri });
      const none = await agent.visit(vault.url.pathname + vault.url.search + '&prompt=none');
      assert.equal(none.redirect?.searchParams.get('error'), 'interaction_required');

      const asked = await agent.visit(vault.url.pathname + vault.url.search);
      assert.ok(asked.html.includes(`action="${SET_UP}"`), 'no second factor yet: its set-up, before the consent page');
      const consent = await agent.submit(asked.html, SET_UP, { code: totpCode(secretOnPage(asked.html), clocked.now()) });
      assert.ok(consent.html.includes('action="/oauth/authorize"'), 'then the consent page');
      const tokens = await exchange(vault, await agent.submit(consent.html, '/oauth/authorize', { decision: 'approve' }));
      assert.deepEqual(jose.decodeJwt(tokens.id_token!).amr, ['pwd', 'otp', 'mfa'], 'also when the app was set up in that login');
      const info = await introspect(tokens.access_token);
      assert.equal(info.active, true);
      assert.deepEqual(info.amr, ['pwd', 'otp', 'mfa']);
      // Refreshing needs nothing more, and keeps the login's amr.
      assert.ok(tokens.refresh_token);
      const refreshed = await oauth.processRefreshTokenResponse(
        app.as,
        app.client,
        await oauth.refreshTokenGrantRequest(app.as, app.client, app.auth, tokens.refresh_token, insecure),
      );
      assert.deepEqual((await introspect(refreshed.access_token)).amr, ['pwd', 'otp', 'mfa']);
    });

    test('a person with an app, signed in with password and code, goes straight to consent', async () => {
      const agent = new UserAgent(server.url);
      await agent.login('bob');
      const secret = await setUpApp(agent, clocked.now());
      clocked.advance(90);
      const fresh = new UserAgent(server.url);
      await logInWithCode(fresh, 'bob', totpCode(secret, clocked.now()));
      const vault = await authorizationUrl(app, { scope: 'openid vault:read', resource: resource.uri });
      const tokens = await exchange(vault, await fresh.authorize(vault.url));
      assert.deepEqual(jose.decodeJwt(tokens.id_token!).amr, ['pwd', 'otp', 'mfa']);
      assert.ok(await signedIn(agent), 'the session the app was set up in was replaced by one that proved it');
    });

    test('a code approved without a second factor is refused once its resource server comes to require one', async () => {
      const created = printed(
        await clocked.cli('resource', 'create', '--uri', 'https://ledger.example/', '--name', 'Ledger', '--scope', 'ledger:read=Read the ledger', '--json'),
      );
      const { client } = await server.createClient({ name: 'Ledger client', scope: 'ledger:read' });
      const ledgerApp = await discover(server, client.id);
      await server.createUser('gina');
      const agent = new UserAgent(server.url);
      await agent.login('gina');
      const request = await authorizationUrl(ledgerApp, { scope: 'ledger:read', resource: created.uri as string });
      const outcome = await agent.authorize(request.url);
      assert.ok(outcome.redirect, 'a password login is enough while the ledger asks for nothing more');
      const callback = oauth.validateAuthResponse(ledgerApp.as, ledgerApp.client, outcome.redirect, request.state);
      assert.equal((await clocked.cli('resource', 'update', created.uri as string, '--require-second-factor')).code, 0);
      const response = await oauth.authorizationCodeGrantRequest(
        ledgerApp.as,
        ledgerApp.client,
        ledgerApp.auth,
        callback,
        ledgerApp.redirectUri,
        request.verifier,
        insecure,
      );
      assert.equal(response.status, 400);
      const body = (await response.json()) as { error: string; error_description: string };
      assert.equal(body.error, 'invalid_grant');
      assert.match(body.error_description, /requires a login with a second factor/);
    });

    test('a grant approved without a second factor stops refreshing once its resource server comes to require one', async () => {
      const created = printed(
        await clocked.cli('resource', 'create', '--uri', 'https://till.example/', '--name', 'Till', '--scope', 'till:read=Read the till', '--json'),
      );
      const { client } = await server.createClient({ name: 'Till client', scope: 'till:read' });
      const tillApp = await discover(server, client.id);
      await server.createUser('hal');
      const agent = new UserAgent(server.url);
      await agent.login('hal');
      const request = await authorizationUrl(tillApp, { scope: 'till:read', resource: created.uri as string });
      const outcome = await agent.authorize(request.url);
      const callback = oauth.validateAuthResponse(tillApp.as, tillApp.client, outcome.redirect!, request.state);
      const tokens = await oauth.processAuthorizationCodeResponse(
        tillApp.as,
        tillApp.client,
        await oauth.authorizationCodeGrantRequest(tillApp.as, tillApp.client, tillApp.auth, callback, tillApp.redirectUri, request.verifier, insecure),
      );
      assert.equal((await clocked.cli('resource', 'update', created.uri as string, '--require-second-factor')).code, 0);
      const response = await oauth.refreshTokenGrantRequest(tillApp.as, tillApp.client, tillApp.auth, tokens.refresh_token!, insecure);
      assert.equal(response.status, 400);
      const body = (await response.json()) as { error: string; error_description: string };
      assert.equal(body.error, 'invalid_grant');
      assert.match(body.error_description, /requires a login with a second factor, and this grant was approved without/);
    });

    test('device approval asks for the second factor before consent', async () => {
      const device = await deviceApp(server, { scope: 'vault:read' });
      const codes = await requestCodes(device, { resource: resource.uri });
      const other = new UserAgent(server.url);
      // A session that proved no second factor: a password login of someone without one.
      await other.login('dave');
      const form = await other.visit(new URL(codes.verification_uri_complete!).pathname + new URL(codes.verification_uri_complete!).search);
      const stepped = await other.submit(form.html, '/device', { user_code: codes.user_code });
      assert.ok(stepped.html.includes(`action="${SET_UP}"`), 'dave has none: the set-up comes first');
      const back = await other.submit(stepped.html, SET_UP, { code: totpCode(secretOnPage(stepped.html), clocked.now()) });
      assert.ok(back.html.includes(`value="${codes.user_code}"`), 'back at the device page with the code filled in');
      const consent = await other.submit(back.html, '/device', { user_code: codes.user_code });
      assert.match(consent.html, /Only continue if you started this on a device of your own/);
      await other.submit(consent.html, '/device', { decision: 'approve' });
      clocked.advance(10); // past the polling interval: a first poll sooner is told to slow down
      const result = await poll(device, codes.device_code);
      assert.equal(result.status, 200, JSON.stringify(result.body));
      assert.deepEqual((await introspect(result.body.access_token as string)).amr, ['pwd', 'otp', 'mfa']);
    });

    test('recovery codes: ten, shown once, each used once; generating again voids the old ones; two at once: one login', async () => {
      const agent = new UserAgent(server.url);
      await agent.login('erin');
      const denied = await agent.fetch('/account/security/recovery-codes', { method: 'POST', body: new URLSearchParams({ _csrf: await csrfOf(agent) }) });
      assert.equal(denied.status, 409, 'not offered without a passkey or an app');
      await setUpApp(agent, clocked.now());
      const generate = async () => {
        const page = await agent.fetch('/account/security/recovery-codes', { method: 'POST', body: new URLSearchParams({ _csrf: await csrfOf(agent) }) });
        assert.equal(page.status, 200);
        return [...(await page.text()).matchAll(/<li><code>([a-z0-9-]+)<\/code><\/li>/g)].map((m) => m[1]!);
      };
      const old = await generate();
      assert.equal(old.length, 10);
      const codes = await generate();
      assert.equal(new Set([...old, ...codes]).size, 20);

      const voided = await logInWithCode(new UserAgent(server.url), 'erin', old[0]!);
      assert.equal(voided.response.status, 401, 'an old code no longer works');
      const once = new UserAgent(server.url);
      await logInWithCode(once, 'erin', codes[0]!.toUpperCase().replace('-', ' '));
      assert.ok(await signedIn(once), 'case and spacing do not matter');
      const twice = await logInWithCode(new UserAgent(server.url), 'erin', codes[0]!);
      assert.equal(twice.response.status, 401, 'a recovery code works once');

      const [first, second] = [new UserAgent(server.url), new UserAgent(server.url)];
      const pages = await Promise.all([first.login('erin'), second.login('erin')]);
      const answers = await Promise.all([first.submit(pages[0]!.html, STEP, { code: codes[1]! }), second.submit(pages[1]!.html, STEP, { code: codes[1]! })]);
      assert.deepEqual(answers.map((a) => a.response.status).sort(), [200, 401]);
      assert.equal([await signedIn(first), await signedIn(second)].filter(Boolean).length, 1);
    });

    test('gatehouse user reset-second-factor removes the app and recovery codes and ends the sessions; audited', async () => {
      const agent = new UserAgent(server.url);
      await agent.login('frank');
      await setUpApp(agent, clocked.now());
      assert.ok(await signedIn(agent));
      const run = printed(await clocked.cli('user', 'reset-second-factor', 'frank', '--json'));
      assert.deepEqual(run, { username: 'frank', passkeys: 0, authenticator_apps: 1, recovery_codes: 0, sessions_ended: true });
      assert.ok(!(await signedIn(agent)), 'their sessions are ended');
      const again = new UserAgent(server.url);
      await again.login('frank');
      assert.ok(await signedIn(again), 'the password alone logs in again');
      const audit = printed(await clocked.cli('audit', '--type', 'second_factor_reset', '--json')) as unknown as { type: string }[];
      assert.ok(Array.isArray(audit) && audit.length === 1);
      const help = await clocked.cli('user', 'reset-second-factor', '--help');
      assert.match(help.stdout, /ends their sessions/);
      const unknown = await clocked.cli('user', 'reset-second-factor', 'nobody');
      assert.equal(unknown.code, 2);
    });
  });

  describe(`wrong codes under the login throttles (${backend.name})`, backendOptions(backend), () => {
    test('per account: of 30 simultaneous wrong codes (limit 10), 10 are checked; then even the right code waits', async (t) => {
      const clocked = await clockedServer(backend, { LOGIN_FAILURES_PER_ACCOUNT: '10' });
      try {
        await clocked.server.createUser('mallory');
        const agent = new UserAgent(clocked.server.url);
        await agent.login('mallory');
        const secret = await setUpApp(agent, clocked.now());
        clocked.advance(90);
        const right = totpCode(secret, clocked.now());
        const wrong = right === '000000' ? '111111' : '000000';
        const steps = await Promise.all(Array.from({ length: 3 }, () => atStep(clocked.server, 'mallory', freshAddress())));
        const answers = await Promise.all(Array.from({ length: 30 }, (_, i) => sendCode(steps[i % 3]!, wrong)));
        const counts = tally(answers);
        t.diagnostic(JSON.stringify(counts));
        assert.equal(counts[401], 10);
        assert.equal(counts[429], 20);
        assert.equal((await sendCode(steps[0]!, right)).status, 429, 'the right code is refused unchecked');
        const password = await atStepStatus(clocked.server, 'mallory', freshAddress());
        assert.equal(password, 429, 'and so is the password');
      } finally {
        await clocked.server.close();
      }
    });

    test('per address: of 30 simultaneous wrong codes from one address (limit 5), 5 are checked', async (t) => {
      const clocked = await clockedServer(backend, { LOGIN_FAILURES_PER_ACCOUNT: '0', LOGIN_FAILURES_PER_ADDRESS: '5' });
      try {
        await clocked.server.createUser('mallory');
        const agent = new UserAgent(clocked.server.url);
        await agent.login('mallory');
        const secret = await setUpApp(agent, clocked.now());
        clocked.advance(90);
        const wrong = totpCode(secret, clocked.now()) === '000000' ? '111111' : '000000';
        const address = freshAddress();
        const step = await atStep(clocked.server, 'mallory', address);
        const answers = await Promise.all(Array.from({ length: 30 }, () => sendCode(step, wrong)));
        const counts = tally(answers);
        t.diagnostic(JSON.stringify(counts));
        assert.equal(counts[401], 5);
        assert.equal(counts[429], 25);
        const elsewhere = await atStep(clocked.server, 'mallory', freshAddress());
        assert.equal((await sendCode(elsewhere, wrong)).status, 401, 'another address is still checked');
      } finally {
        await clocked.server.close();
      }
    });
  });
}

/** A browser at `address` that typed the right password: at the second step. */
async function atStep(server: TestServer, username: string, address: string) {
  const agent = new UserAgent(server.url);
  const headers = { 'x-forwarded-for': address };
  const login = await agent.visit('/login', { headers });
  const fields = formFields(login.html, '/login');
  fields.set('username', username);
  fields.set('password', PASSWORD);
  const answer = await agent.fetch('/login', { method: 'POST', body: fields, headers });
  assert.equal(answer.status, 303);
  const page = await agent.visit(answer.headers.get('location')!, { headers });
  return { agent, address, fields: formFields(page.html, STEP) };
}

async function atStepStatus(server: TestServer, username: string, address: string): Promise<number> {
  const agent = new UserAgent(server.url);
  const headers = { 'x-forwarded-for': address };
  const fields = formFields((await agent.visit('/login', { headers })).html, '/login');
  fields.set('username', username);
  fields.set('password', PASSWORD);
  const answer = await agent.fetch('/login', { method: 'POST', body: fields, headers });
  await answer.arrayBuffer();
  return answer.status;
}

async function sendCode(step: Awaited<ReturnType<typeof atStep>>, code: string): Promise<Response> {
  const fields = new URLSearchParams(step.fields);
  fields.set('code', code);
  const response = await step.agent.fetch(STEP, { method: 'POST', body: fields, headers: { 'x-forwarded-for': step.address } });
  await response.arrayBuffer();
  return response;
}

function tally(responses: Response[]): Record<number, number> {
  const counts: Record<number, number> = {};
  for (const { status } of responses) counts[status] = (counts[status] ?? 0) + 1;
  return counts;
}
