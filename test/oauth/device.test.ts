/**
 * The device authorization grant (SPEC §4.7, RFC 8628) over real HTTP, on both backends: the
 * device's part through oauth4webapi's device functions, the person's part through /device.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as oauth from 'oauth4webapi';
import { DEVICE_CODE_GRANT_TYPE } from '../../src/oauth/grants/types.ts';
import { updateClient } from '../../src/store/clients.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { answerAtDevicePage, assertPollError, deviceApp, poll, pollRequest, requestCodes } from '../support/device.ts';
import { scrape } from '../support/metrics.ts';
import { discover, insecure, postForm, profile, refresh } from '../support/oauth-client.ts';
import { registerResourceServer } from '../support/resources.ts';
import { PASSWORD, startServer, type TestServer } from '../support/server.ts';
import { formFields, UserAgent } from '../support/user-agent.ts';

const USER_CODE = /^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/;

async function loggedIn(server: TestServer, username = 'alice'): Promise<UserAgent> {
  const agent = new UserAgent(server.url);
  await agent.login(username);
  return agent;
}

/** Posts a user code (and a decision) to /device as the form would, CSRF token included. */
async function enterCode(agent: UserAgent, userCode: string, extra: Record<string, string> = {}) {
  const form = await agent.visit('/device');
  const fields = formFields(form.html, '/device');
  fields.set('user_code', userCode);
  for (const [name, value] of Object.entries(extra)) fields.set(name, value);
  return agent.visit('/device', { method: 'POST', body: fields });
}

/** A code of the right form that no request has (each call a different one). */
let wrongCodes = 0;
function wrongCode(): string {
  const letters = 'BCDFGHJKLMNPQRSTVWXZ';
  const n = wrongCodes++;
  return `ZZZZ-ZZ${letters[Math.floor(n / 20) % 20]}${letters[n % 20]}`;
}

