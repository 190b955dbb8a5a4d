/**
 * The people's pages over plain HTTP, on both storage backends: what a forged or hostile
 * request gets (CSRF, non-administrators, HTML in fields), and the storage-backed rules of
 * the setup link, the admin console and the applications page. The browser suites in
 * test/browser drive the same pages as a person would.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { firstRunSetupLink } from '../../src/accounts/setup.ts';
import { listClients } from '../../src/store/clients.ts';
import { countAdmins, findUserByUsername } from '../../src/store/users.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { discover, obtainTokens, profile } from '../support/oauth-client.ts';
import { PASSWORD, startServer, type TestServer } from '../support/server.ts';
import { secretOnPage, totpCode } from '../support/second-factors.ts';
import { UserAgent, formFields } from '../support/user-agent.ts';

const HOSTILE = '<img src=x onerror=alert(1)>';

/** A form post as the browser would send it, from the page's own hidden fields plus `fields`. */
async function post(agent: UserAgent, html: string, action: string, fields: Record<string, string | string[]>, options: { csrf?: boolean } = {}) {
  const body = formFields(html, action);
  if (options.csrf === false) body.delete('_csrf');
  for (const [name, value] of Object.entries(fields)) {
    body.delete(name);
    for (const v of Array.isArray(value) ? value : [value]) body.append(name, v);
  }
  const response = await agent.fetch(action, { method: 'POST', body });
  return { status: response.status, location: response.headers.get('location'), html: await response.text() };
}

const NEW_CLIENT = {
  name: 'Form client',
  grant_type: 'authorization_code',
  redirect_uri: 'http://127.0.0.1:8765/callback',
  client_type: 'public',
  scope: ['annotation:read', 'annotation:write'],
};

