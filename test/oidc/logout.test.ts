/**
 * Logout across applications (SPEC §4.10). RP-initiated logout driven as a relying party
 * does it — openid-client v6's `buildEndSessionUrl`, followed by a person's user agent — and
 * as attackers do: an open redirect, a cross-site link, a hint of someone else, a forged
 * hint. Back-channel logout received by a real endpoint that checks the logout token with
 * jose against the published JWKS, as a relying party would; retried, never blocking the
 * logout, never an SSRF path for a client no administrator registered. Both backends.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createRemoteJWKSet, decodeJwt, decodeProtectedHeader, exportJWK, generateKeyPair, jwtVerify, SignJWT } from 'jose';
import * as client from 'openid-client';
import { COMMAND_LINE } from '../../src/audit.ts';
import { disableUser, findUserNamed } from '../../src/accounts/users.ts';
import { BACKCHANNEL_LOGOUT_EVENT, LOGOUT_TOKEN_TYPE } from '../../src/identity/backchannel-logout.ts';
import { purgeOnce } from '../../src/store/purge.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { openIdLogin, startReceiver, type Receiver } from '../support/backchannel.ts';
import { until } from '../support/waits.ts';
import { serveMetadataDocument } from '../support/metadata-document.ts';
import { discover, obtainTokens, type App } from '../support/oauth-client.ts';
import { databaseUrl, gatehouse } from '../support/processes.ts';
import { PASSWORD, startServer, type TestServer } from '../support/server.ts';
import { testCaProblem } from '../support/tls.ts';
import { formFields, UserAgent } from '../support/user-agent.ts';

const LOGGED_OUT = 'https://notes.example/logged-out';

/** Whether the agent's session is alive: the home page greets the user instead of sending to /login. */
async function loggedInAs(agent: UserAgent): Promise<string | null> {
  const home = await agent.visit('/');
  return /You are logged in as <strong>([^<]+)<\/strong>/.exec(home.html)?.[1] ?? null;
}

/** The agent's own logout: the **Log out** button of the home page (POST /logout). */
async function logOutAtHome(agent: UserAgent): Promise<Response> {
  const home = await agent.visit('/');
  return agent.fetch('/logout', { method: 'POST', body: formFields(home.html, '/logout') });
}

/** A JWT's claims, unverified: to pick out a session's token among those received. */
const claimsOf = (jwt: string) => decodeJwt(jwt);

async function auditEvents(server: TestServer, type: string) {
  return server.store.db
    .selectFrom('audit_events')
    .select(['type', 'user_id', 'client_id', 'address', 'detail'])
    .where('type', '=', type)
    .orderBy('id')
    .execute();
}