for (const backend of BACKENDS) {
  describe(`device authorization grant (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;

    before(async () => {
      server = await startServer(backend);
      await server.createUser('alice');
      await server.createUser('bob');
    });
    after(() => server?.close());

    test('the metadata announces the endpoint and the grant type', async () => {
      const app = await deviceApp(server);
      assert.equal(app.as.device_authorization_endpoint, `${server.url}/oauth/device_authorization`);
      assert.ok(app.as.grant_types_supported!.includes(DEVICE_CODE_GRANT_TYPE));
    });

    test('the whole flow: codes, pending, the person approves at /device, exactly one token response, then the API', async () => {
      const app = await deviceApp(server);
      const codes = await requestCodes(app);
      assert.match(codes.user_code, USER_CODE);
      assert.match(codes.device_code, /^gdc_[A-Za-z0-9_-]{43}$/);
      assert.equal(codes.verification_uri, `${server.url}/device`);
      assert.equal(codes.verification_uri_complete, `${server.url}/device?user_code=${codes.user_code}`);
      assert.equal(codes.expires_in, 600);
      assert.equal(codes.interval, 5);

      server.advance(5);
      await assertPollError(app, codes.device_code, 'authorization_pending');
      const agent = await loggedIn(server);
      const done = await answerAtDevicePage(agent, codes, 'approve');
      assert.equal(done.response.status, 200);
      assert.match(done.html, /Return to your device/);

      server.advance(5);
      const tokens = await oauth.processDeviceCodeResponse(app.as, app.client, await pollRequest(app, codes.device_code));
      assert.match(tokens.access_token, /^gat_/);
      assert.match(tokens.refresh_token!, /^grt_/);
      assert.equal(tokens.scope, 'annotation:read annotation:write');
      const me = await profile(server, tokens.access_token);
      assert.equal(me.status, 200);
      assert.equal(((await me.json()) as { username: string }).username, 'alice');
      // A device client refreshes like any other.
      assert.match((await refresh(app, tokens.refresh_token!)).access_token, /^gat_/);
      // The person's applications page lists it like any other.
      assert.match((await agent.visit('/account/applications')).html, /Kitchen TV/);
      // Used once: a replay is invalid_grant and revokes what the code issued.
      server.advance(5);
      await assertPollError(app, codes.device_code, 'invalid_grant');
      assert.equal((await profile(server, tokens.access_token)).status, 401);

      const audit = await server.store.db.selectFrom('audit_events').select('type').where('client_id', '=', app.client.client_id).orderBy('id').execute();
      assert.deepEqual(
        audit.map((e) => e.type).filter((t) => t !== 'token_refreshed' && t !== 'token_revoked'),
        ['device_authorization_requested', 'device_approved', 'token_issued', 'code_replay_detected'],
      );
      const stored = await server.store.db.selectFrom('device_codes').selectAll().execute();
      for (const row of stored) {
        assert.ok(
          !JSON.stringify(row).includes(codes.device_code) && !JSON.stringify(row).includes(codes.user_code.replace('-', '')),
          'only hashes are stored',
        );
      }
    });

    test('a device asks for a resource server: the consent page names it, and the token is for it alone', async () => {
      const files = await registerResourceServer(server, 'https://files.example/mcp', [{ name: 'files:read', description: 'Read your files' }], 'Files');
      const app = await deviceApp(server, { scope: 'files:read' });
      const codes = await requestCodes(app, { resource: 'https://files.example/mcp' });
      const agent = await loggedIn(server);
      const form = await agent.visit(`/device?user_code=${codes.user_code}`);
      const consent = await agent.submit(form.html, '/device', { user_code: codes.user_code });
      assert.match(consent.html, /on <strong class="resource">Files<\/strong>/);
      assert.match(consent.html, /Read your files/);
      await agent.submit(consent.html, '/device', { decision: 'approve' });
      server.advance(5);
      const tokens = await oauth.processDeviceCodeResponse(app.as, app.client, await pollRequest(app, codes.device_code));
      assert.equal(tokens.scope, 'files:read');
      const info = await oauth.processIntrospectionResponse(
        files.introspector.as,
        files.introspector.client,
        await oauth.introspectionRequest(files.introspector.as, files.introspector.client, files.introspector.auth, tokens.access_token, insecure),
      );
      assert.deepEqual([info.active, info.aud], [true, 'https://files.example/mcp']);
      assert.equal((await profile(server, tokens.access_token)).status, 401, "the service's own API refuses it");
    });

    test('scope narrows the request; the consent page names what is asked', async () => {
      const app = await deviceApp(server);
      const codes = await requestCodes(app, { scope: 'annotation:read' });
      const agent = await loggedIn(server);
      const consent = await enterCode(agent, codes.user_code.toLowerCase().replace('-', ' '));
      assert.equal(consent.response.status, 200, 'case, dashes and spaces do not matter');
      assert.match(consent.html, /Read your annotations/);
      assert.doesNotMatch(consent.html, /Create, edit and delete/);
      await agent.submit(consent.html, '/device', { decision: 'approve' });
      server.advance(5);
      const tokens = await oauth.processDeviceCodeResponse(app.as, app.client, await pollRequest(app, codes.device_code));
      assert.equal(tokens.scope, 'annotation:read');
    });

    test('consent is asked even for a trusted client, and Deny answers access_denied', async () => {
      const { client } = await server.createClient({ name: 'Trusted box', grantType: DEVICE_CODE_GRANT_TYPE, redirectUris: [], trusted: true });
      const app = await discover(server, client.id);
      const codes = await requestCodes(app);
      const done = await answerAtDevicePage(await loggedIn(server), codes, 'deny');
      assert.match(done.html, /Request denied/);
      server.advance(5);
      await assertPollError(app, codes.device_code, 'access_denied');
      // An answered code cannot be answered again.
      const again = await enterCode(await loggedIn(server, 'bob'), codes.user_code);
      assert.equal(again.response.status, 400);
      assert.match(again.html, /not valid/);
    });

    test('after expires_in: expired_token at the token endpoint, and the code is refused at /device', async () => {
      const app = await deviceApp(server);
      const codes = await requestCodes(app);
      server.advance(601);
      await assertPollError(app, codes.device_code, 'expired_token');
      const page = await enterCode(await loggedIn(server), codes.user_code);
      assert.equal(page.response.status, 400);
      assert.match(page.html, /expired/);
    });

    test('polling faster than the interval is slow_down, and the interval grows by 5 seconds each time', async () => {
      const app = await deviceApp(server);
      const codes = await requestCodes(app);
      await assertPollError(app, codes.device_code, 'slow_down'); // the interval applies before the first poll too: now 10 s
      server.advance(5);
      await assertPollError(app, codes.device_code, 'slow_down'); // 5 s < 10 s: now 15 s
      server.advance(10);
      await assertPollError(app, codes.device_code, 'slow_down'); // 10 s < 15 s (with room for a slow machine's real seconds): now 20 s
      server.advance(20);
      await assertPollError(app, codes.device_code, 'authorization_pending');
      const row = await server.store.db
        .selectFrom('device_codes')
        .select('poll_interval')
        .where('client_id', '=', app.client.client_id)
        .executeTakeFirstOrThrow();
      assert.equal(row.poll_interval, 20);
    });

    test('of 20 concurrent polls after approval exactly one gets tokens; the rest are told to slow down', async () => {
      const app = await deviceApp(server);
      const codes = await requestCodes(app);
      await answerAtDevicePage(await loggedIn(server), codes, 'approve');
      server.advance(5);
      const results = await Promise.all(Array.from({ length: 20 }, () => poll(app, codes.device_code)));
      const winners = results.filter((r) => r.status === 200);
      assert.equal(winners.length, 1, `${winners.length} polls got tokens`);
      for (const loser of results.filter((r) => r.status !== 200)) assert.deepEqual([loser.status, loser.body.error], [400, 'slow_down']);
      assert.equal((await profile(server, winners[0]!.body.access_token!)).status, 200);
      const issued = await server.store.db.selectFrom('grants').select('id').where('client_id', '=', app.client.client_id).execute();
      assert.equal(issued.length, 1);
    });

    test('approved, polled too soon: slow_down and nothing issued; used, polled too soon: slow_down and nothing revoked', async () => {
      const app = await deviceApp(server);
      const codes = await requestCodes(app);
      await answerAtDevicePage(await loggedIn(server), codes, 'approve');
      await assertPollError(app, codes.device_code, 'slow_down'); // 0 s < 5 s: now 10 s
      const grants = () => server.store.db.selectFrom('grants').select('id').where('client_id', '=', app.client.client_id).execute();
      assert.deepEqual(await grants(), []);
      server.advance(6);
      await assertPollError(app, codes.device_code, 'slow_down'); // 6 s < 10 s: now 15 s
      server.advance(15);
      const tokens = (await poll(app, codes.device_code)).body;
      assert.ok(tokens.access_token);
      // A replay sooner than the interval is told to slow down, and what the code issued lives on.
      await assertPollError(app, codes.device_code, 'slow_down');
      assert.equal((await profile(server, tokens.access_token)).status, 200);
      // In time, it is a replay: refused, and what the code issued revoked.
      server.advance(20);
      await assertPollError(app, codes.device_code, 'invalid_grant');
      assert.equal((await profile(server, tokens.access_token)).status, 401);
      assert.equal((await grants()).length, 1);
    });

    test('a refused exchange is a poll too: polled again at once, slow_down', async () => {
      const app = await deviceApp(server);
      const codes = await requestCodes(app, { scope: 'annotation:write' });
      await answerAtDevicePage(await loggedIn(server), codes, 'approve');
      await updateClient(server.store.db, app.client.client_id, { scopes: 'annotation:read' }); // every scope of the code taken
      server.advance(5);
      await assertPollError(app, codes.device_code, 'invalid_grant');
      await assertPollError(app, codes.device_code, 'slow_down');
    });

    test('a confidential device client authenticates; without its secret it is invalid_client', async () => {
      const app = await deviceApp(server, { confidential: true });
      const codes = await requestCodes(app);
      const bare = await postForm(server, '/oauth/device_authorization', { client_id: app.client.client_id });
      assert.equal(bare.status, 401);
      assert.equal(((await bare.json()) as { error: string }).error, 'invalid_client');
      await answerAtDevicePage(await loggedIn(server), codes, 'approve');
      server.advance(5);
      const stolen = await poll({ ...app, auth: oauth.None() }, codes.device_code);
      assert.deepEqual([stolen.status, stolen.body.error], [401, 'invalid_client']);
      server.advance(5);
      assert.equal((await poll(app, codes.device_code)).status, 200);
    });

    test('an administrator registers a device client on the admin page, without a redirect URL', async () => {
      await server.createUser('admin', { admin: true });
      const agent = await loggedIn(server, 'admin');
      const form = await agent.visit('/admin/oauthclients/new');
      assert.match(form.html, /<option value="urn:ietf:params:oauth:grant-type:device_code"/);
      const fields = formFields(form.html, '/admin/oauthclients');
      for (const [name, value] of Object.entries({
        name: 'Hall TV',
        grant_type: DEVICE_CODE_GRANT_TYPE,
        redirect_uri: '',
        client_type: 'public',
        scope: 'annotation:read',
      }))
        fields.set(name, value);
      const registered = await agent.visit('/admin/oauthclients', { method: 'POST', body: fields });
      assert.equal(registered.response.status, 200, registered.html);
      const clientId = /<code class="id" id="client-id">([0-9a-f-]{36})<\/code>/.exec(registered.html)![1]!;
      const codes = await requestCodes(await discover(server, clientId));
      assert.match(codes.user_code, USER_CODE);
    });

    test('a person who is not logged in logs in first and comes back to the code', async () => {
      const app = await deviceApp(server);
      const codes = await requestCodes(app);
      const agent = new UserAgent(server.url);
      const url = new URL(codes.verification_uri_complete!);
      const first = await agent.visit(url.pathname + url.search);
      assert.match(first.html, /action="\/login"/);
      const back = await agent.submit(first.html, '/login', { username: 'alice', password: PASSWORD });
      assert.equal(back.response.status, 200);
      assert.ok(back.html.includes(`value="${codes.user_code}"`), 'back at the form, with the code filled in');
      // The code form posted without a session leads through the login to the same code.
      const stranger = new UserAgent(server.url);
      const form = await stranger.visit('/login');
      const fields = formFields(form.html, '/login'); // any page's CSRF token will do
      fields.set('user_code', codes.user_code);
      const posted = await stranger.fetch('/device', { method: 'POST', body: fields });
      assert.equal(posted.status, 303);
      const next = new URL(posted.headers.get('location')!, server.url).searchParams.get('next');
      assert.equal(next, `/device?user_code=${codes.user_code}`);
    });

    test('CORS: browsers may call the device authorization endpoint from other origins', async () => {
      const preflight = await fetch(`${server.url}/oauth/device_authorization`, {
        method: 'OPTIONS',
        headers: { origin: 'https://app.example', 'access-control-request-method': 'POST' },
      });
      assert.equal(preflight.status, 204);
      assert.equal(preflight.headers.get('access-control-allow-origin'), '*');
      const app = await deviceApp(server);
      const answer = await postForm(server, '/oauth/device_authorization', { client_id: app.client.client_id }, { origin: 'https://app.example' });
      assert.equal(answer.status, 200);
      assert.equal(answer.headers.get('access-control-allow-origin'), '*');
      assert.equal(answer.headers.get('cache-control'), 'no-store');
    });

    test('bad input at the device authorization endpoint', async () => {
      const app = await deviceApp(server);
      const web = await server.createClient();
      const id = app.client.client_id;
      const cases: [string, Record<string, string> | string, number, string][] = [
        ['no client', {}, 400, 'invalid_request'],
        ['unknown client', { client_id: '00000000-0000-4000-8000-000000000000' }, 401, 'invalid_client'],
        ['malformed client', { client_id: "' or 1=1 --" }, 401, 'invalid_client'],
        ['a client of another grant type', { client_id: web.client.id }, 400, 'unauthorized_client'],
        ['an unknown scope', { client_id: id, scope: 'admin' }, 400, 'invalid_scope'],
        [
          'a scope the client may not have',
          { client_id: (await deviceApp(server, { scope: 'annotation:read' })).client.client_id, scope: 'annotation:write' },
          400,
          'invalid_scope',
        ],
        ['an unknown resource', { client_id: id, resource: 'https://api.example' }, 400, 'invalid_target'],
        ['two resources', `client_id=${id}&resource=${encodeURIComponent(server.url)}&resource=https://api.example`, 400, 'invalid_target'],
        ['a repeated scope', `client_id=${id}&scope=annotation:read&scope=annotation:write`, 400, 'invalid_request'],
        ['invalid UTF-8', `client_id=${id}&scope=%FF`, 400, 'invalid_request'],
      ];
      for (const [name, form, status, error] of cases) {
        const response = await postForm(server, '/oauth/device_authorization', form);
        const body = (await response.json()) as { error: string };
        assert.deepEqual([response.status, body.error], [status, error], name);
      }
      const json = await fetch(`${server.url}/oauth/device_authorization`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ client_id: id }),
      });
      assert.equal(json.status, 400);
      assert.equal((await fetch(`${server.url}/oauth/device_authorization`)).status, 405);
      assert.equal(await server.store.db.selectFrom('device_codes').select('hash').where('client_id', '=', web.client.id).executeTakeFirst(), undefined);
    });

    test('bad input at the token endpoint', async () => {
      const app = await deviceApp(server);
      const other = await deviceApp(server);
      const web = await server.createClient();
      const codes = await requestCodes(app);
      server.advance(5);
      const grant = DEVICE_CODE_GRANT_TYPE;
      const cases: [string, Record<string, string> | string, number, string][] = [
        ['no device code', { grant_type: grant, client_id: app.client.client_id }, 400, 'invalid_request'],
        ['no client', { grant_type: grant, device_code: codes.device_code }, 400, 'invalid_request'],
        ['a malformed device code', { grant_type: grant, client_id: app.client.client_id, device_code: '<script>' }, 400, 'invalid_grant'],
        ['an unknown device code', { grant_type: grant, client_id: app.client.client_id, device_code: `gdc_${'A'.repeat(43)}` }, 400, 'invalid_grant'],
        ["another client's device code", { grant_type: grant, client_id: other.client.client_id, device_code: codes.device_code }, 400, 'invalid_grant'],
        ['a client of another grant type', { grant_type: grant, client_id: web.client.id, device_code: codes.device_code }, 400, 'unauthorized_client'],
        [
          'a repeated device code',
          `grant_type=${encodeURIComponent(grant)}&client_id=${app.client.client_id}&device_code=a&device_code=b`,
          400,
          'invalid_request',
        ],
      ];
      for (const [name, form, status, error] of cases) {
        const response = await postForm(server, '/api/token', form);
        const body = (await response.json()) as { error: string };
        assert.deepEqual([response.status, body.error], [status, error], name);
      }
      // None of these counted as a poll of the real code.
      await assertPollError(app, codes.device_code, 'authorization_pending');
    });

    test('bad input at /device', async () => {
      const app = await deviceApp(server);
      const codes = await requestCodes(app);
      const agent = await loggedIn(server, 'bob');
      const malformed = await enterCode(agent, 'AEIO-UAEI');
      assert.equal(malformed.response.status, 400);
      assert.match(malformed.html, /A code is 8 letters/);
      const html = await enterCode(agent, '<script>alert(1)</script>');
      assert.equal(html.response.status, 400);
      assert.ok(!html.html.includes('<script>alert(1)'), 'what was typed is escaped');
      assert.equal((await enterCode(agent, codes.user_code, { decision: 'maybe' })).response.status, 400);
      assert.equal((await enterCode(agent, codes.user_code, { decision: 'approve', user_code: 'x' })).response.status, 400);
      const noCsrf = await agent.visit('/device', { method: 'POST', body: new URLSearchParams({ user_code: codes.user_code, decision: 'approve' }) });
      assert.equal(noCsrf.response.status, 403);
      const long = await agent.visit(`/device?user_code=${'B'.repeat(5000)}`);
      assert.equal(long.response.status, 200);
      // Still pending: nothing above answered it.
      server.advance(5);
      await assertPollError(app, codes.device_code, 'authorization_pending');
    });
  });

  describe(`guessing user codes is throttled (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;

    before(async () => {
      server = await startServer(backend, { LOGIN_FAILURES_PER_ACCOUNT: '3', LOGIN_FAILURES_PER_ADDRESS: '8' });
      for (const name of ['carol', 'dave', 'erin', 'frank']) await server.createUser(name);
    });
    after(() => server?.close());

    test('per user: after the limit even the right code is refused; counted in the audit trail and the metrics', async () => {
      const app = await deviceApp(server);
      const codes = await requestCodes(app);
      const agent = await loggedIn(server, 'carol');
      const before = (await scrape(server)).get('gatehouse_user_code_failures_total') ?? 0;
      for (let i = 0; i < 3; i++) assert.equal((await enterCode(agent, wrongCode())).response.status, 400);
      const refused = await enterCode(agent, codes.user_code);
      assert.equal(refused.response.status, 429);
      assert.ok(Number(refused.response.headers.get('retry-after')) > 0);
      assert.match(refused.html, /Too many wrong codes/);
      assert.equal((await scrape(server)).get('gatehouse_user_code_failures_total'), before + 3);
      const carol = await server.store.db.selectFrom('users').select('id').where('username', '=', 'carol').executeTakeFirstOrThrow();
      const failures = await server.store.db
        .selectFrom('audit_events')
        .select('detail')
        .where('type', '=', 'user_code_failed')
        .where('user_id', '=', carol.id)
        .execute();
      assert.equal(failures.length, 3);
      // Another person, from the same address, is not locked out by carol's guesses.
      const done = await answerAtDevicePage(await loggedIn(server, 'dave'), codes, 'approve');
      assert.equal(done.response.status, 200);
    });

    test('concurrent wrong guesses cannot outrun the limit', async () => {
      const agent = await loggedIn(server, 'erin');
      const results = await Promise.all(Array.from({ length: 10 }, () => enterCode(agent, wrongCode())));
      const statuses = results.map((r) => r.response.status).sort();
      assert.deepEqual(statuses, [400, 400, 400, 429, 429, 429, 429, 429, 429, 429]);
    });

    test('per address: the address limit holds across users', async () => {
      // carol's 3 + erin's 3 counted guesses so far on this address (8 allowed): frank gets 2 more.
      const agent = await loggedIn(server, 'frank');
      assert.equal((await enterCode(agent, wrongCode())).response.status, 400);
      assert.equal((await enterCode(agent, wrongCode())).response.status, 400);
      assert.equal((await enterCode(agent, wrongCode())).response.status, 429);
    });
  });
}
