/**
 * Attacks on logging in through connections (SPEC §4.13), both backends, each test named after
 * the behaviour that defeats it:
 * - pre-hijacking: an address claimed, never verified, at a provider anyone can sign up at,
 *   waiting for its owner's verified identity at the company's connection to be linked to it;
 *   an unverified address is therefore never kept;
 * - races: two callbacks of one new identity at once, and two new identities with one address
 *   at once (they show on PostgreSQL, whose requests run in parallel);
 * - a second identity with the verified address of a person already connected at the connection;
 * - a connection disabled while its provider answers, which must give no session;
 * - tampered and malformed callbacks and login links, and an over-long `sub`;
 * - a Connect started by one person and finished by the next at the same browser, after a
 *   logout or after logging in over them; logging out forgets the logins under way and the
 *   identities waiting in the browser (its cookies cleared);
 * - logging in again for /account/security through a provider that answers with an old login
 *   (`max_age=0` asked, the ID token's `auth_time` checked);
 * - a domain served by two connections, the required one second by name: its people's
 *   passwords still go to the required one.
 * The providers are panva's oidc-provider and the hostile one (test/support/upstream-providers.ts);
 * what an application is told of the account comes from ID tokens it gets with oauth4webapi.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import * as jose from 'jose';
import * as oauth from 'oauth4webapi';
import { setConnectionEnabled } from '../../src/accounts/connections/connections.ts';
import { createGroup } from '../../src/accounts/groups.ts';
import { createAccount } from '../../src/accounts/users.ts';
import { COMMAND_LINE } from '../../src/audit.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { authorizationUrl, discover, insecure, type App } from '../support/oauth-client.ts';
import { PASSWORD, startServer, type TestServer } from '../support/server.ts';
import { connect, logInThrough, throughProvider } from '../support/upstream-login.ts';
import { startHostileProvider, startOidcUpstream, type HostileProvider, type OidcUpstream, type UpstreamAccount } from '../support/upstream-providers.ts';
import { formFields, UserAgent, type Outcome } from '../support/user-agent.ts';

/** How many times each race is run: enough to show it on PostgreSQL, few enough to stay quick. */
const RACES = 5;

/** Who the browser is logged in as, as the home page says (null: not logged in). */
async function whoIs(agent: UserAgent): Promise<string | null> {
  const home = await agent.visit('/');
  return /You are logged in as <strong>([^<]*)<\/strong>/.exec(home.html)?.[1] ?? null;
}

/** The CSRF token of a signed-in page's forms (the home page's Log out). */
async function csrfOf(agent: UserAgent): Promise<string> {
  return formFields((await agent.visit('/')).html, '/logout').get('_csrf')!;
}

/** Follows `outcome`'s redirect through the provider, stopping at the redirect back to Gatehouse (not visited). */
async function toCallback(outcome: Outcome, providerOrigin: string): Promise<string> {
  const cookies = new Map<string, string>();
  let target = outcome.redirect;
  for (let hops = 0; target !== null && hops < 20; hops++) {
    if (target.origin !== providerOrigin) return target.pathname + target.search;
    const headers = new Headers();
    if (cookies.size > 0) headers.set('cookie', [...cookies].map(([k, v]) => `${k}=${v}`).join('; '));
    const response = await fetch(target, { headers, redirect: 'manual' });
    for (const cookie of response.headers.getSetCookie()) {
      const [pair] = cookie.split(';');
      const at = pair!.indexOf('=');
      cookies.set(pair!.slice(0, at), pair!.slice(at + 1));
    }
    await response.body?.cancel();
    const location = response.headers.get('location');
    target = location === null ? null : new URL(location, target);
  }
  throw new Error('the provider did not redirect back');
}