for (const backend of BACKENDS) {
  describe(`the admin console over HTTP (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let admin: UserAgent;

    before(async () => {
      server = await startServer(backend);
      await server.createUser('root', { admin: true });
      await server.createUser('alice');
      admin = new UserAgent(server.url);
      await admin.login('root');
    });
    after(() => server?.close());

    test('a form posted without its CSRF token is refused and changes nothing', async () => {
      const form = await admin.visit('/admin/oauthclients/new');
      const before = (await listClients(server.store.db, {}, 1000)).rows.length;
      const refused = await post(admin, form.html, '/admin/oauthclients', NEW_CLIENT, { csrf: false });
      assert.equal(refused.status, 403);
      assert.match(refused.html, /the form has expired or was not sent from this site/);
      assert.equal((await listClients(server.store.db, {}, 1000)).rows.length, before);

      const alice = await findUserByUsername(server.store.db, 'alice');
      const users = await admin.visit('/admin/users');
      const disable = await post(admin, users.html, `/admin/users/${alice!.id}/disable`, {}, { csrf: false });
      assert.equal(disable.status, 403);
      assert.equal((await findUserByUsername(server.store.db, 'alice'))!.disabled, 0);

      const accepted = await post(admin, form.html, '/admin/oauthclients', NEW_CLIENT);
      assert.equal(accepted.status, 200, 'the same form with its token works');
      assert.equal((await listClients(server.store.db, {}, 1000)).rows.length, before + 1);
    });

    test('only administrators change anything through /admin', async () => {
      const before = (await listClients(server.store.db, {}, 1000)).rows.length;
      const root = await findUserByUsername(server.store.db, 'root');

      const visitor = new UserAgent(server.url);
      const anonymous = await visitor.fetch('/admin/oauthclients', { method: 'POST', body: new URLSearchParams({ name: 'x' }) });
      assert.equal(anonymous.status, 303);
      assert.equal(anonymous.headers.get('location'), '/login?next=%2Fadmin');

      const alice = new UserAgent(server.url);
      const home = await alice.login('alice');
      const csrf = formFields(home.html, '/logout').get('_csrf')!; // a valid token of alice's own session
      for (const path of ['/admin/oauthclients', `/admin/users/${root!.id}/disable`, `/admin/users/${root!.id}/promote`]) {
        const response = await alice.fetch(path, { method: 'POST', body: new URLSearchParams({ _csrf: csrf, ...NEW_CLIENT, scope: 'annotation:read' }) });
        assert.equal(response.status, 403, path);
        assert.match(await response.text(), /Administrators only/);
      }
      assert.equal((await listClients(server.store.db, {}, 1000)).rows.length, before);
      assert.equal((await findUserByUsername(server.store.db, 'root'))!.disabled, 0);
      assert.equal((await alice.visit('/admin/users')).response.status, 403);
    });

    test('HTML typed into any field comes back escaped', async () => {
      const form = await admin.visit('/admin/oauthclients/new');
      const rejected = await post(admin, form.html, '/admin/oauthclients', {
        ...NEW_CLIENT,
        name: HOSTILE,
        redirect_uri: 'https://app.example/"><script>alert(1)</script>#x',
      });
      assert.equal(rejected.status, 400);
      assert.match(rejected.html, /Redirect URL must not contain a fragment/);
      assert.match(rejected.html, />https:\/\/app\.example\/&quot;&gt;&lt;script&gt;alert\(1\)&lt;\/script&gt;#x<\/textarea>/);
      assert.match(rejected.html, /value="&lt;img src=x onerror=alert\(1\)&gt;"/);
      assert.doesNotMatch(rejected.html, /<script>alert|<img src=x/);

      const registered = await post(admin, form.html, '/admin/oauthclients', { ...NEW_CLIENT, name: HOSTILE });
      assert.equal(registered.status, 200);
      const clientId = /id="client-id">([^<]+)</.exec(registered.html)![1]!;
      for (const path of [
        '/admin/oauthclients',
        `/admin/oauthclients/${clientId}`,
        `/admin/oauthclients/${clientId}/delete`,
        `/admin/users?q=${encodeURIComponent(HOSTILE)}`,
      ]) {
        const page = await admin.visit(path);
        assert.doesNotMatch(page.html, /<img src=x/, path);
      }
      const search = await admin.visit(`/admin/users?q=${encodeURIComponent(HOSTILE)}`);
      assert.match(search.html, /No user matches &quot;&lt;img src=x onerror=alert\(1\)&gt;&quot;\./);

      // …and on the pages the user sees: consent and applications.
      const alice = new UserAgent(server.url);
      await obtainTokens(await discover(server, clientId), alice, 'alice');
      const applications = await alice.visit('/account/applications');
      assert.match(applications.html, /<h2 id="app-[^"]+">&lt;img src=x onerror=alert\(1\)&gt;<\/h2>/);
      const consent = await alice.visit(`/oauth/authorize?${new URLSearchParams({ client_id: clientId, response_type: 'code', prompt: 'consent' })}`);
      assert.match(consent.html, /<h1>Authorize &lt;img src=x onerror=alert\(1\)&gt;<\/h1>/);
      assert.doesNotMatch(applications.html + consent.html, /<img src=x/);
    });

    test('taking a scope away from a client revokes the grants holding it, and only those', async () => {
      const { client } = await server.createClient({ name: 'Narrowed' });
      const app = await discover(server, client.id);
      const reading = await obtainTokens(app, new UserAgent(server.url), 'alice', { scope: 'annotation:read' });
      const writing = await obtainTokens(app, new UserAgent(server.url), 'alice');

      const form = await admin.visit(`/admin/oauthclients/${client.id}`);
      const renamed = await post(admin, form.html, `/admin/oauthclients/${client.id}`, {
        name: 'Renamed',
        redirect_uri: JSON.parse(client.redirect_uris).join('\n'),
        scope: ['annotation:read', 'annotation:write'],
      });
      assert.equal(renamed.status, 303);
      assert.equal((await profile(server, writing.access_token)).status, 200, 'a change that takes nothing away keeps every grant');

      const narrowed = await post(admin, form.html, `/admin/oauthclients/${client.id}`, {
        name: 'Renamed',
        redirect_uri: JSON.parse(client.redirect_uris).join('\n'),
        scope: 'annotation:read',
      });
      assert.equal(narrowed.status, 303);
      assert.equal((await profile(server, writing.access_token)).status, 401);
      assert.equal((await profile(server, reading.access_token)).status, 200);

      const none = await post(admin, form.html, `/admin/oauthclients/${client.id}`, {
        name: 'Renamed',
        redirect_uri: JSON.parse(client.redirect_uris).join('\n'),
        scope: [],
      });
      assert.equal(none.status, 400);
      assert.match(none.html, /<p class="field-error" id="scope-error">Choose at least one scope<\/p>/);

      // A name that cannot be a scope is named in quotes (where it ends shows), cut at 100 characters.
      const malformed = await post(admin, form.html, `/admin/oauthclients/${client.id}`, {
        name: 'Renamed',
        redirect_uri: JSON.parse(client.redirect_uris).join('\n'),
        scope: `${'x'.repeat(150)}é`,
      });
      assert.equal(malformed.status, 400);
      assert.ok(malformed.html.includes(`<p class="field-error" id="scope-error">Unknown scope &quot;${'x'.repeat(100)}…&quot;</p>`));
      // Many are named ten at a time, the rest counted.
      const many = await post(admin, form.html, `/admin/oauthclients/${client.id}`, {
        name: 'Renamed',
        redirect_uri: JSON.parse(client.redirect_uris).join('\n'),
        scope: Array.from({ length: 12 }, (_, i) => `é${i}`),
      });
      const listed = Array.from({ length: 10 }, (_, i) => `&quot;é${i}&quot;`).join(', ');
      assert.ok(many.html.includes(`<p class="field-error" id="scope-error">Unknown scope ${listed} and 2 more</p>`));
    });

    test('unknown clients and users are 404 pages; nobody disables their own account', async () => {
      // Only clients an administrator registered (UUIDs) are edited here; a URL-shaped client ID,
      // encoded into the path, is as unknown (metadata-document clients are blocked, by a form field).
      const url = encodeURIComponent('https://app.example/client.json');
      for (const path of [
        `/admin/oauthclients/${randomUUID()}`,
        '/admin/oauthclients/not-a-uuid',
        `/admin/oauthclients/${randomUUID()}/delete`,
        `/admin/oauthclients/${url}`,
        `/admin/oauthclients/${url}/delete`,
      ]) {
        const page = await admin.visit(path);
        assert.equal(page.response.status, 404, path);
        assert.match(page.html, /There is no OAuth client with this ID\./);
      }
      const users = await admin.visit('/admin/users');
      const csrf = formFields(users.html, '/logout').get('_csrf')!; // any token of this session
      const missing = await admin.fetch(`/admin/users/${randomUUID()}/promote`, { method: 'POST', body: new URLSearchParams({ _csrf: csrf }) });
      assert.equal(missing.status, 404);
      const root = await findUserByUsername(server.store.db, 'root');
      // The page offers no such button; a hand-made request is refused all the same.
      const self = await admin.fetch(`/admin/users/${root!.id}/disable`, { method: 'POST', body: new URLSearchParams({ _csrf: csrf }) });
      assert.equal(self.status, 400);
      assert.match(await self.text(), /You cannot disable your own account\./);
      assert.equal((await findUserByUsername(server.store.db, 'root'))!.disabled, 0);
    });

    test('disabling a user from the console revokes their tokens and sessions', async () => {
      await server.createUser('erin');
      const erin = new UserAgent(server.url);
      const { client } = await server.createClient({ name: 'Erin app' });
      const tokens = await obtainTokens(await discover(server, client.id), erin, 'erin');
      const user = await findUserByUsername(server.store.db, 'erin');
      const users = await admin.visit('/admin/users?q=erin');
      const disabled = await post(admin, users.html, `/admin/users/${user!.id}/disable`, {});
      assert.equal(disabled.status, 303);
      assert.equal((await profile(server, tokens.access_token)).status, 401);
      const home = await erin.visit('/');
      assert.match(home.html, /action="\/login"/, 'her session is over');
    });
  });

  describe(`first-run setup over HTTP (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;

    before(async () => {
      server = await startServer(backend);
    });
    after(() => server?.close());

    async function openLink(link: string) {
      const agent = new UserAgent(server.url);
      const url = new URL(link);
      return { agent, page: await agent.visit(url.pathname + url.search) };
    }

    const ADMIN = { email: 'root@example.com', password: PASSWORD, password_again: PASSWORD };

    test('a mistake leaves the link usable; without the CSRF token nothing happens; then it works once', async () => {
      const link = (await firstRunSetupLink(server.app.gatehouse))!;
      assert.match(link, new RegExp(`^${server.url}/setup\\?token=gsu_`));
      const { agent, page } = await openLink(link);
      assert.equal(page.response.status, 200);
      assert.equal(page.response.headers.get('cache-control'), 'no-store');

      const short = await post(agent, page.html, '/setup', { ...ADMIN, username: 'root', password: 'short', password_again: 'short' });
      assert.equal(short.status, 400);
      assert.match(short.html, /<p class="field-error" id="password-error">Password must be at least 8 characters<\/p>/);
      const forged = await post(agent, page.html, '/setup', { ...ADMIN, username: 'root' }, { csrf: false });
      assert.equal(forged.status, 403);
      assert.equal(await countAdmins(server.store.db), 0);

      const created = await post(agent, page.html, '/setup', { ...ADMIN, username: 'root' });
      assert.equal(created.status, 303);
      assert.equal(created.location, '/admin/oauthclients');
      assert.equal((await agent.visit('/admin/oauthclients')).response.status, 200, 'the new administrator is logged in');
      const again = await post(agent, page.html, '/setup', { ...ADMIN, username: 'root2', email: 'root2@example.com' });
      assert.equal(again.status, 410);
      assert.equal((await openLink(link)).page.response.status, 410);
      assert.equal(await firstRunSetupLink(server.app.gatehouse), null, 'no new link once an administrator exists');
      assert.equal(await countAdmins(server.store.db), 1);
    });
  });

  describe(`first-run setup with REQUIRE_SECOND_FACTOR=admins (${backend.name})`, backendOptions(backend), () => {
    test('the first administrator gets no password-only session: the set-up of a factor comes first', async () => {
      const server = await startServer(backend, { REQUIRE_SECOND_FACTOR: 'admins' });
      try {
        const link = new URL((await firstRunSetupLink(server.app.gatehouse))!);
        const agent = new UserAgent(server.url);
        const page = await agent.visit(link.pathname + link.search);
        const created = await post(agent, page.html, '/setup', { email: 'root@example.com', password: PASSWORD, password_again: PASSWORD, username: 'root' });
        assert.equal(created.status, 303);
        assert.match(created.location ?? '', /^\/login\/second-factor\/set-up\?next=%2Fadmin%2Foauthclients$/);
        assert.equal((await agent.fetch('/admin/oauthclients')).status, 303, 'no session yet');
        assert.equal((await server.store.db.selectFrom('sessions').select('user_id').execute()).length, 0);
        const setUp = await agent.visit(created.location!);
        const done = await agent.submit(setUp.html, '/login/second-factor/set-up', { code: totpCode(secretOnPage(setUp.html)) });
        assert.equal(done.response.status, 200);
        assert.equal((await agent.visit('/admin/oauthclients')).response.status, 200, 'with the app set up, the administrator is in');
      } finally {
        await server.close();
      }
    });
  });

  describe(`setup links that no longer work (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;

    before(async () => {
      server = await startServer(backend);
    });
    after(() => server?.close());

    test('two submissions at once create one administrator', async () => {
      const link = (await firstRunSetupLink(server.app.gatehouse))!;
      const path = new URL(link).pathname + new URL(link).search;
      const agents = [new UserAgent(server.url), new UserAgent(server.url)];
      const pages = await Promise.all(agents.map((agent) => agent.visit(path)));
      const results = await Promise.all(
        agents.map((agent, i) =>
          post(agent, pages[i]!.html, '/setup', { username: `admin${i}`, email: `admin${i}@example.com`, password: PASSWORD, password_again: PASSWORD }),
        ),
      );
      assert.deepEqual(results.map((r) => r.status).sort(), [303, 410]);
      assert.equal(await countAdmins(server.store.db), 1);
    });

    test('a link expires after an hour, and forged links never work', async () => {
      // The previous test made an administrator; links are only made while there is none.
      await server.store.db.updateTable('users').set({ is_admin: 0 }).execute();
      const link = new URL((await firstRunSetupLink(server.app.gatehouse))!);
      server.advance(3601);
      const agent = new UserAgent(server.url);
      const expired = await agent.visit(link.pathname + link.search);
      assert.equal(expired.response.status, 410);
      assert.match(expired.html, /This setup link has expired or has already been used\./);
      for (const path of ['/setup', '/setup?token=gsu_forged', `/setup?token=gsu_${'A'.repeat(43)}`, '/setup?token=<script>']) {
        const page = await agent.visit(path);
        assert.equal(page.response.status, 410, path);
        assert.doesNotMatch(page.html, /<script>/);
      }
    });
  });

  describe(`the applications page over HTTP (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;

    before(async () => {
      server = await startServer(backend);
      await server.createUser('alice');
    });
    after(() => server?.close());

    test('Revoke access needs the CSRF token; with it, the tokens die and the consent is forgotten', async () => {
      const { client } = await server.createClient({ name: 'Notes' });
      const agent = new UserAgent(server.url);
      const tokens = await obtainTokens(await discover(server, client.id), agent, 'alice');
      const page = await agent.visit('/account/applications');
      const action = '/account/applications/revoke'; // the client ID is a field of the form

      const forged = await post(agent, page.html, action, {}, { csrf: false });
      assert.equal(forged.status, 403);
      assert.equal((await profile(server, tokens.access_token)).status, 200);

      const revoked = await post(agent, page.html, action, {});
      assert.equal(revoked.status, 303);
      assert.equal((await profile(server, tokens.access_token)).status, 401);
      const after = await agent.visit(revoked.location!);
      assert.match(after.html, /Access removed: <strong>Notes<\/strong> can no longer use your account\./);
      assert.match(after.html, /No application has access to your account\./);
      const consent = await agent.visit(`/oauth/authorize?${new URLSearchParams({ client_id: client.id, response_type: 'code' })}`);
      assert.equal(consent.redirect, null, 'the application has to ask again');
      assert.match(consent.html, /<h1>Authorize Notes<\/h1>/);
    });

    test('the page claims only removals this user made: not for a link, a client never authorized, or an unknown ID', async () => {
      const { client } = await server.createClient({ name: 'Kept' });
      const { client: stranger } = await server.createClient({ name: 'Stranger' });
      const agent = new UserAgent(server.url);
      const tokens = await obtainTokens(await discover(server, client.id), agent, 'alice');
      const action = '/account/applications/revoke';

      for (const id of [client.id, stranger.id]) {
        const linked = await agent.visit(`/account/applications?${new URLSearchParams({ revoked: id })}`);
        assert.doesNotMatch(linked.html, /Access removed/, 'a link made the page claim a removal');
      }
      const page = await agent.visit('/account/applications');
      const nothing = await post(agent, page.html, action, { client_id: stranger.id });
      assert.deepEqual([nothing.status, nothing.location], [303, '/account/applications']);
      assert.doesNotMatch((await agent.visit(nothing.location!)).html, /Access removed/, 'nothing was removed');
      for (const id of ['', 'not-a-client', randomUUID(), 'https://unknown.example/client.json']) {
        const unknown = await post(agent, page.html, action, { client_id: id });
        assert.equal(unknown.status, 404, id);
        assert.match(unknown.html, /There is no application with this client ID\./);
      }
      assert.equal((await profile(server, tokens.access_token)).status, 200, 'the authorized application is untouched');
    });

    test('a visitor is sent to log in first', async () => {
      const response = await new UserAgent(server.url).fetch('/account/applications');
      assert.equal(response.status, 303);
      assert.equal(response.headers.get('location'), '/login?next=%2Faccount%2Fapplications');
    });
  });
}
