/**
 * `/admin/resources` over plain HTTP, on both backends (SPEC §4.5): registering shows the
 * introspection client's secret once and that secret works; edits add, describe and delete
 * scopes; deleting needs confirmation and revokes what was given; forms need their CSRF
 * token and an administrator; HTML typed in comes back escaped.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as oauth from 'oauth4webapi';
import { listResources } from '../../src/store/resources.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { authorizationUrl, discover, insecure, obtainTokens } from '../support/oauth-client.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent, formFields } from '../support/user-agent.ts';

const HOSTILE = '<img src=x onerror=alert(1)>';

for (const backend of BACKENDS) {
  describe(`resource servers in the admin console (${backend.name})`, backendOptions(backend), () => {
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

    const register = async (fields: Record<string, string>) => {
      const form = await admin.visit('/admin/resources/new');
      return admin.submit(form.html, '/admin/resources', fields);
    };

    test('the list names the built-in resource and is linked from the navigation', async () => {
      const list = await admin.visit('/admin/resources');
      assert.equal(list.response.status, 200);
      assert.match(list.html, /href="\/admin\/resources" aria-current="page"/);
      assert.match(list.html, new RegExp(`<code class="id">${server.url}</code>`));
      assert.match(list.html, /annotation:read/);
    });

    test('registering shows the introspection client and its secret once; the secret works at /oauth/introspect', async () => {
      const done = await register({
        name: 'Files API',
        uri: 'https://files.example/mcp/',
        scopes: 'files:read=Read your files\nfiles:write=Change your files',
      });
      assert.equal(done.response.status, 200);
      const clientId = /id="client-id">([^<]+)</.exec(done.html)![1]!;
      const secret = /id="client-secret">([^<]+)</.exec(done.html)![1]!;
      assert.match(done.html, /https:\/\/files\.example\/mcp</);
      const { client } = await server.createClient({ name: 'App', scope: 'files:read' });
      const app = await discover(server, client.id);
      const tokens = await obtainTokens(app, new UserAgent(server.url), 'alice', { resource: 'https://files.example/mcp' });
      const introspector = await discover(server, clientId, { secret });
      const info = await oauth.processIntrospectionResponse(
        introspector.as,
        introspector.client,
        await oauth.introspectionRequest(introspector.as, introspector.client, introspector.auth, tokens.access_token, insecure),
      );
      assert.equal(info.aud, 'https://files.example/mcp');
      const page = await admin.visit('/admin/resources');
      assert.doesNotMatch(page.html, new RegExp(secret), 'never shown again');
    });

    test('mistakes are shown on the form and register nothing; HTML comes back escaped', async () => {
      const count = (await listResources(server.store.db)).length;
      for (const [fields, message] of [
        [{ name: 'X', uri: 'http://api.example', scopes: '' }, /must use https/],
        [{ name: 'X', uri: 'https://files.example/mcp', scopes: '' }, /exists already/],
        [{ name: 'X', uri: 'https://x.example', scopes: 'annotation:read=Again' }, /exists already/],
        [{ name: 'X', uri: 'https://x.example', scopes: 'no description' }, /name=description/],
        [{ name: HOSTILE, uri: `https://x.example/${HOSTILE}`, scopes: '' }, /URI must not contain spaces/],
      ] as const) {
        const refused = await register(fields);
        assert.equal(refused.response.status, 400);
        assert.match(refused.html, message);
        assert.doesNotMatch(refused.html, /<img src=x/);
      }
      assert.equal((await listResources(server.store.db)).length, count);
    });

    test('an edit adds, describes and deletes scopes; deleting one revokes the access holding it', async () => {
      const done = await register({ name: 'Mail API', uri: 'https://mail.example', scopes: 'mail:read=Read mail\nmail:send=Send mail' });
      const id = /href="\/admin\/resources\/([^"]+)">Edit/.exec(done.html)![1]!;
      const { client } = await server.createClient({ name: 'Mailer', scope: 'mail:send' });
      const tokens = await obtainTokens(await discover(server, client.id), new UserAgent(server.url), 'alice', { resource: 'https://mail.example' });
      const form = await admin.visit(`/admin/resources/${id}`);
      const saved = await admin.submit(form.html, `/admin/resources/${id}`, { name: 'Mail', scopes: 'mail:read=Read your mail\nmail:archive=Archive mail' });
      assert.match(saved.html, /Changes saved/);
      assert.match(saved.html, /mail:archive=Archive mail/);
      assert.match(saved.html, /mail:read=Read your mail/);
      assert.doesNotMatch(saved.html, /mail:send/);
      const refreshed = await fetch(`${server.url}/api/token`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ grant_type: 'refresh_token', client_id: client.id, refresh_token: tokens.refresh_token! }),
      });
      assert.equal(((await refreshed.json()) as { error: string }).error, 'invalid_grant', 'the grant holding mail:send is revoked');
    });

    test('token format, algorithm, lifetime, the second-factor and DPoP rules: registered, shown, edited; bad ones change nothing', async () => {
      const settings = async (id: string) => {
        const row = (await listResources(server.store.db)).find((r) => r.id === id)!;
        return [row.token_format, row.signing_alg, row.access_token_ttl, row.require_second_factor, row.require_dpop];
      };
      const done = await register({
        name: 'Ledger API',
        uri: 'https://ledger.example',
        scopes: 'ledger:read=Read the ledger',
        token_format: 'jwt',
        signing_alg: 'RS256',
        access_token_ttl: '120',
        require_second_factor: 'yes',
        require_dpop: 'yes',
      });
      assert.equal(done.response.status, 200);
      const id = /href="\/admin\/resources\/([^"]+)">Edit/.exec(done.html)![1]!;
      assert.deepEqual(await settings(id), ['jwt', 'RS256', 120, 1, 1]);
      assert.match((await admin.visit('/admin/resources')).html, /JWT RS256, 120 s; second factor required; DPoP required/);
      const form = await admin.visit(`/admin/resources/${id}`);
      assert.match(form.html, /value="jwt" checked/);
      assert.match(form.html, /<option value="RS256" selected>/);
      assert.match(form.html, /id="access_token_ttl"[^>]*value="120"/);
      assert.match(form.html, /name="require_second_factor" value="yes" checked/);
      assert.match(form.html, /name="require_dpop" value="yes" checked/);

      const edit = (fields: Record<string, string>) =>
        admin.submit(form.html, `/admin/resources/${id}`, { name: 'Ledger API', scopes: 'ledger:read=Read the ledger', ...fields });
      for (const [fields, field, message] of [
        [{ token_format: 'jwt', access_token_ttl: '3601' }, 'access_token_ttl', /from 60 to 3600 for jwt/],
        [{ token_format: 'opaque', access_token_ttl: '86401' }, 'access_token_ttl', /from 60 to 86400 for opaque/],
        [{ token_format: 'paseto', access_token_ttl: '' }, 'token_format', /opaque or jwt/],
        [{ token_format: 'jwt', signing_alg: 'HS256' }, 'signing_alg', /ES256 or RS256/],
      ] as const) {
        const refused = await edit(fields);
        assert.equal(refused.response.status, 400);
        assert.match(refused.html, new RegExp(`id="${field}-error">[^<]*${message.source}`));
        assert.deepEqual(await settings(id), ['jwt', 'RS256', 120, 1, 1], 'nothing changed');
      }
      const saved = await edit({ token_format: 'opaque', signing_alg: 'ES256', access_token_ttl: '' });
      assert.match(saved.html, /Changes saved/);
      assert.deepEqual(await settings(id), ['opaque', 'ES256', null, 0, 0], 'an empty lifetime is the default; an unticked box clears the rule');
      assert.match((await admin.visit('/admin/resources')).html, new RegExp(`opaque, ${server.config.accessTokenTtl} s <span class="muted">\\(default\\)`));
    });

    test("the built-in resource's format is not offered for editing, and a forged change is refused; its lifetime may change", async () => {
      const form = await admin.visit('/admin/resources/builtin');
      assert.doesNotMatch(form.html, /name="token_format"/);
      assert.match(form.html, /the built-in resource's format cannot be changed/);
      const fields = {
        name: 'This service',
        scopes: 'annotation:read=Read your annotations, including private ones\nannotation:write=Create, edit and delete annotations as you',
      };
      const forged = await admin.submit(form.html, '/admin/resources/builtin', { ...fields, token_format: 'jwt' });
      assert.equal(forged.response.status, 400);
      assert.match(forged.html, /token format cannot be changed/);
      const row = async () => (await listResources(server.store.db)).find((r) => r.id === 'builtin')!;
      assert.equal((await row()).token_format, 'opaque');
      assert.match((await admin.submit(form.html, '/admin/resources/builtin', { ...fields, access_token_ttl: '900' })).html, /Changes saved/);
      assert.deepEqual([(await row()).token_format, (await row()).access_token_ttl], ['opaque', 900]);
      await admin.submit(form.html, '/admin/resources/builtin', { ...fields, access_token_ttl: '' });
    });

    test("the built-in scopes' descriptions are edited like any other's, and the consent page asks in the new words", async () => {
      const form = await admin.visit('/admin/resources/builtin');
      const scopes = 'annotation:read=See your profile and your notes\nannotation:write=Create, edit and delete annotations as you';
      assert.match((await admin.submit(form.html, '/admin/resources/builtin', { name: 'This service', scopes })).html, /Changes saved/);
      const { client } = await server.createClient({ name: 'Notes app', scope: 'annotation:read' });
      const alice = new UserAgent(server.url);
      await alice.login('alice');
      const consent = await alice.visit(String((await authorizationUrl(await discover(server, client.id), { scope: 'annotation:read' })).url));
      assert.match(consent.html, /See your profile and your notes/);
      assert.doesNotMatch(consent.html, /Read your annotations/);
      const restore = await admin.visit('/admin/resources/builtin');
      await admin.submit(restore.html, '/admin/resources/builtin', {
        name: 'This service',
        scopes: 'annotation:read=Read your annotations, including private ones\nannotation:write=Create, edit and delete annotations as you',
      });
    });

    test('Your applications says which resource server each access is to', async () => {
      await register({ name: 'Calendar API', uri: 'https://calendar.example', scopes: 'calendar:read=See your calendar' });
      const { client } = await server.createClient({ name: 'Planner', scope: 'annotation:read calendar:read' });
      const app = await discover(server, client.id);
      const carol = new UserAgent(server.url);
      await server.createUser('carol');
      await obtainTokens(app, carol, 'carol', { scope: 'annotation:read' });
      await obtainTokens(app, carol, 'carol', { resource: 'https://calendar.example' });
      const page = await carol.visit('/account/applications');
      const planner = page.html.slice(page.html.indexOf('Planner'));
      assert.match(
        planner,
        /On <strong class="resource">This service<\/strong> \(<code>[^<]+<\/code>\), can:\s*<\/p>\s*<ul class="scopes">\s*<li>[^<]+<code>annotation:read<\/code>/,
      );
      assert.match(
        planner,
        /On <strong class="resource">Calendar API<\/strong> \(<code>https:\/\/calendar.example<\/code>\), can:\s*<\/p>\s*<ul class="scopes">\s*<li>See your calendar <code>calendar:read<\/code>/,
      );
    });

    test('deleting asks for confirmation, needs the CSRF token, and revokes every grant for it', async () => {
      const done = await register({ name: 'Doomed API', uri: 'https://doomed.example', scopes: 'doomed:use=Use it' });
      const id = /href="\/admin\/resources\/([^"]+)">Edit/.exec(done.html)![1]!;
      const confirm = await admin.visit(`/admin/resources/${id}/delete`);
      assert.match(confirm.html, /Delete Doomed API\?/);
      const forged = formFields(confirm.html, `/admin/resources/${id}/delete`);
      forged.delete('_csrf');
      assert.equal((await admin.fetch(`/admin/resources/${id}/delete`, { method: 'POST', body: forged })).status, 403);
      assert.ok((await listResources(server.store.db)).some((r) => r.id === id));
      const deleted = await admin.submit(confirm.html, `/admin/resources/${id}/delete`);
      assert.match(deleted.html, /The resource server was deleted/);
      assert.ok(!(await listResources(server.store.db)).some((r) => r.id === id));
      assert.equal((await admin.visit(`/admin/resources/${id}`)).response.status, 404);
    });

    test('only administrators see or change resource servers', async () => {
      const alice = new UserAgent(server.url);
      await alice.login('alice');
      assert.equal((await alice.visit('/admin/resources')).response.status, 403);
      const before = (await listResources(server.store.db)).length;
      const response = await alice.fetch('/admin/resources', {
        method: 'POST',
        body: new URLSearchParams({ name: 'x', uri: 'https://y.example', scopes: '' }),
      });
      assert.equal(response.status, 403);
      assert.equal((await listResources(server.store.db)).length, before);
    });
  });
}
