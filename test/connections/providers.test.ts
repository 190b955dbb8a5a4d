/**
 * Connections to the other kinds of upstream provider (SPEC §4.13), both backends: a stand-in
 * shaped like GitHub Enterprise Server (the `github` preset with `--base-url`: its numeric id,
 * its verified primary email), another Gatehouse behind a TLS-terminating proxy (a generic
 * OpenID Connect provider), and a hostile provider made with jose whose every attack — a
 * wrong `aud`, `nonce`, `iss`, a foreign key, an expired or unsigned ID token, an oversized,
 * malformed or slow answer — ends on a page naming it, audited, with nothing created. Also who
 * may use a password (PASSWORD_LOGIN, `--required` domains), email-first, and Connect and
 * Disconnect on /account/security.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { callbackUrl, connectionNamed, slugOf, updateConnectionSettings } from '../../src/accounts/connections/connections.ts';
import { COMMAND_LINE } from '../../src/audit.ts';
import { createAccount, findUserNamed } from '../../src/accounts/users.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { PASSWORD, startServer, type TestServer } from '../support/server.ts';
import { connect, logInThrough, throughProvider } from '../support/upstream-login.ts';
import { startGitHubStandIn, startHostileProvider, startOidcUpstream, startTlsProxy, type Attack } from '../support/upstream-providers.ts';
import { UserAgent, formFields } from '../support/user-agent.ts';

const countUsers = async (server: TestServer) => (await server.app.gatehouse.db.selectFrom('users').select('id').execute()).length;
const auditOf = (server: TestServer, type: string) =>
  server.app.gatehouse.db.selectFrom('audit_events').selectAll().where('type', '=', type).orderBy('id').execute();

/** The CSRF token of a signed-in page's forms (the navigation's Log out). */
async function csrfOf(agent: UserAgent): Promise<string> {
  return formFields((await agent.visit('/')).html, '/logout').get('_csrf')!;
}

