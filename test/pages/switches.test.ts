/**
 * The admin console's switches over plain HTTP, on both backends (SPEC §4.16): **Enable** and
 * **Delete** (after a confirm page) on /admin/users and a person's page; **Disable**,
 * **Enable** and **Delete** for every kind of client on /admin/oauthclients. Each works
 * through the same domain functions as the command line, is audited as made by the
 * administrator, needs the form's CSRF token, and refuses what it must (oneself).
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { findClient } from '../../src/store/clients.ts';
import { findUserByUsername } from '../../src/store/users.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { discover, obtainTokens, profile, refreshRequest, tokenResult } from '../support/oauth-client.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent, formFields } from '../support/user-agent.ts';

for (const backend of BACKENDS) {
  describe(`switching people and clients off and on in the admin console (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let admin: UserAgent;
    let rootId: string;

    before(async () => {
      server = await startServer(backend, { DYNAMIC_CLIENT_REGISTRATION: 'true' });
      rootId = (await server.createUser('root', { admin: true })).id;
      admin = new UserAgent(server.url);
      await admin.login('root');
    });
    after(() => server?.close());

    const audited = async (type: string, about: { userId?: string; clientId?: string }) =>
      server.store.db
        .selectFrom('audit_events')
        .select(['actor_id', 'user_id', 'client_id', 'detail'])
        .where('type', '=', type)
        .$if(about.userId !== undefined, (q) => q.where('user_id', '=', about.userId!))
        .$if(about.clientId !== undefined, (q) => q.where('client_id', '=', about.clientId!))
        .execute();

    test('a disabled person has Enable on the list and on their page; enabling lets them log in again', async () => {
      const frank = await server.createUser('frank');
      const disabled = await admin.submit((await admin.visit('/admin/users?q=frank')).html, `/admin/users/${frank.id}/disable`);
      assert.match(disabled.html, /User disabled/);
      const list = await admin.visit('/admin/users?q=frank');
      assert.match(list.html, new RegExp(`<form method="post" action="/admin/users/${frank.id}/enable">`));
      assert.doesNotMatch(list.html, new RegExp(`action="/admin/users/${frank.id}/disable"`), 'no Disable for a disabled person');
      const own = await admin.visit(`/admin/users/${frank.id}`);
      assert.match(own.html, /<dt>Status<\/dt><dd>disabled: cannot log in<\/dd>/);
      assert.match(own.html, new RegExp(`action="/admin/users/${frank.id}/enable"`));
      assert.notEqual((await new UserAgent(server.url).login('frank')).response.status, 200);

      const enabled = await admin.submit(own.html, `/admin/users/${frank.id}/enable`);
      assert.equal(enabled.response.status, 200);
      assert.match(enabled.html, /User enabled: they may log in again\./);
      assert.equal((await findUserByUsername(server.store.db, 'frank'))!.disabled, 0);
      assert.equal((await new UserAgent(server.url).login('frank')).response.status, 200, 'he logs in again');
      const [event] = await audited('user_enabled', { userId: frank.id });
      assert.equal(event?.actor_id, rootId, 'made by the administrator');
    });

    test('Delete asks on a page first, then removes the person and everything they had; the audit trail keeps their id', async () => {
      const grace = await server.createUser('grace');
      const { client } = await server.createClient({ name: 'Grace app' });
      const app = await discover(server, client.id);
      const tokens = await obtainTokens(app, new UserAgent(server.url), 'grace');

      const list = await admin.visit('/admin/users?q=grace');
      assert.match(list.html, new RegExp(`<a class="button danger small" href="/admin/users/${grace.id}/delete"`));
      const own = await admin.visit(`/admin/users/${grace.id}`);
      assert.match(own.html, new RegExp(`href="/admin/users/${grace.id}/delete">Delete</a>`));
      const confirm = await admin.visit(`/admin/users/${grace.id}/delete`);
      assert.equal(confirm.response.status, 200);
      assert.match(confirm.html, /<h1>Delete grace\?<\/h1>/);
      assert.match(confirm.html, /This cannot be undone\./);
      assert.ok(await findUserByUsername(server.store.db, 'grace'), 'the page itself changes nothing');

      const forged = await admin.fetch(`/admin/users/${grace.id}/delete`, { method: 'POST', body: new URLSearchParams() });
      assert.equal(forged.status, 403, 'without the CSRF token');
      const deleted = await admin.submit(confirm.html, `/admin/users/${grace.id}/delete`);
      assert.equal(deleted.response.status, 200);
      assert.match(deleted.html, /User deleted: everything they had was revoked or removed\./);
      assert.doesNotMatch(deleted.html, /grace@example\.com/);
      assert.equal(await findUserByUsername(server.store.db, 'grace'), undefined);
      assert.equal((await profile(server, tokens.access_token)).status, 401);
      assert.deepEqual(
        [(await tokenResult(await refreshRequest(app, tokens.refresh_token!))).status, (await admin.visit(`/admin/users/${grace.id}`)).response.status],
        [400, 404],
      );
      const [event] = await audited('user_deleted', { userId: grace.id });
      assert.deepEqual([event?.actor_id, JSON.parse(event!.detail!)], [rootId, { username: 'grace' }]);
      assert.equal((await audited('token_issued', { userId: grace.id })).length, 1, 'her earlier events stay');
      const trail = await admin.visit(`/admin/audit?user=${grace.id}`);
      assert.equal(trail.response.status, 200, 'the audit page finds the events of a person who is gone by their id');
      assert.match(trail.html, /user_deleted/);
      assert.match(trail.html, /token_issued/);
    });

    test('nobody deletes their own account: no button, and a hand-made request is refused', async () => {
      const own = await admin.visit(`/admin/users/${rootId}`);
      assert.doesNotMatch(own.html, /\/delete"/);
      const confirm = await admin.visit(`/admin/users/${rootId}/delete`);
      assert.match(confirm.html, /You cannot delete your own account\./);
      assert.doesNotMatch(confirm.html, /<form method="post" action="\/admin\/users\/[^"]+\/delete">/);
      const csrf = formFields((await admin.visit('/admin/users')).html, '/logout').get('_csrf')!;
      const refused = await admin.fetch(`/admin/users/${rootId}/delete`, { method: 'POST', body: new URLSearchParams({ _csrf: csrf }) });
      assert.equal(refused.status, 400);
      assert.match(await refused.text(), /You cannot delete your own account/);
      assert.ok(await findUserByUsername(server.store.db, 'root'));
      const missing = await admin.fetch(`/admin/users/${randomUUID()}/delete`, { method: 'POST', body: new URLSearchParams({ _csrf: csrf }) });
      assert.equal(missing.status, 404);
    });

    test('every kind of client has Disable, Enable and Delete; a disabled client is refused and loses its tokens until enabled again', async () => {
      await server.createUser('heidi');
      const { client } = await server.createClient({ name: 'Registered switch' });
      const registration = await fetch(new URL('/oauth/register', server.url), {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ client_name: 'Dynamic switch', redirect_uris: ['http://127.0.0.1:8765/callback'] }),
      });
      const dynamic = ((await registration.json()) as { client_id: string }).client_id;

      for (const clientId of [client.id, dynamic]) {
        const app = await discover(server, clientId);
        const tokens = await obtainTokens(app, new UserAgent(server.url), 'heidi');
        const list = await admin.visit('/admin/oauthclients');
        // Delete leads to its confirm page by a form that sends the client ID (a URL, maybe) in the query.
        assert.match(
          list.html,
          new RegExp(`<input type="hidden" name="client_id" value="${clientId}">\\s*<button type="submit" class="danger small" aria-label="Delete `),
        );
        const disabled = await admin.submit(list.html, '/admin/oauthclients/disable', { client_id: clientId });
        assert.equal(disabled.response.status, 200);
        assert.match(disabled.html, /The client is disabled: it is refused from now on, and everything issued to it was revoked\./);
        assert.equal((await findClient(server.store.db, clientId))!.disabled, 1);
        assert.match(disabled.html, /\(disabled\)/);
        assert.equal((await profile(server, tokens.access_token)).status, 401);
        const refreshed = await tokenResult(await refreshRequest(app, tokens.refresh_token!));
        assert.deepEqual([refreshed.status, refreshed.body.error], [401, 'invalid_client']);

        const enabled = await admin.submit(disabled.html, '/admin/oauthclients/enable', { client_id: clientId });
        assert.match(enabled.html, /The client is enabled: it may get tokens again\./);
        assert.equal((await profile(server, (await obtainTokens(app, new UserAgent(server.url), 'heidi')).access_token)).status, 200);
        assert.equal((await profile(server, tokens.access_token)).status, 401, 'the old token stays revoked');
        for (const type of ['client_disabled', 'client_enabled']) assert.equal((await audited(type, { clientId }))[0]?.actor_id, rootId, type);
      }

      // A registered client's own page has the switch too, and comes back to itself.
      const edit = await admin.visit(`/admin/oauthclients/${client.id}`);
      assert.match(edit.html, /Disable this client/);
      const switchForm = formFields(edit.html, '/admin/oauthclients/disable\\?from=edit'); // the action is matched as a pattern
      const off = await admin.visit('/admin/oauthclients/disable?from=edit', { method: 'POST', body: switchForm });
      assert.match(off.html, /Enable this client/);
      assert.match(off.html, /The client is disabled/);

      // Delete, after its page: for the dynamic client (an ID the form carries), and for the registered one.
      for (const clientId of [dynamic, client.id]) {
        const confirm = await admin.visit(`/admin/oauthclients/delete?client_id=${encodeURIComponent(clientId)}`);
        assert.equal(confirm.response.status, 200);
        assert.match(confirm.html, /This cannot be undone\./);
        const deleted = await admin.submit(confirm.html, '/admin/oauthclients/delete');
        assert.match(deleted.html, /The client was deleted and everything issued to it was revoked\./);
        assert.equal(await findClient(server.store.db, clientId), undefined);
        assert.equal((await audited('client_deleted', { clientId }))[0]?.actor_id, rootId);
      }
      const unknown = await admin.visit(`/admin/oauthclients/delete?client_id=${randomUUID()}`);
      assert.equal(unknown.response.status, 404);
      const csrf = formFields((await admin.visit('/admin/oauthclients')).html, '/logout').get('_csrf')!;
      for (const action of ['disable', 'enable', 'delete']) {
        const missing = await admin.fetch(`/admin/oauthclients/${action}`, {
          method: 'POST',
          body: new URLSearchParams({ _csrf: csrf, client_id: 'https://gone.example/c.json' }),
        });
        assert.equal(missing.status, 404, action);
        const forged = await admin.fetch(`/admin/oauthclients/${action}`, { method: 'POST', body: new URLSearchParams({ client_id: dynamic }) });
        assert.equal(forged.status, 403, action);
      }
    });
  });
}