for (const backend of BACKENDS) {
  describe(`attacks on logging in through connections on ${backend.name}`, backendOptions(backend), () => {
    let server: TestServer;
    let publicIdp: OidcUpstream;
    let corpIdp: OidcUpstream;
    let hostile: HostileProvider;
    let app: App;
    /** A provider anyone can sign up at, whose addresses are not the company's to vouch for. */
    let pub: string;
    /** The company's provider: trusted to link verified addresses, and for groups. */
    let corp: string;

    before(async () => {
      [server, publicIdp, corpIdp, hostile] = await Promise.all([startServer(backend), startOidcUpstream(), startOidcUpstream(), startHostileProvider()]);
      pub = (await connect(server, publicIdp, { name: 'Public', issuer: publicIdp.issuer })).id;
      corp = (
        await connect(server, corpIdp, {
          name: 'Corp',
          issuer: corpIdp.issuer,
          scope: 'openid email profile groups',
          groupsClaim: 'groups',
          linkVerifiedEmail: true,
        })
      ).id;
      await createGroup(server.app.gatehouse, 'finance', COMMAND_LINE);
      for (const name of ['alice', 'bob']) await server.createUser(name);
      const { client } = await server.createClient({ name: 'Notes', scope: 'openid profile email groups' });
      app = await discover(server, client.id);
    });
    after(async () => {
      await server?.close();
      await publicIdp?.close();
      await corpIdp?.close();
      await hostile?.close();
    });

    const origin = (provider: { issuer: string }) => new URL(provider.issuer).origin;
    /** The server errors logged so far (an unexpected exception is a 500 page). */
    const serverErrors = () => server.logs.filter((line) => line.includes('"msg":"unexpected error"')).length;
    const accountsWithEmail = async (email: string) =>
      (await server.app.gatehouse.db.selectFrom('users').select('username').where('email', '=', email).execute()).map((row) => row.username);

    /** The claims of the ID token an application gets for the person logged in at `agent` (consenting if asked). */
    async function claimsSeenByApp(agent: UserAgent): Promise<jose.JWTPayload> {
      const authorization = await authorizationUrl(app, { scope: 'openid email groups' });
      let outcome = await agent.visit(authorization.url.pathname + authorization.url.search);
      assert.doesNotMatch(outcome.html, /action="\/login"/, 'logged in already');
      if (outcome.redirect === null) outcome = await agent.submit(outcome.html, '/oauth/authorize', { decision: 'approve' });
      const callback = oauth.validateAuthResponse(app.as, app.client, outcome.redirect!, authorization.state);
      const response = await oauth.authorizationCodeGrantRequest(app.as, app.client, app.auth, callback, app.redirectUri, authorization.verifier, insecure);
      return jose.decodeJwt((await oauth.processAuthorizationCodeResponse(app.as, app.client, response)).id_token!);
    }

    /** A login started in a fresh browser and walked through the provider, up to the callback (not visited). */
    async function callbackOf(idp: OidcUpstream, connectionId: string, account: UpstreamAccount) {
      const agent = new UserAgent(server.url);
      const start = await agent.visit(`/login/connections/${connectionId}`);
      idp.nextLogin(account);
      return { agent, callback: await toCallback(start, origin(idp)) };
    }

    test('an unverified address claimed at one provider is not kept, so the owner’s verified identity at another connection is never linked to the claimant’s account', async () => {
      // Mallory signs up at the public provider with Victor's address, never verifying it.
      publicIdp.nextLogin({ sub: 'mallory', email: 'victor@corp.example', email_verified: false, preferred_username: 'victor' });
      const attacker = new UserAgent(server.url);
      await logInThrough(attacker, pub, origin(publicIdp));
      assert.equal(await whoIs(attacker), 'victor', 'a new account, named as she asked');
      assert.equal((await claimsSeenByApp(attacker)).email, undefined, 'applications are told no address for it');

      // Victor logs in through the company's provider for the first time: an account of his own.
      corpIdp.nextLogin({ sub: 'victor-corp', email: 'victor@corp.example', email_verified: true, preferred_username: 'victor', groups: ['finance'] });
      const victim = new UserAgent(server.url);
      await logInThrough(victim, corp, origin(corpIdp));
      const victimName = await whoIs(victim);
      assert.ok(victimName !== null && victimName !== 'victor', `Victor is not in Mallory's account (${victimName})`);
      const his = await claimsSeenByApp(victim);
      assert.equal(his.email, 'victor@corp.example');
      assert.equal(his.email_verified, true);
      assert.deepEqual(his.groups, ['finance']);

      // Mallory logs in again: her account, with neither his address nor his groups.
      publicIdp.nextLogin({ sub: 'mallory', email: 'victor@corp.example', email_verified: false });
      const again = new UserAgent(server.url);
      await logInThrough(again, pub, origin(publicIdp));
      assert.equal(await whoIs(again), 'victor');
      const hers = await claimsSeenByApp(again);
      assert.equal(hers.email, undefined);
      assert.deepEqual(hers.groups, []);
      assert.notEqual(hers.sub, his.sub);
    });

    test('an unverified address from a provider leaves the new account without an email address; a later login that vouches for it fills it in', async () => {
      publicIdp.nextLogin({ sub: 'uma-public', email: 'uma@else.example', email_verified: false, preferred_username: 'uma' });
      const first = new UserAgent(server.url);
      await logInThrough(first, pub, origin(publicIdp));
      assert.equal(await whoIs(first), 'uma');
      const before = await claimsSeenByApp(first);
      assert.equal(before.email, undefined);
      assert.equal(before.email_verified, undefined);
      assert.deepEqual(await accountsWithEmail('uma@else.example'), []);

      publicIdp.nextLogin({ sub: 'uma-public', email: 'uma@else.example', email_verified: true });
      const later = new UserAgent(server.url);
      await logInThrough(later, pub, origin(publicIdp));
      assert.equal(await whoIs(later), 'uma', 'the same person');
      const after = await claimsSeenByApp(later);
      assert.equal(after.email, 'uma@else.example');
      assert.equal(after.email_verified, true);
    });

    test('two callbacks of one new identity at once make one person, and both browsers are logged in as that person', async () => {
      const errors = serverErrors();
      for (let i = 0; i < RACES; i++) {
        const account = { sub: `twin-${i}`, preferred_username: `twin${i}`, name: 'Twin' };
        const [a, b] = [await callbackOf(publicIdp, pub, account), await callbackOf(publicIdp, pub, account)];
        const [ra, rb] = await Promise.all([a.agent.visit(a.callback), b.agent.visit(b.callback)]);
        assert.deepEqual([ra.response.status, rb.response.status], [200, 200], `#${i}: both at the home page`);
        assert.equal(await whoIs(a.agent), `twin${i}`, `#${i}`);
        assert.equal(await whoIs(b.agent), `twin${i}`, `#${i}: the same person, not twin${i}-2`);
        const accounts = await server.app.gatehouse.db.selectFrom('users').select('username').where('username', 'like', `twin${i}%`).execute();
        assert.equal(accounts.length, 1, `#${i}: one account`);
      }
      assert.equal(serverErrors(), errors, 'no server error');
    });

    test('two new identities with one verified address at once make one account with it; the other is asked to log in to that account, never a second one or an error', async () => {
      const errors = serverErrors();
      for (let i = 0; i < RACES; i++) {
        const email = `shared${i}@else.example`;
        const a = await callbackOf(publicIdp, pub, { sub: `shared-a-${i}`, email, email_verified: true, preferred_username: `shareda${i}` });
        const b = await callbackOf(publicIdp, pub, { sub: `shared-b-${i}`, email, email_verified: true, preferred_username: `sharedb${i}` });
        const outcomes = await Promise.all([a.agent.visit(a.callback), b.agent.visit(b.callback)]);
        const names = await Promise.all([whoIs(a.agent), whoIs(b.agent)]);
        const won = names.findIndex((name) => name !== null);
        assert.ok(won !== -1 && names[1 - won] === null, `#${i}: exactly one browser is logged in (${names})`);
        assert.equal(outcomes[1 - won]!.response.status, 200, `#${i}`);
        assert.match(outcomes[1 - won]!.html, /already has the email address of your Public identity/, `#${i}`);
        assert.deepEqual(await accountsWithEmail(email), [names[won]], `#${i}: one account has the address`);
      }
      assert.equal(serverErrors(), errors, 'no server error');
    });

    test('a second identity at a connection with the verified address of a person already connected there is refused on a page naming the provider, not an error', async () => {
      corpIdp.nextLogin({ sub: 'pat-corp', email: 'pat@corp.example', email_verified: true, preferred_username: 'pat' });
      const pat = new UserAgent(server.url);
      await logInThrough(pat, corp, origin(corpIdp));
      assert.equal(await whoIs(pat), 'pat');
      // Another account at the provider (renamed, re-created) with Pat's verified address.
      corpIdp.nextLogin({ sub: 'pat-corp-again', email: 'pat@corp.example', email_verified: true });
      const other = new UserAgent(server.url);
      const outcome = await logInThrough(other, corp, origin(corpIdp));
      assert.equal(outcome.response.status, 403);
      assert.match(outcome.html, /Corp/);
      assert.equal(await whoIs(other), null, 'not logged in as Pat');
      // Pat's own identity still logs her in.
      corpIdp.nextLogin({ sub: 'pat-corp', email: 'pat@corp.example', email_verified: true });
      const again = new UserAgent(server.url);
      await logInThrough(again, corp, origin(corpIdp));
      assert.equal(await whoIs(again), 'pat');
    });

    test('a tampered or malformed callback, or login link, ends on a page of its own, never a server error, and logs nobody in', async () => {
      const errors = serverErrors();
      const TAMPERED: Array<[string, (callback: URL) => string]> = [
        ['another iss', (u) => (u.searchParams.set('iss', 'https://evil.example'), u.pathname + u.search)],
        ['an id_token added', (u) => (u.searchParams.set('id_token', 'x.y.z'), u.pathname + u.search)],
        ['a JARM response added', (u) => (u.searchParams.set('response', 'x.y.z'), u.pathname + u.search)],
        ['the code twice', (u) => `${u.pathname}${u.search}&code=zzz`],
        ['a code of bad UTF-8', (u) => (u.searchParams.delete('code'), `${u.pathname}${u.search}&code=%FF%FE`)],
        ['a code of 20000 characters', (u) => (u.searchParams.set('code', 'a'.repeat(20000)), u.pathname + u.search)],
        ['an error with the code', (u) => (u.searchParams.set('error', 'access_denied'), u.pathname + u.search)],
        ['no code', (u) => (u.searchParams.delete('code'), u.pathname + u.search)],
        ['a state of bad UTF-8', (u) => `${u.pathname}?state=%C0%80&code=x`],
        ['an empty state', (u) => `${u.pathname}?state=&code=x`],
        ['a state in array syntax', (u) => `${u.pathname}?state[]=x&code=y`],
        ['an unknown connection', () => '/login/connections/nope/callback?state=x&code=y'],
        ['a connection id of 500 characters', () => `/login/connections/${'a'.repeat(500)}/callback?state=x&code=y`],
      ];
      for (const [i, [name, tamper]] of TAMPERED.entries()) {
        const { agent, callback } = await callbackOf(publicIdp, pub, { sub: `tampered-${i}`, preferred_username: `tampered${i}` });
        const outcome = await agent.visit(tamper(new URL(callback, server.url)));
        assert.ok(outcome.response.status >= 400 && outcome.response.status < 500, `${name}: ${outcome.response.status}`);
        assert.equal(await whoIs(agent), null, `${name}: not logged in`);
      }
      for (const link of [`/login/connections/${pub}?next=a&next=b`, `/login/connections/${pub}?login_hint=%FF`]) {
        const outcome = await new UserAgent(server.url).visit(link);
        assert.equal(outcome.response.status, 400, link);
      }
      // A `next` of another site's: the login goes through, and ends here.
      publicIdp.nextLogin({ sub: 'next-elsewhere', preferred_username: 'nextelsewhere' });
      const agent = new UserAgent(server.url);
      const outcome = await throughProvider(agent, await agent.visit(`/login/connections/${pub}?next=%2F%2Fevil.example`), origin(publicIdp));
      assert.equal(outcome.redirect, null, `not sent to ${outcome.redirect?.href}`);
      assert.equal(await whoIs(agent), 'nextelsewhere');
      assert.equal(serverErrors(), errors, 'no server error');
    });

    test('an ID token whose sub is longer than 255 characters is refused on a page naming the provider, and nobody is created', async () => {
      const hostileId = (await connect(server, hostile, { name: 'Shady IdP', issuer: hostile.issuer })).id;
      for (const length of [256, 8000]) {
        hostile.nextLogin({
          account: { sub: randomBytes(length).toString('base64url').slice(0, length), email: 'long@else.example', preferred_username: `long${length}` },
        });
        const agent = new UserAgent(server.url);
        const outcome = await logInThrough(agent, hostileId, origin(hostile));
        assert.equal(outcome.response.status, 400, `${length}`);
        assert.match(outcome.html, /Shady IdP answered in a way Gatehouse cannot trust/);
        assert.equal(await whoIs(agent), null);
        assert.equal((await server.app.gatehouse.db.selectFrom('users').select('id').where('username', '=', `long${length}`).execute()).length, 0);
      }
      // 255 is the most there may be.
      hostile.nextLogin({ account: { sub: 's'.repeat(255), preferred_username: 'long255' } });
      const agent = new UserAgent(server.url);
      await logInThrough(agent, hostileId, origin(hostile));
      assert.equal(await whoIs(agent), 'long255');
    });

    test('a connection disabled while its provider answers gives no session: the browser that was logging in is not logged in', async () => {
      const ctx = server.app.gatehouse;
      const flaky = (await connect(server, corpIdp, { name: 'Flaky SSO', issuer: corpIdp.issuer })).id;
      for (let i = 0; i < RACES; i++) {
        await setConnectionEnabled(ctx, flaky, true, COMMAND_LINE);
        const { agent, callback } = await callbackOf(corpIdp, flaky, { sub: `flaky-${i}`, email: `flaky${i}@corp.example`, email_verified: true });
        // The callback exchanges the code; the administrator disables the connection meanwhile.
        const exchanges = corpIdp.requests('/token');
        const done = agent.visit(callback);
        for (const deadline = Date.now() + 5000; corpIdp.requests('/token') === exchanges;) {
          assert.ok(Date.now() < deadline, `#${i}: the callback exchanges the code`);
          await new Promise((resolve) => setTimeout(resolve, 1));
        }
        await setConnectionEnabled(ctx, flaky, false, COMMAND_LINE);
        const outcome = await done;
        assert.ok(outcome.response.status < 500, `#${i}: ${outcome.response.status}`);
        if (outcome.response.status === 403) assert.match(outcome.html, /Logging in with Flaky SSO is not available right now/);
        assert.equal(await whoIs(agent), null, `#${i}: not logged in`);
        const live = await ctx.db.selectFrom('sessions').select('sid').where('connection_id', '=', flaky).execute();
        assert.equal(live.length, 0, `#${i}: no session through the disabled connection`);
      }
    });

    /** Alice starts connecting an identity at Corp on /account/security, and leaves at the provider: the URL it sent her to (in the browser's history). */
    async function abandonedConnect(browser: UserAgent): Promise<Outcome> {
      await browser.login('alice');
      const started = await browser.visit(`/account/security/connections/${corp}/connect`, {
        method: 'POST',
        body: new URLSearchParams({ _csrf: await csrfOf(browser) }),
      });
      assert.equal(started.redirect?.origin, origin(corpIdp), 'sent to the provider');
      return started;
    }

    test('a Connect abandoned before logging out cannot be finished by the next person at the browser: the answer is refused, and their identity is not alice’s', async () => {
      const browser = new UserAgent(server.url);
      const started = await abandonedConnect(browser);
      await browser.submit((await browser.visit('/')).html, '/logout');
      assert.equal(await whoIs(browser), null, 'alice logged out');

      // Mallory, at the same browser, opens the URL from the history and logs in at the provider as herself.
      corpIdp.nextLogin({ sub: 'mallory-corp', email: 'mallory@else.example', email_verified: true });
      const answer = await throughProvider(browser, started, origin(corpIdp));
      assert.equal(answer.response.status, 400);
      assert.match(answer.html, /This answer from Corp cannot be used/);
      assert.equal(await whoIs(browser), null);

      // From her own browser, her identity is hers: not alice's account.
      corpIdp.nextLogin({ sub: 'mallory-corp', email: 'mallory@else.example', email_verified: true, preferred_username: 'mallory' });
      const elsewhere = new UserAgent(server.url);
      await logInThrough(elsewhere, corp, origin(corpIdp));
      assert.equal(await whoIs(elsewhere), 'mallory');
    });

    test('a Connect abandoned and finished after another person logged in at the browser links nothing: the page says connecting was not finished', async () => {
      const browser = new UserAgent(server.url);
      const started = await abandonedConnect(browser);
      // Bob logs in at the browser over alice's session (no logout), and opens the URL from the history.
      const login = await browser.visit('/login?switch=1');
      await browser.submit(login.html, '/login', { username: 'bob', password: PASSWORD });
      assert.equal(await whoIs(browser), 'bob');
      corpIdp.nextLogin({ sub: 'bob-corp', email: 'bob.b@else.example', email_verified: true });
      const answer = await throughProvider(browser, started, origin(corpIdp));
      assert.equal(answer.response.status, 403);
      assert.match(answer.html, /Connecting Corp was not finished/);

      // Bob's identity at Corp logs nobody in as alice.
      corpIdp.nextLogin({ sub: 'bob-corp', email: 'bob.b@else.example', email_verified: true, preferred_username: 'bobcorp' });
      const elsewhere = new UserAgent(server.url);
      await logInThrough(elsewhere, corp, origin(corpIdp));
      assert.equal(await whoIs(elsewhere), 'bobcorp');
    });

    test('logging out clears the cookies of logins under way at providers and of identities waiting to be connected', async () => {
      const browser = new UserAgent(server.url);
      // An identity with alice's address, set aside until she logs in to confirm; and a login started and left.
      publicIdp.nextLogin({ sub: 'waiting', email: 'alice@example.com', email_verified: true });
      const exists = await logInThrough(browser, pub, origin(publicIdp));
      assert.match(exists.html, /already has the email address of your Public identity/);
      await browser.visit(`/login/connections/${corp}`);
      assert.ok(browser.cookies.has('gatehouse_identity') && browser.cookies.has('gatehouse_upstream'));

      await browser.login('alice');
      const form = formFields((await browser.visit('/')).html, '/logout');
      const logout = await browser.fetch('/logout', { method: 'POST', body: form });
      assert.equal(logout.status, 303);
      const cleared = logout.headers.getSetCookie().filter((cookie) => /^gatehouse_(upstream|identity)=;/.test(cookie));
      assert.deepEqual(cleared.map((cookie) => cookie.split('=')[0]).sort(), ['gatehouse_identity', 'gatehouse_upstream']);
      for (const cookie of cleared) assert.match(cookie, /Expires=Thu, 01 Jan 1970 00:00:00 GMT/);
      assert.ok(!browser.cookies.has('gatehouse_identity') && !browser.cookies.has('gatehouse_upstream'));

      // Whoever logs in next at the browser is offered no identity to connect.
      await browser.login('alice');
      const link = await browser.visit('/login/connections/link');
      assert.doesNotMatch(link.html, /Connect the Public identity/);
    });

    test('a domain served by two connections, the required one second by name: a password login for the domain’s address still goes to the required one', async () => {
      const ctx = server.app.gatehouse;
      await createAccount(ctx.db, { username: 'rita', email: 'rita@twin.example', password: PASSWORD, isAdmin: false }, ctx.now());
      const open = (await connect(server, corpIdp, { name: 'Acme Login', issuer: corpIdp.issuer, domains: ['twin.example'] })).id;
      const required = (await connect(server, corpIdp, { name: 'Zed SSO', issuer: corpIdp.issuer, domains: ['twin.example'], required: true })).id;
      const page = await new UserAgent(server.url).visit('/login');
      const at = (id: string) => page.html.indexOf(`href="/login/connections/${id}?`);
      assert.ok(at(open) !== -1 && at(open) < at(required), 'Acme Login comes first on the login page');

      const agent = new UserAgent(server.url);
      const login = await agent.visit('/login');
      const sent = await agent.fetch('/login', {
        method: 'POST',
        body: new URLSearchParams({ ...Object.fromEntries(formFields(login.html, '/login')), username: 'rita@twin.example', password: PASSWORD }),
      });
      assert.equal(sent.status, 303);
      assert.match(sent.headers.get('location')!, new RegExp(`^/login/connections/${required}\\?.*login_hint=rita%40twin\\.example`));
      const byName = await new UserAgent(server.url).login('rita');
      assert.equal(byName.response.status, 403);
      assert.match(byName.html, /Passwords cannot be used to log in to this account/);
      const first = await agent.fetch('/login/email', {
        method: 'POST',
        body: new URLSearchParams({ ...Object.fromEntries(formFields(login.html, '/login/email')), email: 'rita@twin.example' }),
      });
      assert.match(first.headers.get('location')!, new RegExp(`^/login/connections/${required}\\?`));
    });

    // Last: it moves the server's clock on.
    test('logging in again for /account/security asks the provider for a fresh login (max_age=0), and an answer with an old auth_time is refused on a page naming it', async () => {
      corpIdp.nextLogin({ sub: 'rhea-corp', email: 'rhea@corp.example', email_verified: true, preferred_username: 'rhea' });
      const agent = new UserAgent(server.url);
      await logInThrough(agent, corp, origin(corpIdp));
      server.advance(600);
      const security = await agent.visit('/account/security');
      const again = /<div class="warning" role="note" id="reauth">[\s\S]*?<a class="button" href="([^"]+)">Log in again<\/a>/.exec(security.html)?.[1];
      assert.ok(again, 'the security page asks to log in again');
      const login = await agent.visit(again.replaceAll('&amp;', '&'));
      assert.match(login.html, /To change how you log in, log in again/);
      const button = new RegExp(`href="(/login/connections/${corp}\\?[^"]*)"`).exec(login.html)?.[1]?.replaceAll('&amp;', '&');
      assert.ok(button, 'the login page offers Corp');
      assert.equal(new URL(button, server.url).searchParams.get('reauth'), '1');
      assert.equal(new URL(button, server.url).searchParams.get('next'), '/account/security');

      // The provider answers with the login it had an hour ago.
      const stale = await agent.visit(button);
      assert.equal(stale.redirect?.searchParams.get('max_age'), '0', 'the provider is asked to authenticate afresh');
      corpIdp.nextLogin({ sub: 'rhea-corp', email: 'rhea@corp.example', email_verified: true, authTime: Math.floor(Date.now() / 1000) - 3600 });
      const refused = await throughProvider(agent, stale, origin(corpIdp));
      assert.equal(refused.response.status, 400);
      assert.match(refused.html, /Corp answered in a way Gatehouse cannot trust/);
      assert.match(refused.html, /Try again with Corp/);
      assert.equal(await whoIs(agent), 'rhea', 'still logged in…');
      assert.match((await agent.visit('/account/security')).html, /id="reauth"/, '…but not recently');

      // A fresh login at the provider: back at the security page, which lets the person make changes.
      corpIdp.nextLogin({ sub: 'rhea-corp', email: 'rhea@corp.example', email_verified: true });
      const fresh = await throughProvider(agent, await agent.visit(button), origin(corpIdp));
      assert.equal(fresh.response.status, 200);
      assert.match(fresh.html, /<h1>Security<\/h1>/);
      assert.doesNotMatch(fresh.html, /id="reauth"/);
      assert.equal(await whoIs(agent), 'rhea');
    });
  });
}