for (const backend of BACKENDS) {
  describe(`GitHub Enterprise Server through the github preset on ${backend.name}`, backendOptions(backend), () => {
    let server: TestServer;
    let github: Awaited<ReturnType<typeof startGitHubStandIn>>;
    let id: string;
    before(async () => {
      [server, github] = await Promise.all([startServer(backend), startGitHubStandIn()]);
      id = (await connect(server, github, { name: 'GitHub', preset: 'github', baseUrl: github.baseUrl, linkVerifiedEmail: true })).id;
      await server.createUser('octo');
    });
    after(async () => {
      await server?.close();
      await github?.close();
    });

    test('the identity is the numeric id, never the login name; the email is the verified primary one from the emails API', async () => {
      github.nextLogin({
        id: 583231,
        login: 'mona',
        name: 'Mona Lisa',
        publicEmail: 'public@elsewhere.example',
        emails: [
          { email: 'other@mona.example', primary: false, verified: true },
          { email: 'mona@mona.example', primary: true, verified: true },
        ],
      });
      const agent = new UserAgent(server.url);
      const landed = await logInThrough(agent, id, github.baseUrl);
      const mona = (await findUserNamed(server.app.gatehouse, 'mona'))!;
      // Seen once in a full run, not since: say where the login ended, should it happen again.
      assert.ok(
        mona,
        `a person named after the login (the login ended with ${landed.response.status} at ${landed.response.url}: ${landed.html.slice(0, 400)})`,
      );
      assert.equal(mona.email, 'mona@mona.example');
      assert.equal(mona.email_verified, 1);
      assert.equal(mona.display_name, 'Mona Lisa');
      const identity = await server.app.gatehouse.db.selectFrom('user_identities').selectAll().where('user_id', '=', mona.id).executeTakeFirstOrThrow();
      assert.equal(identity.subject, '583231');
      assert.match((await agent.visit('/')).html, /mona/);
      assert.ok(github.requests('/api/v3/user/emails') >= 1);

      // Renamed at GitHub: the same person (the id is what counts).
      github.nextLogin({ id: 583231, login: 'mona-renamed', emails: [{ email: 'mona@mona.example', primary: true, verified: true }] });
      const again = new UserAgent(server.url);
      await logInThrough(again, id, github.baseUrl);
      assert.match((await again.visit('/')).html, /mona/);
      assert.equal(await findUserNamed(server.app.gatehouse, 'mona-renamed'), undefined);
    });

    test('an unverified primary email never links to the account that has it, even with --link-verified-email', async () => {
      const users = await countUsers(server);
      github.nextLogin({ id: 1, login: 'imposter', emails: [{ email: 'octo@example.com', primary: true, verified: false }] });
      const outcome = await logInThrough(new UserAgent(server.url), id, github.baseUrl);
      assert.match(outcome.html, /already has the email address of your GitHub identity/);
      assert.equal(await countUsers(server), users);
      // Verified, it links.
      github.nextLogin({ id: 2, login: 'octo-gh', emails: [{ email: 'octo@example.com', primary: true, verified: true }] });
      const agent = new UserAgent(server.url);
      await logInThrough(agent, id, github.baseUrl);
      assert.match((await agent.visit('/')).html, /octo/);
    });

    test('once people have logged in through it, the connection cannot be pointed at another provider (the same id there is someone else)', async () => {
      const ctx = server.app.gatehouse;
      await assert.rejects(
        updateConnectionSettings(ctx, id, { baseUrl: 'https://other-ghe.example' }, COMMAND_LINE),
        /another provider’s identities are other people/,
      );
      await updateConnectionSettings(ctx, id, { domains: ['mona.example'] }, COMMAND_LINE);
      assert.equal((await connectionNamed(ctx, id)).base_url, github.baseUrl);
    });

    test('a denial at GitHub ends on a page naming it', async () => {
      github.nextLogin('deny');
      const outcome = await logInThrough(new UserAgent(server.url), id, github.baseUrl);
      assert.equal(outcome.response.status, 400);
      assert.match(outcome.html, /GitHub did not let you log in/);
    });
  });

  describe(`another Gatehouse as the upstream provider on ${backend.name}`, backendOptions(backend), () => {
    let upstream: TestServer;
    let downstream: TestServer;
    let proxy: Awaited<ReturnType<typeof startTlsProxy>>;
    let id: string;
    before(async () => {
      proxy = await startTlsProxy();
      upstream = await startServer(backend, { PUBLIC_URL: proxy.origin });
      proxy.target(Number(new URL(upstream.url).port));
      downstream = await startServer(backend);
      await upstream.createUser('ursula');
      const name = 'Head office';
      const { client, secret } = await upstream.createClient({
        name: 'Branch office',
        confidential: true,
        redirectUris: [callbackUrl(downstream.app.gatehouse, slugOf(name))],
        scope: 'openid profile email',
      });
      id = (
        await connect(
          downstream,
          { clientId: client.id, clientSecret: secret!, allowRedirectUri: () => {}, requests: () => 0, close: async () => {} },
          { name, issuer: proxy.origin },
        )
      ).id;
    });
    after(async () => {
      await downstream?.close();
      await upstream?.close();
      await proxy?.close();
    });

    test('a person of the upstream Gatehouse logs in at the downstream one; its ID token verified against its JWKS', async () => {
      const person = new UserAgent(downstream.url);
      const start = await person.visit(`/login/connections/${id}`);
      assert.ok(start.redirect?.href.startsWith(`${proxy.origin}/oauth/authorize`), 'sent to the upstream Gatehouse');
      const atUpstream = new UserAgent(proxy.origin);
      const approved = await atUpstream.authorize(start.redirect!, { username: 'ursula' });
      assert.ok(
        approved.redirect?.href.startsWith(`${downstream.url}/login/connections/${id}/callback`),
        `back at the callback: ${approved.html.slice(0, 200)}`,
      );
      const done = await person.visit(approved.redirect!.pathname + approved.redirect!.search);
      assert.equal(done.response.status, 200);
      assert.match(done.html, /ursula/);
    });
  });

  describe(`a hostile provider on ${backend.name}`, backendOptions(backend), () => {
    let server: TestServer;
    let hostile: Awaited<ReturnType<typeof startHostileProvider>>;
    let id: string;
    before(async () => {
      [server, hostile] = await Promise.all([startServer(backend), startHostileProvider()]);
      id = (await connect(server, hostile, { name: 'Shady IdP', issuer: hostile.issuer })).id;
    });
    after(async () => {
      await server?.close();
      await hostile?.close();
    });

    test('well-behaved, it logs the person in (the baseline the attacks differ from)', async () => {
      hostile.nextLogin({ account: { sub: 'baseline', email: 'base@shady.example', email_verified: true, preferred_username: 'baseline' } });
      const agent = new UserAgent(server.url);
      await logInThrough(agent, id, new URL(hostile.issuer).origin);
      assert.match((await agent.visit('/')).html, /baseline/);
    });

    const ATTACKS: Array<[Attack, 'invalid' | 'unreachable']> = [
      ['wrong-aud', 'invalid'],
      ['wrong-nonce', 'invalid'],
      ['no-nonce', 'invalid'],
      ['wrong-iss', 'invalid'],
      ['wrong-iss-param', 'invalid'],
      ['foreign-key', 'invalid'],
      ['expired', 'invalid'],
      ['alg-none', 'invalid'],
      ['bad-json', 'invalid'],
      ['oversized', 'unreachable'],
      ['slow', 'unreachable'],
    ];
    for (const [attack, kind] of ATTACKS) {
      test(`${attack}: refused on a page naming the provider, audited as ${kind}, nothing created`, async () => {
        const users = await countUsers(server);
        hostile.nextLogin({ account: { sub: `victim-${attack}`, email: `${attack}@shady.example`, email_verified: true }, attack });
        const agent = new UserAgent(server.url);
        const outcome = await logInThrough(agent, id, new URL(hostile.issuer).origin);
        assert.equal(outcome.response.status, kind === 'unreachable' ? 502 : 400);
        assert.match(outcome.html, /Shady IdP/);
        assert.match(outcome.html, /Try again with Shady IdP/);
        assert.equal(await countUsers(server), users, 'nobody created');
        assert.equal((await agent.fetch('/account/applications')).status, 303, 'not logged in');
        const failures = await auditOf(server, 'upstream_login_failed');
        assert.ok(failures.at(-1)!.detail!.includes(`"kind":"${kind}"`), String(failures.at(-1)!.detail));
        assert.doesNotMatch(String(failures.at(-1)!.detail), /eyJ/, 'no token in the audit trail');
      });
    }
  });

  describe(`who may use a password, and email-first, on ${backend.name}`, backendOptions(backend), () => {
    let upstream: Awaited<ReturnType<typeof startOidcUpstream>>;
    before(async () => {
      upstream = await startOidcUpstream();
    });
    after(() => upstream?.close());

    test('PASSWORD_LOGIN=admins: an administrator logs in with a password; anyone else is refused only after a right password', async () => {
      const server = await startServer(backend, { PASSWORD_LOGIN: 'admins' });
      try {
        await server.createUser('root', { admin: true });
        await server.createUser('pat');
        const admin = new UserAgent(server.url);
        await admin.login('root');
        assert.equal((await admin.fetch('/account/applications')).status, 200);
        const wrong = await new UserAgent(server.url).login('pat', 'not the password');
        assert.equal(wrong.response.status, 401, 'a wrong password says nothing more');
        const right = await new UserAgent(server.url).login('pat');
        assert.equal(right.response.status, 403);
        assert.match(right.html, /Passwords cannot be used to log in to this account/);
      } finally {
        await server.close();
      }
    });

    test('PASSWORD_LOGIN=none: the page offers connections and no password; a posted password is refused unchecked', async () => {
      const server = await startServer(backend, { PASSWORD_LOGIN: 'none' });
      try {
        await server.createUser('pat');
        const sso = await connect(server, upstream, { name: 'Corp SSO', issuer: upstream.issuer });
        const page = await new UserAgent(server.url).visit('/login');
        assert.doesNotMatch(page.html, /type="password"/);
        assert.match(page.html, /Continue with Corp SSO/);
        const agent = new UserAgent(server.url);
        const posted = await agent.submit(page.html, '/login', { username: 'pat', password: PASSWORD });
        assert.equal(posted.response.status, 403);
        assert.equal((await agent.fetch('/account/applications')).status, 303);
        upstream.nextLogin({ sub: 'pat-sso', email: 'pat.sso@corp.example', email_verified: true, preferred_username: 'patsso' });
        const viaSso = new UserAgent(server.url);
        await logInThrough(viaSso, sso.id, new URL(upstream.issuer).origin);
        assert.equal((await viaSso.fetch('/account/applications')).status, 200);
      } finally {
        await server.close();
      }
    });

    test('a --required connection: its domain’s people go to the provider, whatever password they type; email-first finds it too', async () => {
      const server = await startServer(backend);
      try {
        const ctx = server.app.gatehouse;
        await createAccount(ctx.db, { username: 'rita', email: 'rita@corp.example', password: PASSWORD, isAdmin: false }, Date.now());
        const sso = await connect(server, upstream, { name: 'Corp SSO', issuer: upstream.issuer, domains: ['corp.example'], required: true });
        const agent = new UserAgent(server.url);
        const page = await agent.visit('/login');
        assert.match(page.html, /id="email-first-form"/);
        const sent = await agent.fetch('/login', {
          method: 'POST',
          body: new URLSearchParams({ ...Object.fromEntries(formFields(page.html, '/login')), username: 'rita@corp.example', password: PASSWORD }),
        });
        assert.equal(sent.status, 303);
        assert.match(sent.headers.get('location')!, new RegExp(`^/login/connections/${sso.id}\\?.*login_hint=rita%40corp\\.example`));
        // By username, with her right password: refused, the domain's connection is required.
        const byName = await new UserAgent(server.url).login('rita');
        assert.equal(byName.response.status, 403);
        // Email-first.
        const first = await agent.fetch('/login/email', {
          method: 'POST',
          body: new URLSearchParams({ ...Object.fromEntries(formFields(page.html, '/login/email')), email: 'Someone@Corp.Example' }),
        });
        assert.equal(first.status, 303);
        assert.match(first.headers.get('location')!, new RegExp(`^/login/connections/${sso.id}\\?`));
        const elsewhere = await agent.submit(page.html, '/login/email', { email: 'x@other.example' });
        assert.equal(elsewhere.response.status, 400);
        assert.match(elsewhere.html, /No company login is set up for that address/);
      } finally {
        await server.close();
      }
    });

    test('Connect links an identity to the logged-in person (recent login); Disconnect is refused when it is the only way in', async () => {
      const server = await startServer(backend);
      try {
        await server.createUser('alice');
        const sso = await connect(server, upstream, { name: 'Corp SSO', issuer: upstream.issuer });
        const provider = new URL(upstream.issuer).origin;
        const alice = new UserAgent(server.url);
        await alice.login('alice');
        upstream.nextLogin({ sub: 'alice-corp', email: 'a.smith@corp.example', email_verified: true });
        const connected = await throughProvider(
          alice,
          await alice.visit(`/account/security/connections/${sso.id}/connect`, { method: 'POST', body: new URLSearchParams({ _csrf: await csrfOf(alice) }) }),
          provider,
        );
        assert.match(connected.html, /Identity connected/);
        const linked = await auditOf(server, 'identity_linked');
        assert.ok(linked.some((row) => String(row.detail).includes('"by":"connect"')));
        // Now the identity logs alice in.
        upstream.nextLogin({ sub: 'alice-corp', email: 'a.smith@corp.example', email_verified: true });
        const elsewhere = new UserAgent(server.url);
        await logInThrough(elsewhere, sso.id, provider);
        assert.match((await elsewhere.visit('/')).html, /alice/);
        // Another identity cannot be connected to alice at the same connection; nor can hers to someone else.
        await server.createUser('bob');
        const bob = new UserAgent(server.url);
        await bob.login('bob');
        upstream.nextLogin({ sub: 'alice-corp' });
        const stolen = await throughProvider(
          bob,
          await bob.visit(`/account/security/connections/${sso.id}/connect`, { method: 'POST', body: new URLSearchParams({ _csrf: await csrfOf(bob) }) }),
          provider,
        );
        assert.equal(stolen.response.status, 403);
        assert.match(stolen.html, /already connected to another account/);
        // Alice has a password: she may disconnect; her session through the identity ends.
        const disconnect = await alice.visit(`/account/security/connections/${sso.id}/disconnect`, {
          method: 'POST',
          body: new URLSearchParams({ _csrf: await csrfOf(alice) }),
        });
        assert.match(disconnect.html, /Identity disconnected/);
        assert.equal((await elsewhere.fetch('/account/applications')).status, 303, 'the session that came through it ended');
        assert.equal((await auditOf(server, 'identity_unlinked')).length, 1);

        // A person made by the connection (no password, no passkey): disconnecting the only way in is refused.
        upstream.nextLogin({ sub: 'only-way', email: 'owen@corp.example', email_verified: true, preferred_username: 'owen' });
        const owen = new UserAgent(server.url);
        await logInThrough(owen, sso.id, provider);
        const refused = await owen.visit(`/account/security/connections/${sso.id}/disconnect`, {
          method: 'POST',
          body: new URLSearchParams({ _csrf: await csrfOf(owen) }),
        });
        assert.equal(refused.response.status, 400);
        assert.match(refused.html, /only way to log in/);
        // Without a recent login, Connect is refused before anything leaves for the provider.
        server.advance(600);
        const stale = await alice.visit(`/account/security/connections/${sso.id}/connect`, {
          method: 'POST',
          body: new URLSearchParams({ _csrf: await csrfOf(alice) }),
        });
        assert.equal(stale.response.status, 403);
        assert.equal(stale.redirect, null);
      } finally {
        await server.close();
      }
    });

    test('a person the provider gives no email address (as ORCID) gets an account all the same, with none', async () => {
      const server = await startServer(backend);
      try {
        const orcidLike = await connect(server, upstream, { name: 'Researcher ID', issuer: upstream.issuer, scope: 'openid profile' });
        upstream.nextLogin({ sub: '0000-0002-1825-0097', name: 'Josiah Carberry' });
        const agent = new UserAgent(server.url);
        const outcome = await logInThrough(agent, orcidLike.id, new URL(upstream.issuer).origin);
        assert.equal(outcome.response.status, 200);
        const identity = await server.app.gatehouse.db
          .selectFrom('user_identities')
          .selectAll()
          .where('subject', '=', '0000-0002-1825-0097')
          .executeTakeFirstOrThrow();
        const user = await server.app.gatehouse.db.selectFrom('users').selectAll().where('id', '=', identity.user_id).executeTakeFirstOrThrow();
        assert.equal(user.email, '');
        assert.equal(user.display_name, 'Josiah Carberry');
        assert.equal(user.username, 'Josiah.Carberry', 'named after the person, as the provider gives no username');
      } finally {
        await server.close();
      }
    });
  });
}