for (const backend of BACKENDS) {
  describe(`logout (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let receiver: Receiver;
    let notes: App;
    let rp: client.Configuration;

    before(async () => {
      server = await startServer(backend);
      await server.createUser('alice');
      await server.createUser('bob');
      receiver = await startReceiver();
      const { client: registered } = await server.createClient({
        name: 'Notes',
        postLogoutRedirectUris: [LOGGED_OUT, 'http://127.0.0.1:8765/bye'],
        backchannelLogoutUri: receiver.url,
      });
      notes = await discover(server, registered.id);
      // The relying party's configuration from discovery, which announces the end_session_endpoint.
      rp = await client.discovery(new URL(server.url), registered.id, undefined, client.None(), { execute: [client.allowInsecureRequests] });
    });
    after(async () => {
      receiver?.close();
      await server?.close();
    });

    test("openid-client's end-session URL, followed: logged out at once, back to the registered URL with the state", async () => {
      const agent = new UserAgent(server.url);
      const { idToken } = await openIdLogin(notes, agent, 'alice');
      const url = client.buildEndSessionUrl(rp, { id_token_hint: idToken, post_logout_redirect_uri: LOGGED_OUT, state: 'af0ifjsldkj' });
      const outcome = await agent.visit(url.pathname + url.search);
      assert.equal(outcome.redirect?.href, `${LOGGED_OUT}?state=af0ifjsldkj`);
      assert.equal(await loggedInAs(agent), null, 'the session ended');
      const logouts = await auditEvents(server, 'logout');
      assert.equal(logouts.at(-1)?.user_id, (await findUserNamed(server.app.gatehouse, 'alice'))!.id);
    });

    test('an unregistered or merely similar post_logout_redirect_uri is never followed: Gatehouse shows its own page', async () => {
      const attempts = [
        'https://evil.example/',
        `${LOGGED_OUT}/`,
        `${LOGGED_OUT}?next=https://evil.example/`,
        'https://notes.example:444/logged-out',
        'http://127.0.0.1:9999/bye', // a registered loopback URL, another port: logout matches exactly
      ];
      for (const target of attempts) {
        const agent = new UserAgent(server.url);
        const { idToken } = await openIdLogin(notes, agent, 'alice');
        const url = client.buildEndSessionUrl(rp, { id_token_hint: idToken, post_logout_redirect_uri: target, state: 'x' });
        const outcome = await agent.visit(url.pathname + url.search);
        assert.equal(outcome.redirect, null, target);
        assert.equal(outcome.response.status, 200);
        assert.match(outcome.html, /You are logged out/);
        assert.doesNotMatch(outcome.html, /evil\.example/);
        assert.equal(await loggedInAs(agent), null);
      }
      // Without any client named, even a URL some client registered is not followed.
      const anonymous = await new UserAgent(server.url).visit(`/oauth/logout?${new URLSearchParams({ post_logout_redirect_uri: LOGGED_OUT })}`);
      assert.equal(anonymous.redirect, null);
      assert.match(anonymous.html, /You are logged out/);
    });

    test('a cross-site link without a hint asks first: the session lives until the person confirms with the CSRF-protected form', async () => {
      const agent = new UserAgent(server.url);
      await openIdLogin(notes, agent, 'alice');
      const query = new URLSearchParams({ client_id: notes.client.client_id, post_logout_redirect_uri: LOGGED_OUT, state: 's1' });
      const page = await agent.visit(`/oauth/logout?${query}`);
      assert.equal(page.response.status, 200);
      assert.equal(page.redirect, null);
      assert.match(page.html, /Notes asks to log you out of Gatehouse/);
      assert.match(page.html, /<button type="submit">Log out<\/button>/);
      assert.equal(await loggedInAs(agent), 'alice', 'the link alone logged nobody out');

      // A forged confirmation (another site cannot read the token) changes nothing.
      const forged = await agent.fetch('/oauth/logout', { method: 'POST', body: new URLSearchParams({ _csrf: 'forged', ...Object.fromEntries(query) }) });
      assert.equal(forged.status, 403);
      assert.equal(await loggedInAs(agent), 'alice');
      // The application's own POST (no CSRF token) goes on as a GET: the same question.
      const posted = await agent.visit('/oauth/logout', { method: 'POST', body: query });
      assert.match(posted.html, /<button type="submit">Log out<\/button>/);
      assert.equal(await loggedInAs(agent), 'alice');

      const confirmed = await agent.submit(page.html, '/oauth/logout');
      assert.equal(confirmed.redirect?.href, `${LOGGED_OUT}?state=s1`);
      assert.equal(await loggedInAs(agent), null);
    });

    test("a hint naming someone else asks first, and logs out whoever confirms, not the hint's user", async () => {
      const bobs = await openIdLogin(notes, new UserAgent(server.url), 'bob');
      const alice = new UserAgent(server.url);
      await alice.login('alice');
      const page = await alice.visit(`/oauth/logout?${new URLSearchParams({ id_token_hint: bobs.idToken })}`);
      assert.match(page.html, /You are logged in as <strong>alice<\/strong>/);
      assert.equal(await loggedInAs(alice), 'alice');
      const confirmed = await alice.submit(page.html, '/oauth/logout');
      assert.match(confirmed.html, /You are logged out/);
      assert.equal(await loggedInAs(alice), null);
    });

    test('bad requests get a clear 400 page and change nothing', async () => {
      const agent = new UserAgent(server.url);
      const { idToken } = await openIdLogin(notes, agent, 'alice');
      const other = await server.createClient({ name: 'Calendar', postLogoutRedirectUris: [LOGGED_OUT] });
      const { privateKey, publicKey } = await generateKeyPair('RS256');
      const ours = decodeProtectedHeader(idToken);
      const claims = claimsOf(idToken);
      // Same claims, same kid, another key: what an attacker who knows the token's shape could make.
      const forged = await new SignJWT(claims).setProtectedHeader({ alg: 'RS256', kid: ours.kid!, typ: 'JWT' }).sign(privateKey);
      const withKey = await new SignJWT(claims).setProtectedHeader({ alg: 'RS256', typ: 'JWT', jwk: await exportJWK(publicKey) }).sign(privateKey);
      const cases: [string, RegExp][] = [
        [`id_token_hint=${idToken}&client_id=${other.client.id}`, /not the client the &quot;id_token_hint&quot; was issued to/],
        [`id_token_hint=${forged}`, /not an ID token this server issued/],
        [`id_token_hint=${withKey}`, /not an ID token this server issued/],
        ['id_token_hint=not.a.jwt', /not an ID token this server issued/],
        [`id_token_hint=${idToken}&id_token_hint=${idToken}`, /repeated/],
        [`state=a&state=b`, /repeated/],
        [`post_logout_redirect_uri=${encodeURIComponent(LOGGED_OUT)}&post_logout_redirect_uri=x`, /repeated/],
        ['state=%FF', /not valid UTF-8/],
      ];
      for (const [query, message] of cases) {
        const outcome = await agent.visit(`/oauth/logout?${query}`);
        assert.equal(outcome.response.status, 400, query);
        assert.equal(outcome.redirect, null);
        assert.match(outcome.html, message, query);
        assert.equal(await loggedInAs(agent), 'alice', `nothing changed: ${query}`);
      }
      const posted = await agent.fetch('/oauth/logout', {
        method: 'POST',
        body: `id_token_hint=${forged}`,
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
      });
      assert.equal(posted.status, 400);
      assert.equal(await loggedInAs(agent), 'alice');
    });

    test('back-channel: every way a session ends sends one logout token, which verifies against the JWKS as the SPEC says', async () => {
      const jwks = createRemoteJWKSet(new URL('/oauth/jwks', server.url));
      // Each with where its delivery is audited as coming from: the browser's address, or the command line (none).
      const ends: [string, (agent: UserAgent) => Promise<unknown>, string | null][] = [
        ['POST /logout', logOutAtHome, '127.0.0.1'],
        ['RP-initiated logout', async () => {}, '127.0.0.1'], // filled below: needs the ID token
        [
          'user set-password',
          () => gatehouse(['user', 'set-password', 'alice', '--password-stdin'], { DATABASE_URL: databaseUrl(server.config) }, `${PASSWORD}\n`),
          null,
        ],
        ['user disabled', async () => disableUser(server.app.gatehouse, (await findUserNamed(server.app.gatehouse, 'alice'))!, COMMAND_LINE), null],
      ];
      for (const [how, end, address] of ends) {
        const agent = new UserAgent(server.url);
        const { sid, idToken } = await openIdLogin(notes, agent, 'alice');
        if (how === 'RP-initiated logout') await agent.visit(`/oauth/logout?${new URLSearchParams({ id_token_hint: idToken })}`);
        else await end(agent);
        const ofSession = () => receiver.tokens.filter((t) => claimsOf(t).sid === sid);
        await until(`a logout token arrives after ${how}`, () => ofSession().length > 0);
        const token = ofSession()[0]!;
        assert.ok(receiver.contentTypes.every((type) => type === 'application/x-www-form-urlencoded'));
        const { payload, protectedHeader } = await jwtVerify(token, jwks, {
          issuer: server.url,
          audience: notes.client.client_id,
          typ: LOGOUT_TOKEN_TYPE,
          algorithms: ['RS256'],
          requiredClaims: ['iat', 'exp', 'jti', 'sub', 'sid', 'events'],
        });
        assert.equal(protectedHeader.typ, 'logout+jwt');
        assert.equal(payload.sub, `acct:alice@127.0.0.1`);
        assert.equal(payload.sid, sid, how);
        assert.deepEqual(payload.events, { [BACKCHANNEL_LOGOUT_EVENT]: {} });
        assert.equal('nonce' in payload, false);
        assert.ok(payload.exp! - payload.iat! <= 120);
        await until(`the delivery after ${how} is audited`, async () =>
          (await auditEvents(server, 'backchannel_logout_delivered')).some((event) => JSON.parse(event.detail ?? '{}').sid === sid),
        );
        const delivered = (await auditEvents(server, 'backchannel_logout_delivered')).find((event) => JSON.parse(event.detail ?? '{}').sid === sid)!;
        assert.equal(delivered.address, address, `the delivery after ${how} is audited as coming from where the logout came from`);
        assert.equal(ofSession().length, 1, `one delivery for the session ended by ${how}`);
        if (how === 'user disabled') await server.store.db.updateTable('users').set({ disabled: 0 }).where('username', '=', 'alice').execute();
      }
      const audited = await auditEvents(server, 'backchannel_logout_delivered');
      assert.ok(
        audited.every((event) => event.client_id === notes.client.client_id && !/eyJ/.test(event.detail ?? '')),
        'no token in the audit trail',
      );
      assert.ok(!server.logs.some((line) => receiver.tokens.some((token) => line.includes(token))), 'no token in the logs');
    });

    test('a back-channel logout is audited as coming from where the session end came from: the browser, an administrator, not the command line', async () => {
      const deliveredFor = async (sid: string) => {
        await until('the delivery is audited', async () =>
          (await auditEvents(server, 'backchannel_logout_delivered')).some((event) => JSON.parse(event.detail ?? '{}').sid === sid),
        );
        return (await auditEvents(server, 'backchannel_logout_delivered')).find((event) => JSON.parse(event.detail ?? '{}').sid === sid)!;
      };
      // A person's logout in the browser: `gatehouse audit` shows the browser's address.
      const browser = new UserAgent(server.url);
      const { sid } = await openIdLogin(notes, browser, 'alice');
      await logOutAtHome(browser);
      assert.equal((await deliveredFor(sid)).address, '127.0.0.1');
      const listed = await gatehouse(['audit', '--type', 'backchannel_logout_delivered'], { DATABASE_URL: databaseUrl(server.config) });
      const line = listed.stdout.split('\n').find((entry) => entry.includes(`sid=${sid}`));
      assert.match(line ?? '', /  from=127\.0\.0\.1  /, listed.stdout);
      // An administrator disabling the person on a page: the administrator's address.
      const root = await server.createUser('root', { admin: true });
      const again = await openIdLogin(notes, new UserAgent(server.url), 'alice');
      const alice = (await findUserNamed(server.app.gatehouse, 'alice'))!;
      await disableUser(server.app.gatehouse, alice, { userId: root.id, address: '198.51.100.9' });
      try {
        assert.equal((await deliveredFor(again.sid)).address, '198.51.100.9');
      } finally {
        await server.store.db.updateTable('users').set({ disabled: 0 }).where('username', '=', 'alice').execute();
      }
    });

    test('a client with ES256 ID tokens gets ES256 logout tokens; a client that got no ID token in the session gets none', async () => {
      const es = await startReceiver();
      const plain = await startReceiver();
      try {
        const { client: esClient } = await server.createClient({ name: 'Elliptic', backchannelLogoutUri: es.url, idTokenAlg: 'ES256' });
        const { client: oauthOnly } = await server.createClient({ name: 'Plain OAuth', backchannelLogoutUri: plain.url });
        const agent = new UserAgent(server.url);
        const { idToken } = await openIdLogin(await discover(server, esClient.id), agent, 'alice');
        assert.equal(decodeProtectedHeader(idToken).alg, 'ES256');
        await obtainTokens(await discover(server, oauthOnly.id), agent, 'alice'); // no openid: no ID token
        await logOutAtHome(agent);
        await until('the ES256 logout token arrives', () => es.tokens.length === 1);
        assert.equal(decodeProtectedHeader(es.tokens[0]!).alg, 'ES256');
        await jwtVerify(es.tokens[0]!, createRemoteJWKSet(new URL('/oauth/jwks', server.url)), {
          typ: 'logout+jwt',
          algorithms: ['ES256'],
          audience: esClient.id,
        });
        assert.equal(plain.tokens.length, 0);
      } finally {
        es.close();
        plain.close();
      }
    });

    test('a receiver that fails is retried, and each failure and the delivery are audited', async () => {
      const flaky = await startReceiver((n) => (n === 1 ? 503 : 200));
      try {
        const { client: registered } = await server.createClient({ name: 'Flaky', backchannelLogoutUri: flaky.url });
        const agent = new UserAgent(server.url);
        const { sid } = await openIdLogin(await discover(server, registered.id), agent, 'alice');
        await logOutAtHome(agent);
        await until('the second attempt succeeds', () => flaky.tokens.length === 2);
        await until('the delivery is audited', async () =>
          (await auditEvents(server, 'backchannel_logout_delivered')).some((e) => e.client_id === registered.id),
        );
        const failures = (await auditEvents(server, 'backchannel_logout_failed')).filter((e) => e.client_id === registered.id);
        assert.equal(failures.length, 1);
        assert.deepEqual(JSON.parse(failures[0]!.detail!), { sid, attempt: 1, reason: 'answered HTTP 503', retrying: true });
        assert.notEqual(flaky.tokens[0], flaky.tokens[1], 'each attempt sends a fresh token (its own jti)');
      } finally {
        flaky.close();
      }
    });

    test('a receiver that hangs does not hold up the logout; the attempt is given up after 5 seconds and audited', async () => {
      const hanging = await startReceiver(() => 'hang');
      try {
        const { client: registered } = await server.createClient({ name: 'Hanging', backchannelLogoutUri: hanging.url });
        const agent = new UserAgent(server.url);
        await openIdLogin(await discover(server, registered.id), agent, 'alice');
        const response = await logOutAtHome(agent);
        assert.equal(response.status, 303);
        assert.equal(await loggedInAs(agent), null);
        await until('the receiver holds the request', () => hanging.held.length === 1);
        assert.equal(hanging.held[0]!.writableEnded, false, 'the logout was answered while the delivery still waited');
        await until('the attempt is given up and audited', async () =>
          (await auditEvents(server, 'backchannel_logout_failed')).some((e) => e.client_id === registered.id && /within 5000 ms/.test(e.detail ?? '')),
        );
      } finally {
        hanging.close();
      }
    });

    test('delivered rows are purged a day later', async () => {
      const queued = async () => (await server.store.db.selectFrom('backchannel_logouts').select('sid').execute()).length;
      assert.ok((await queued()) > 0);
      await purgeOnce(server.store, Date.now() + 25 * 3600 * 1000, 0);
      assert.equal(await queued(), 0);
    });
  });

  describe(
    `back-channel logout of a client no administrator registered (${backend.name})`,
    { ...backendOptions(backend), skip: backendOptions(backend).skip ?? testCaProblem() ?? false },
    () => {
      test('its back-channel URL on a private address is refused by the guarded fetch before connecting, and audited', async () => {
        const receiver = await startReceiver(() => 200, { tls: true });
        const document = await serveMetadataDocument('Document Notes', '/apps/notes.json', { backchannel_logout_uri: receiver.url });
        const database = await backend.create();
        try {
          // The document is on 127.0.0.1 too: a first server may fetch it, so that a person can log in with the client.
          const permissive = await startServer(backend, { DATABASE_URL: database.url, CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES: 'true' });
          await permissive.createUser('alice');
          const agent = new UserAgent(permissive.url);
          await openIdLogin(await discover(permissive, document.url, { redirectUri: 'http://127.0.0.1:51004/callback' }), agent, 'alice');
          await permissive.close();
          // The server as deployed: public addresses only.
          const server = await startServer(backend, { DATABASE_URL: database.url });
          try {
            const at = new UserAgent(server.url);
            for (const [name, value] of agent.cookies) at.cookies.set(name, value);
            assert.equal((await logOutAtHome(at)).status, 303);
            await until('the refusal is audited', async () => (await auditEvents(server, 'backchannel_logout_failed')).length === 1);
            const [failure] = await auditEvents(server, 'backchannel_logout_failed');
            assert.equal(failure!.client_id, document.url);
            const detail = JSON.parse(failure!.detail!) as Record<string, unknown>;
            assert.match(String(detail.reason), /127\.0\.0\.1, which is not a public address \(loopback\)/);
            assert.equal(detail.retrying, false, 'a refusal is not retried');
            assert.equal(receiver.tokens.length, 0, 'nothing reached the private address');
          } finally {
            await server.close();
          }
        } finally {
          receiver.close();
          document.close();
          await database.drop();
        }
      });
    },
  );
}
