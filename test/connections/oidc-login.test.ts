/**
 * Logging in through an OpenID Connect connection (SPEC §4.13), with panva's oidc-provider as
 * the upstream provider and oauth4webapi as the application that asked Gatehouse: who logs in
 * (a new person just in time, the same person again, an account with the same email that may
 * not be taken over, the verified-email link, the link after logging in), what the login
 * proves (`amr` `fed` in ID tokens and introspection; the provider's factors only with
 * --trust-mfa), the rules every other login path honours (REQUIRE_SECOND_FACTOR, step-up,
 * disabled people, disabled connections ending sessions), groups, and every failure ending on
 * a page that names the provider with nothing created. Both backends.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as jose from 'jose';
import * as oauth from 'oauth4webapi';
import { disableUser, findUserNamed } from '../../src/accounts/users.ts';
import { createGroup } from '../../src/accounts/groups.ts';
import { setConnectionEnabled } from '../../src/accounts/connections/connections.ts';
import { COMMAND_LINE } from '../../src/audit.ts';
import { userGroups } from '../../src/store/groups.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { authorizationUrl, discover, insecure, type App } from '../support/oauth-client.ts';
import { registerResourceServer, type ResourceServer } from '../support/resources.ts';
import { PASSWORD, startServer, type TestServer } from '../support/server.ts';
import { connect, logInThrough, throughProvider } from '../support/upstream-login.ts';
import { startOidcUpstream, type OidcUpstream } from '../support/upstream-providers.ts';
import { UserAgent, type Outcome } from '../support/user-agent.ts';
import { secretOnPage, totpCode } from '../support/second-factors.ts';

const SET_UP = '/login/second-factor/set-up';

for (const backend of BACKENDS) {
  describe(`logging in through an OpenID Connect connection on ${backend.name}`, backendOptions(backend), () => {
    let server: TestServer;
    let upstream: OidcUpstream;
    let app: App;
    let vault: ResourceServer;
    let corp: string;

    before(async () => {
      [server, upstream] = await Promise.all([startServer(backend, { LOG_LEVEL: 'info' }), startOidcUpstream()]);
      await server.createUser('alice');
      corp = (await connect(server, upstream, { name: 'Corp SSO', issuer: upstream.issuer, scope: 'openid email profile groups', groupsClaim: 'groups' })).id;
      const { client } = await server.createClient({ name: 'Notes', scope: 'openid profile email' });
      app = await discover(server, client.id);
      vault = await registerResourceServer(server, 'https://vault.example/', [{ name: 'vault:read', description: 'Read the vault' }]);
      await server.app.gatehouse.db.updateTable('resources').set({ require_second_factor: 1 }).where('uri', '=', vault.uri).execute();
    });
    after(async () => {
      await server?.close();
      await upstream?.close();
    });

    const users = async () => (await server.app.gatehouse.db.selectFrom('users').select('username').execute()).map((u) => u.username).sort();
    const audit = async (type: string) => server.app.gatehouse.db.selectFrom('audit_events').selectAll().where('type', '=', type).orderBy('id').execute();

    /** The application's authorization, started logged out, through the connection's button, to its redirect URL with a code. */
    async function authorizeThrough(agent: UserAgent, scope = 'openid profile email', extra: Record<string, string> = {}) {
      const authorization = await authorizationUrl(app, { scope, ...extra });
      const login = await agent.visit(authorization.url.pathname + authorization.url.search);
      const button = /href="(\/login\/connections\/[^"]+)"/.exec(login.html)?.[1]?.replaceAll('&amp;', '&');
      assert.ok(button, 'the login page offers the connection');
      assert.match(login.html, /Continue with Corp SSO/);
      let outcome = await throughProvider(agent, await agent.visit(button), new URL(upstream.issuer).origin);
      if (outcome.redirect === null && outcome.html.includes('action="/oauth/authorize"'))
        outcome = await agent.submit(outcome.html, '/oauth/authorize', { decision: 'approve' });
      return { authorization, outcome };
    }

    async function exchange({ authorization, outcome }: { authorization: Awaited<ReturnType<typeof authorizationUrl>>; outcome: Outcome }) {
      assert.ok(outcome.redirect, `back at the application (status ${outcome.response.status}): ${outcome.html.slice(0, 300)}`);
      const callback = oauth.validateAuthResponse(app.as, app.client, outcome.redirect, authorization.state);
      const response = await oauth.authorizationCodeGrantRequest(app.as, app.client, app.auth, callback, app.redirectUri, authorization.verifier, insecure);
      return oauth.processAuthorizationCodeResponse(app.as, app.client, response);
    }

    test('an unknown identity becomes a new person just in time; the application gets tokens whose amr is ["fed"]; the next login is the same person', async () => {
      upstream.nextLogin({ sub: 'u-1001', email: 'dana@corp.example', email_verified: true, name: 'Dana Scully', preferred_username: 'dana' });
      const agent = new UserAgent(server.url);
      const tokens = await exchange(await authorizeThrough(agent));
      const idToken = jose.decodeJwt(tokens.id_token!);
      assert.deepEqual(idToken.amr, ['fed']);
      assert.equal(idToken.email, 'dana@corp.example');
      assert.equal(idToken.email_verified, true);
      assert.equal(idToken.name, 'Dana Scully');
      assert.equal(idToken.preferred_username, 'dana');
      const dana = (await findUserNamed(server.app.gatehouse, 'dana'))!;
      assert.equal(dana.password_hash, '', 'no password');
      assert.equal(idToken.sub, `acct:dana@${new URL(server.url).hostname}`, "the ID token's sub is the Gatehouse userid");
      assert.ok((await audit('user_created')).some((row) => row.user_id === dana.id && String(row.detail).includes(corp)));
      assert.ok((await audit('upstream_login')).some((row) => row.user_id === dana.id));

      // Again, from another browser, with a new name at the provider: the same person, refreshed.
      upstream.nextLogin({ sub: 'u-1001', email: 'dana@corp.example', email_verified: true, name: 'Dana K. Scully', preferred_username: 'dana' });
      const again = await exchange(await authorizeThrough(new UserAgent(server.url)));
      assert.equal(jose.decodeJwt(again.id_token!).name, 'Dana K. Scully');
      assert.equal((await users()).filter((name) => name.startsWith('dana')).length, 1, 'no second account');
      // No token of the provider's in the logs or the audit trail.
      const trail = JSON.stringify(await server.app.gatehouse.db.selectFrom('audit_events').selectAll().execute());
      assert.doesNotMatch(trail + server.logs.join(''), /eyJ[\w-]+\.eyJ/, 'no JWT (an ID token) recorded');
    });

    test('an unverified or merely matching email never takes over an account: nothing is linked until the person logs in to it and confirms', async () => {
      // alice@example.com is alice's; the provider says the same address, verified even — but the connection has no --link-verified-email.
      upstream.nextLogin({ sub: 'attacker-1', email: 'alice@example.com', email_verified: true, name: 'Not Alice' });
      const attacker = new UserAgent(server.url);
      const before = await users();
      const outcome = await logInThrough(attacker, corp, new URL(upstream.issuer).origin);
      assert.match(outcome.html, /already has the email address of your Corp SSO identity/);
      assert.equal((await attacker.fetch('/account/applications')).status, 303, 'not logged in as alice');
      assert.deepEqual(await users(), before, 'no account created');
      const linked = await server.app.gatehouse.db.selectFrom('user_identities').selectAll().where('subject', '=', 'attacker-1').execute();
      assert.equal(linked.length, 0);
      // The link page needs alice's own login, after the identity was set aside: the attacker cannot confirm.
      const page = await attacker.visit('/login/connections/link');
      assert.match(page.html, /action="\/login"/, 'sent to log in first');

      // Alice herself: logs in with her password in the browser that came back from the provider, and confirms.
      upstream.nextLogin({ sub: 'alice-at-corp', email: 'alice@example.com', email_verified: false });
      const browser = new UserAgent(server.url);
      const exists = await logInThrough(browser, corp, new URL(upstream.issuer).origin);
      assert.match(exists.html, /Log in to connect/);
      const login = await browser.visit('/login?switch=1&next=%2Flogin%2Fconnections%2Flink');
      const confirm = await browser.submit(login.html, '/login', { username: 'alice', password: PASSWORD });
      assert.match(confirm.html, /Connect the Corp SSO identity/);
      const done = await browser.submit(confirm.html, '/login/connections/link');
      assert.match(done.html, /Identity connected/);
      assert.ok((await audit('identity_linked')).some((row) => String(row.detail).includes('"by":"login"')));
      // From now on the identity logs alice in.
      upstream.nextLogin({ sub: 'alice-at-corp', email: 'alice@example.com', email_verified: false });
      const later = new UserAgent(server.url);
      await logInThrough(later, corp, new URL(upstream.issuer).origin);
      assert.match((await later.visit('/')).html, /alice/);
    });

    test('with --link-verified-email, a verified email links the identity to its account; an unverified one does not', async () => {
      const ctx = server.app.gatehouse;
      const linking = await connect(server, upstream, { name: 'Linking SSO', issuer: upstream.issuer, linkVerifiedEmail: true });
      for (const name of ['vera', 'uma']) await server.createUser(name);
      upstream.nextLogin({ sub: 'uma-sub', email: 'uma@example.com', email_verified: false });
      const unverified = await logInThrough(new UserAgent(server.url), linking.id, new URL(upstream.issuer).origin);
      assert.match(unverified.html, /already has the email address/);
      upstream.nextLogin({ sub: 'vera-sub', email: 'vera@example.com', email_verified: true });
      const agent = new UserAgent(server.url);
      await logInThrough(agent, linking.id, new URL(upstream.issuer).origin);
      assert.match((await agent.visit('/')).html, /vera/, 'logged in as vera');
      const identity = await ctx.db.selectFrom('user_identities').selectAll().where('subject', '=', 'vera-sub').executeTakeFirstOrThrow();
      assert.equal(identity.user_id, (await findUserNamed(ctx, 'vera'))!.id);
    });

    test('a replayed callback, a callback carried to another browser, and a denial end on a page naming the provider; nothing is created', async () => {
      const before = await users();
      const provider = new URL(upstream.issuer).origin;
      // Replay: the same callback URL again, in the same browser.
      upstream.nextLogin({ sub: 'replay-1', email: 'replay1@corp.example', email_verified: true, preferred_username: 'replay1' });
      const person = new UserAgent(server.url);
      const callback = await followToCallback(await person.visit(`/login/connections/${corp}`), provider);
      const first = await person.visit(callback.pathname + callback.search);
      assert.equal(first.response.status, 200, 'logged in, at the home page');
      const replay = await person.visit(callback.pathname + callback.search);
      assert.equal(replay.response.status, 400);
      assert.match(replay.html, /This answer from Corp SSO cannot be used/);
      assert.match(replay.html, /Try again with Corp SSO/);

      // Another browser carrying someone's callback: refused, and it does not use up the owner's.
      upstream.nextLogin({ sub: 'replay-2', email: 'replay2@corp.example', email_verified: true, preferred_username: 'replay2' });
      const owner = new UserAgent(server.url);
      const ownerCallback = await followToCallback(await owner.visit(`/login/connections/${corp}`), provider);
      const stolen = await new UserAgent(server.url).visit(ownerCallback.pathname + ownerCallback.search);
      assert.equal(stolen.response.status, 400);
      assert.match(stolen.html, /Corp SSO/);
      assert.equal((await owner.visit(ownerCallback.pathname + ownerCallback.search)).response.status, 200, 'the owner’s login still completes');

      // A denial at the provider.
      upstream.nextLogin('deny');
      const denied = await logInThrough(new UserAgent(server.url), corp, provider);
      assert.equal(denied.response.status, 400);
      assert.match(denied.html, /Corp SSO did not let you log in/);
      const failures = await audit('upstream_login_failed');
      assert.ok(failures.some((row) => String(row.detail).includes('"kind":"denied"')));
      assert.ok(failures.some((row) => String(row.detail).includes('"kind":"state"')));
      assert.deepEqual(
        (await users()).filter((name) => !before.includes(name)),
        ['replay1', 'replay2'],
        'only the logins that completed made people',
      );
    });

    /** The callback URL the provider redirects the browser to (not followed). */
    async function followToCallback(outcome: Outcome, providerOrigin: string): Promise<URL> {
      const cookies = new Map<string, string>();
      let current = outcome;
      for (let hops = 0; current.redirect && hops < 10; hops++) {
        if (current.redirect.origin !== providerOrigin) return current.redirect;
        const headers = new Headers();
        if (cookies.size > 0) headers.set('cookie', [...cookies].map(([k, v]) => `${k}=${v}`).join('; '));
        const response = await fetch(current.redirect, { headers, redirect: 'manual' });
        for (const cookie of response.headers.getSetCookie()) {
          const [pair] = cookie.split(';');
          const at = pair!.indexOf('=');
          cookies.set(pair!.slice(0, at), pair!.slice(at + 1));
        }
        current = { response, redirect: new URL(response.headers.get('location')!, current.redirect), html: '' };
      }
      throw new Error('the provider did not redirect back');
    }

    test('a disabled person is refused; a connection without --create-accounts refuses strangers', async () => {
      const ctx = server.app.gatehouse;
      upstream.nextLogin({ sub: 'gone-1', email: 'gone@corp.example', email_verified: true, preferred_username: 'gone' });
      await logInThrough(new UserAgent(server.url), corp, new URL(upstream.issuer).origin);
      await disableUser(ctx, (await findUserNamed(ctx, 'gone'))!, COMMAND_LINE);
      upstream.nextLogin({ sub: 'gone-1', email: 'gone@corp.example', email_verified: true });
      const refused = await logInThrough(new UserAgent(server.url), corp, new URL(upstream.issuer).origin);
      assert.equal(refused.response.status, 403);
      assert.match(refused.html, /This account is disabled/);

      const closed = await connect(server, upstream, { name: 'Closed SSO', issuer: upstream.issuer, createAccounts: false });
      upstream.nextLogin({ sub: 'stranger', email: 'stranger@corp.example', email_verified: true });
      const before = await users();
      const stranger = await logInThrough(new UserAgent(server.url), closed.id, new URL(upstream.issuer).origin);
      assert.equal(stranger.response.status, 403);
      assert.match(stranger.html, /does not create accounts\. Ask an administrator/);
      assert.deepEqual(await users(), before);
    });

    test('groups named by the provider become memberships of the groups that exist, and leave with the next login that no longer names them', async () => {
      const ctx = server.app.gatehouse;
      await createGroup(ctx, 'engineering', COMMAND_LINE);
      await createGroup(ctx, 'admins-of-nothing', COMMAND_LINE);
      upstream.nextLogin({
        sub: 'g-1',
        email: 'grace@corp.example',
        email_verified: true,
        preferred_username: 'grace',
        groups: ['engineering', 'no-such-group'],
      });
      await logInThrough(new UserAgent(server.url), corp, new URL(upstream.issuer).origin);
      const grace = (await findUserNamed(ctx, 'grace'))!;
      assert.deepEqual(await userGroups(ctx.db, grace.id), ['engineering']);
      upstream.nextLogin({ sub: 'g-1', email: 'grace@corp.example', email_verified: true, groups: [] });
      await logInThrough(new UserAgent(server.url), corp, new URL(upstream.issuer).origin);
      assert.deepEqual(await userGroups(ctx.db, grace.id), []);
    });

    test('step-up: a login through a connection is one factor; the vault asks for Gatehouse’s own second factor before consent', async () => {
      upstream.nextLogin({ sub: 'step-1', email: 'sam@corp.example', email_verified: true, preferred_username: 'sam', amr: ['pwd', 'otp', 'mfa'] });
      const agent = new UserAgent(server.url);
      await logInThrough(agent, corp, new URL(upstream.issuer).origin);
      const authorization = await authorizationUrl(app, { scope: 'openid', resource: vault.uri });
      const asked = await agent.visit(authorization.url.pathname + authorization.url.search);
      assert.ok(asked.html.includes(`action="${SET_UP}"`), "the provider's mfa does not count without --trust-mfa: set one up here first");
    });

    test('with --trust-mfa the provider’s mfa counts: amr ["fed", …, "mfa"] and the vault’s consent comes at once', async () => {
      const trusted = await connect(server, upstream, { name: 'Trusted SSO', issuer: upstream.issuer, trustMfa: true });
      upstream.nextLogin({ sub: 'trust-1', email: 'tia@corp.example', email_verified: true, preferred_username: 'tia', amr: ['pwd', 'otp', 'mfa'] });
      const agent = new UserAgent(server.url);
      await logInThrough(agent, trusted.id, new URL(upstream.issuer).origin);
      const authorization = await authorizationUrl(app, { scope: 'openid', resource: vault.uri });
      const consent = await agent.visit(authorization.url.pathname + authorization.url.search);
      assert.ok(consent.html.includes('action="/oauth/authorize"'), 'the consent page');
      const tokens = await exchange({ authorization, outcome: await agent.submit(consent.html, '/oauth/authorize', { decision: 'approve' }) });
      assert.deepEqual(jose.decodeJwt(tokens.id_token!).amr, ['fed', 'pwd', 'otp', 'mfa']);
      const { as, client, auth } = vault.introspector;
      const info = await oauth.processIntrospectionResponse(as, client, await oauth.introspectionRequest(as, client, auth, tokens.access_token, insecure));
      assert.deepEqual(info.amr, ['fed', 'pwd', 'otp', 'mfa']);

      // A provider login of one factor through the same connection is just fed.
      upstream.nextLogin({ sub: 'trust-2', email: 'tom@corp.example', email_verified: true, preferred_username: 'tom', amr: ['pwd'] });
      const single = await exchange(await authorizeThroughConnection(trusted.id));
      assert.deepEqual(jose.decodeJwt(single.id_token!).amr, ['fed', 'pwd']);
    });

    async function authorizeThroughConnection(id: string) {
      const agent = new UserAgent(server.url);
      const authorization = await authorizationUrl(app, { scope: 'openid' });
      const login = await agent.visit(authorization.url.pathname + authorization.url.search);
      const next = /name="next" value="([^"]*)"/.exec(login.html)![1]!.replaceAll('&amp;', '&');
      let outcome = await logInThrough(agent, id, new URL(upstream.issuer).origin, next);
      if (outcome.redirect === null && outcome.html.includes('action="/oauth/authorize"'))
        outcome = await agent.submit(outcome.html, '/oauth/authorize', { decision: 'approve' });
      return { authorization, outcome };
    }

    test('disabling the connection ends the sessions that came through it; its button leaves the login page', async () => {
      const ctx = server.app.gatehouse;
      const temporary = await connect(server, upstream, { name: 'Temporary SSO', issuer: upstream.issuer });
      upstream.nextLogin({ sub: 'temp-1', email: 'tess@corp.example', email_verified: true, preferred_username: 'tess' });
      const agent = new UserAgent(server.url);
      await logInThrough(agent, temporary.id, new URL(upstream.issuer).origin);
      assert.equal((await agent.fetch('/account/applications')).status, 200);
      const password = new UserAgent(server.url);
      await password.login('alice');
      await setConnectionEnabled(ctx, temporary.id, false, COMMAND_LINE);
      assert.equal((await agent.fetch('/account/applications')).status, 303, 'logged out');
      assert.equal((await password.fetch('/account/applications')).status, 200, 'a password session stays');
      assert.doesNotMatch((await new UserAgent(server.url).visit('/login')).html, /Temporary SSO/);
      const start = await new UserAgent(server.url).visit(`/login/connections/${temporary.id}`);
      assert.equal(start.response.status, 403);
    });

    test('REQUIRE_SECOND_FACTOR covers a login through a connection as it covers a password', async () => {
      const strict = await startServer(backend, { REQUIRE_SECOND_FACTOR: 'all' });
      try {
        const id = (await connect(strict, upstream, { name: 'Corp SSO', issuer: upstream.issuer })).id;
        upstream.nextLogin({ sub: 'strict-1', email: 'sid@corp.example', email_verified: true, preferred_username: 'sid' });
        const agent = new UserAgent(strict.url);
        const outcome = await logInThrough(agent, id, new URL(upstream.issuer).origin);
        assert.ok(outcome.html.includes(`action="${SET_UP}"`), 'the set-up of a second factor comes before any session');
        assert.equal((await agent.fetch('/account/applications')).status, 303, 'no session yet');
        const secret = secretOnPage(outcome.html);
        await agent.submit(outcome.html, SET_UP, { code: totpCode(secret) });
        assert.equal((await agent.fetch('/account/applications')).status, 200, 'logged in once the app is set up');
        const session = await strict.app.gatehouse.db.selectFrom('sessions').select(['amr', 'connection_id']).executeTakeFirstOrThrow();
        assert.deepEqual({ ...session }, { amr: 'fed otp mfa', connection_id: id });

        // The next login through the connection asks for the app's code, as after a password.
        upstream.nextLogin({ sub: 'strict-1', email: 'sid@corp.example', email_verified: true });
        const again = new UserAgent(strict.url);
        const step = await logInThrough(again, id, new URL(upstream.issuer).origin);
        assert.ok(step.html.includes('action="/login/second-factor"'), 'the code is asked for');
        await again.submit(step.html, '/login/second-factor', { code: totpCode(secret, Date.now(), 1) });
        assert.equal((await again.fetch('/account/applications')).status, 200);
        // Both sessions came through the connection, second step or not: disabling it ends them.
        await setConnectionEnabled(strict.app.gatehouse, id, false, COMMAND_LINE);
        assert.equal((await agent.fetch('/account/applications')).status, 303);
        assert.equal((await again.fetch('/account/applications')).status, 303);
      } finally {
        await strict.close();
      }
    });

    test('the discovery document and the JWKS are fetched once for many logins (cached per their Cache-Control)', async () => {
      const discovery = upstream.requests('/.well-known/openid-configuration');
      const jwks = upstream.requests('/jwks');
      for (let i = 0; i < 3; i++) {
        upstream.nextLogin({ sub: `cache-${i}`, email: `cache${i}@corp.example`, email_verified: true });
        await logInThrough(new UserAgent(server.url), corp, new URL(upstream.issuer).origin);
      }
      assert.equal(upstream.requests('/.well-known/openid-configuration'), discovery);
      assert.equal(upstream.requests('/jwks'), jwks);
    });

    test('profile refresh: a changed email at the provider becomes the person’s email (unless someone has it)', async () => {
      const ctx = server.app.gatehouse;
      upstream.nextLogin({ sub: 'mover', email: 'mo@corp.example', email_verified: true, preferred_username: 'moe' });
      await logInThrough(new UserAgent(server.url), corp, new URL(upstream.issuer).origin);
      upstream.nextLogin({ sub: 'mover', email: 'mo.new@corp.example', email_verified: true });
      await logInThrough(new UserAgent(server.url), corp, new URL(upstream.issuer).origin);
      assert.equal((await findUserNamed(ctx, 'moe'))!.email, 'mo.new@corp.example');
      upstream.nextLogin({ sub: 'mover', email: 'alice@example.com', email_verified: true });
      await logInThrough(new UserAgent(server.url), corp, new URL(upstream.issuer).origin);
      assert.equal((await findUserNamed(ctx, 'moe'))!.email, 'mo.new@corp.example', "alice's address is hers");
    });
  });
}
