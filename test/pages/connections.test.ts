/**
 * The pages of upstream identity providers over plain HTTP, on both backends (SPEC §4.5,
 * §4.13): `/admin/connections`, where an administrator adds a connection with the form (the
 * result shows the callback URL to register at the provider), edits, disables, enables and
 * deletes it — each audited, never showing the client secret back, the forms needing their CSRF
 * token and an administrator, refused input named next to its field and changing nothing;
 * `/account/security`, which lists the enabled connections with **Connect**, a linked identity
 * with **Disconnect** (refused when it is the person's only way to log in), and "log in again"
 * instead of the buttons without a recent login; `/admin/users`, each person's connections.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { COMMAND_LINE } from '../../src/audit.ts';
import { createConnection } from '../../src/accounts/connections/connections.ts';
import { insertIdentity } from '../../src/store/connections.ts';
import type { User } from '../../src/store/schema.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent, formFields } from '../support/user-agent.ts';

const SECRET = 'provider-secret-Zq7xK2mP9wL4';
const SECURITY = '/account/security';

/** Every text field of the connection form, empty: a test gives the ones it means. */
const BLANK = {
  name: '',
  provider: '',
  issuer: '',
  authorization_url: '',
  token_url: '',
  userinfo_url: '',
  tenant: '',
  base_url: '',
  client_id: '',
  client_secret: '',
  scope: '',
  domains: '',
  groups_claim: '',
};
const ACME = {
  name: 'Acme Okta',
  provider: 'oidc',
  issuer: 'https://acme.okta.example',
  client_id: 'gatehouse-at-acme',
  client_secret: SECRET,
  domains: 'acme.example',
  groups_claim: 'groups',
  create_accounts: 'yes',
};

for (const backend of BACKENDS) {
  describe(`connections on the people's pages (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let root: User;
    let carol: User;
    let admin: UserAgent;

    before(async () => {
      server = await startServer(backend, { LOG_LEVEL: 'warn' });
      root = await server.createUser('root', { admin: true });
      await server.createUser('alice');
      carol = await server.createUser('carol');
      admin = new UserAgent(server.url);
      await admin.login('root');
    });
    after(() => server?.close());

    const db = () => server.store.db;
    const connection = (id: string) => db().selectFrom('connections').selectAll().where('id', '=', id).executeTakeFirst();
    const connectionIds = async () => (await db().selectFrom('connections').select('id').orderBy('id').execute()).map((row) => row.id);
    const audits = (type: string) => db().selectFrom('audit_events').select(['actor_id', 'user_id', 'detail']).where('type', '=', type).execute();
    const identityIds = async (user: User) =>
      (await db().selectFrom('user_identities').select('connection_id').where('user_id', '=', user.id).orderBy('connection_id').execute()).map(
        (row) => row.connection_id,
      );
    /** The field's error as the form shows it: next to the field, which is marked invalid. */
    const errorNextTo = (html: string, field: string) => new RegExp(`<p class="field-error" id="${field}-error">([^<]*)</p>`).exec(html)?.[1];

    test('the security page has no connections section while there is no connection and no identity', async () => {
      const alice = new UserAgent(server.url);
      await alice.login('alice');
      const page = await alice.visit(SECURITY);
      assert.equal(page.response.status, 200);
      assert.doesNotMatch(page.html, /Connected identities/);
    });

    test('an administrator adds a connection with the form; the result shows the callback URL to register, never the secret', async () => {
      const list = await admin.visit('/admin/connections');
      assert.equal(list.response.status, 200);
      assert.match(list.html, /href="\/admin\/connections" aria-current="page"/);
      assert.match(list.html, /No connections yet/);
      assert.match(list.html, /href="\/admin\/connections\/new">Add a connection</);

      const form = await admin.visit('/admin/connections/new');
      assert.equal(form.response.status, 200);
      assert.ok(form.html.includes(`${server.url}/login/connections/<var>id</var>/callback`), 'the form says what the callback URL will be');
      for (const label of ['Other OpenID Connect provider', 'Other OAuth 2.0 provider', 'GitHub', 'Microsoft'])
        assert.ok(form.html.includes(`>${label}</option>`), label);
      assert.match(form.html, /<input type="checkbox" id="create_accounts" name="create_accounts" value="yes" checked>/, 'creating accounts is ticked');
      assert.match(form.html, /<input id="client_secret" name="client_secret" type="password"/);

      const added = await admin.submit(form.html, '/admin/connections', { ...BLANK, ...ACME });
      assert.equal(added.response.status, 200);
      assert.match(added.html, /<h1>Connection added<\/h1>/);
      const callback = `${server.url}/login/connections/acme-okta/callback`;
      assert.ok(added.html.includes(`<code class="secret" id="callback-url">${callback}</code>`), 'the callback URL, to copy');
      assert.match(added.html, /data-copy="callback-url"/);
      assert.match(added.html, /<script src="\/static\/copy.js"><\/script>/);
      assert.ok(!added.html.includes(SECRET), 'the secret is not shown back');

      const row = await connection('acme-okta');
      assert.ok(row);
      assert.equal(row.name, 'Acme Okta');
      assert.equal(row.kind, 'oidc');
      assert.equal(row.preset, null);
      assert.equal(row.issuer, 'https://acme.okta.example');
      assert.equal(row.scope, 'openid email profile');
      assert.equal(row.domains, '["acme.example"]');
      assert.equal(row.groups_claim, 'groups');
      assert.deepEqual([row.enabled, row.create_accounts, row.required, row.link_verified_email, row.trust_mfa], [1, 1, 0, 0, 0]);
      const [created] = await audits('connection_created');
      assert.equal(created?.actor_id, root.id, 'made by the administrator');
      assert.match(String(created!.detail), /"connection":"acme-okta"/);

      const listed = await admin.visit('/admin/connections');
      assert.match(listed.html, /<a href="\/admin\/connections\/acme-okta\/edit">Acme Okta<\/a>/);
      assert.match(listed.html, /<td data-label="Provider">OpenID Connect/);
      assert.match(listed.html, /<td data-label="Status">enabled<\/td>/);
      assert.match(listed.html, /<code>acme\.example<\/code>/);
      assert.match(listed.html, /<td data-label="Required">no<\/td>/);
      assert.ok(!listed.html.includes(SECRET));

      const edit = await admin.visit('/admin/connections/acme-okta/edit');
      assert.equal(edit.response.status, 200);
      assert.ok(!edit.html.includes(SECRET), 'nor on the edit page');
      assert.match(edit.html, /<input id="client_secret" name="client_secret" type="password" maxlength="2000" autocomplete="new-password"/);
      assert.ok(edit.html.includes(`<code class="id" id="callback-url">${callback}</code>`));
      assert.match(edit.html, /<input id="issuer" name="issuer" value="https:\/\/acme\.okta\.example"/);
      assert.match(edit.html, /<option value="oidc" selected>/);
    });

    test('a connection named "New" keeps its own pages, apart from the add form', async () => {
      await createConnection(server.app.gatehouse, { name: 'New', preset: 'google', clientId: 'x', clientSecret: 'y' }, COMMAND_LINE);
      assert.match((await admin.visit('/admin/connections/new/edit')).html, /<h1>Edit New<\/h1>/);
      assert.match((await admin.visit('/admin/connections/new')).html, /<h1>Add a connection<\/h1>/);
      const page = await admin.visit('/admin/connections/new/delete');
      await admin.submit(page.html, '/admin/connections/new/delete');
      assert.deepEqual(await connectionIds(), ['acme-okta']);
    });

    test('an edit saves what changed and audits which settings changed; an empty secret keeps the stored one', async () => {
      const before = (await connection('acme-okta'))!;
      const page = await admin.visit('/admin/connections/acme-okta/edit');
      const saved = await admin.submit(page.html, '/admin/connections/acme-okta/edit', {
        ...BLANK,
        ...ACME,
        name: 'Acme',
        client_secret: '',
        scope: 'openid email',
        domains: 'acme.example, acme.test',
        required: 'yes',
        trust_mfa: 'yes',
      });
      assert.equal(saved.response.status, 200);
      assert.match(saved.html, /Changes saved\./);
      assert.match(saved.html, /<h1>Edit Acme<\/h1>/);
      const after = (await connection('acme-okta'))!;
      assert.equal(after.name, 'Acme');
      assert.equal(after.scope, 'openid email');
      assert.equal(after.domains, '["acme.example","acme.test"]');
      assert.deepEqual([after.required, after.trust_mfa, after.create_accounts], [1, 1, 1]);
      assert.equal(after.client_secret, before.client_secret, 'the secret is kept');
      assert.match(page.html, /<input type="checkbox" id="keep_tokens" name="keep_tokens" value="yes">/, 'the vault is offered, off');
      const [updated] = await audits('connection_updated');
      assert.equal(updated?.actor_id, root.id);
      const changed = (JSON.parse(String(updated!.detail)) as { changed: string }).changed.split(' ').sort();
      assert.deepEqual(changed, ['domains', 'name', 'required', 'scope', 'trust_mfa']);

      // A new secret replaces the stored one; the audit names the change, never the value.
      await admin.submit(page.html, '/admin/connections/acme-okta/edit', {
        ...BLANK,
        ...ACME,
        name: 'Acme',
        client_secret: 'a-new-secret-from-the-provider',
        scope: 'openid email',
        domains: 'acme.example acme.test',
        required: 'yes',
        trust_mfa: 'yes',
      });
      assert.notEqual((await connection('acme-okta'))!.client_secret, before.client_secret);
      const last = (await audits('connection_updated')).at(-1)!;
      assert.equal((JSON.parse(String(last.detail)) as { changed: string }).changed, 'client_secret');
      assert.ok(!String(last.detail).includes('a-new-secret'));
      assert.ok(!(await admin.visit('/admin/connections/acme-okta/edit')).html.includes('a-new-secret'));
    });

    test('refused input is named next to its field, and nothing is stored or changed', async () => {
      const page = await admin.visit('/admin/connections/new');
      for (const [values, field, message] of [
        [{ name: '' }, 'name', 'A connection needs a name'],
        [{ provider: '' }, 'provider', 'Choose the provider'],
        [{ provider: 'saml' }, 'provider', 'Preset must be one of github, google, microsoft, gitlab, orcid'],
        [{ provider: 'microsoft' }, 'tenant', 'The microsoft preset needs a tenant: the Directory (tenant) ID, a GUID'],
        [{ provider: 'google', base_url: 'https://google.example' }, 'base_url', 'The google preset takes no base URL'],
        [{ issuer: 'http://acme.okta.example' }, 'issuer', 'Issuer must be an https URL'],
        [{ issuer: '' }, 'issuer', 'An OpenID Connect connection needs an issuer URL'],
        [
          { provider: 'oauth2', authorization_url: 'https://p.example/authorize', userinfo_url: 'https://p.example/user' },
          'token_url',
          'An oauth2 connection needs an authorization URL, a token URL and a user info URL',
        ],
        [{ client_id: '' }, 'client_id', 'Client ID must be 1-500 characters, no spaces'],
        [{ client_secret: '' }, 'client_secret', 'A connection needs the client secret the provider gave (1-2000 characters)'],
        [{ domains: 'acme' }, 'domains', '"acme" is not an email domain'],
        [{ domains: '', required: 'yes' }, 'required', 'A required connection needs email domains: the people it is required for'],
        [{ scope: 'email profile' }, 'scope', 'An OpenID Connect connection’s scope must include openid'],
        [{ groups_claim: 'groups claim' }, 'groups_claim', 'Groups claim must be a claim name'],
        [{ name: 'Acme <script>', issuer: 'https://<script>.example' }, 'issuer', 'Issuer must be an absolute https URL'],
        // This server has no KEYS_SECRET: the provider's tokens could not be kept sealed.
        [{ keep_tokens: 'yes' }, 'keep_tokens', 'Keeping the provider’s tokens needs KEYS_SECRET: they are stored only encrypted under it'],
        [
          { token_resources: 'https://unknown.example/mcp' },
          'token_resources',
          'Resource server https://unknown.example/mcp is not registered (see gatehouse resource list)',
        ],
      ] as const) {
        const refused = await admin.submit(page.html, '/admin/connections', { ...BLANK, ...ACME, name: 'Other', ...values });
        assert.equal(refused.response.status, 400, JSON.stringify(values));
        assert.equal(
          errorNextTo(refused.html, field)
            ?.replace(/&quot;/g, '"')
            .replace(/&#39;/g, "'"),
          message,
          JSON.stringify(values),
        );
        assert.match(refused.html, new RegExp(`<li><a href="#${field}">`), 'and in the summary, linked to the field');
        assert.doesNotMatch(refused.html, /<script>/);
        assert.ok(!refused.html.includes(SECRET), 'a refused form does not keep the secret');
      }
      assert.deepEqual(await connectionIds(), ['acme-okta']);

      const before = await connection('acme-okta');
      const edit = await admin.visit('/admin/connections/acme-okta/edit');
      const refused = await admin.submit(edit.html, '/admin/connections/acme-okta/edit', { ...BLANK, ...ACME, issuer: 'https://acme.example/#x' });
      assert.equal(refused.response.status, 400);
      assert.equal(errorNextTo(refused.html, 'issuer'), 'Issuer must have no query, fragment or credentials');
      assert.deepEqual(await connection('acme-okta'), before);
      assert.equal((await admin.visit('/admin/connections/nope/edit')).response.status, 404);
      assert.equal((await admin.visit('/admin/connections/%00/edit')).response.status, 400, 'NUL is refused before the store sees it');
    });

    test('the forms need the CSRF token and an administrator', async () => {
      const before = await connection('acme-okta');
      const forged = (action: string, values: Record<string, string> = {}) => {
        const fields = new URLSearchParams(values);
        return admin.fetch(action, { method: 'POST', body: fields });
      };
      assert.equal((await forged('/admin/connections', { ...BLANK, ...ACME, name: 'Forged' })).status, 403);
      assert.equal((await forged('/admin/connections/acme-okta/edit', { ...BLANK, ...ACME, name: 'Forged' })).status, 403);
      assert.equal((await forged('/admin/connections/acme-okta/disable')).status, 403);
      assert.equal((await forged('/admin/connections/acme-okta/delete')).status, 403);

      const alice = new UserAgent(server.url);
      await alice.login('alice');
      for (const path of ['/admin/connections', '/admin/connections/new', '/admin/connections/acme-okta/edit', '/admin/connections/acme-okta/delete'])
        assert.equal((await alice.visit(path)).response.status, 403, path);
      // With her own valid CSRF token: still not an administrator.
      const csrf = formFields((await alice.visit(SECURITY)).html, '/logout').get('_csrf')!;
      for (const path of [
        '/admin/connections',
        '/admin/connections/acme-okta/edit',
        '/admin/connections/acme-okta/disable',
        '/admin/connections/acme-okta/delete',
      ])
        assert.equal((await alice.fetch(path, { method: 'POST', body: new URLSearchParams({ _csrf: csrf, ...BLANK, ...ACME }) })).status, 403, path);
      assert.deepEqual(await connectionIds(), ['acme-okta']);
      assert.deepEqual(await connection('acme-okta'), before);
    });

    test('Disable and Enable with the buttons, audited', async () => {
      const list = await admin.visit('/admin/connections');
      const disabled = await admin.submit(list.html, '/admin/connections/acme-okta/disable');
      assert.match(disabled.html, /The connection is disabled/);
      assert.match(disabled.html, /<td data-label="Status">disabled<\/td>/);
      assert.equal((await connection('acme-okta'))!.enabled, 0);
      const enabled = await admin.submit(disabled.html, '/admin/connections/acme-okta/enable');
      assert.match(enabled.html, /The connection is enabled/);
      assert.equal((await connection('acme-okta'))!.enabled, 1);
      assert.equal((await audits('connection_disabled'))[0]?.actor_id, root.id);
      assert.equal((await audits('connection_enabled'))[0]?.actor_id, root.id);
    });

    test('the security page offers Connect for each enabled connection; a linked identity has Disconnect; /admin/users lists it', async () => {
      await createConnection(server.app.gatehouse, { name: 'GitHub', preset: 'github', clientId: 'Iv1.gh', clientSecret: 'gh-secret' }, COMMAND_LINE);
      const carolAgent = new UserAgent(server.url);
      await carolAgent.login('carol');
      let page = await carolAgent.visit(SECURITY);
      assert.match(page.html, /<h2 id="identities-heading">Connected identities<\/h2>/);
      for (const id of ['acme-okta', 'github']) assert.ok(page.html.includes(`action="/account/security/connections/${id}/connect"`), id);
      assert.doesNotMatch(page.html, /\/disconnect"/);

      // Connect starts a login at the provider for this person, back to the callback URL.
      const started = await carolAgent.submit(page.html, '/account/security/connections/github/connect');
      assert.equal(started.redirect?.origin, 'https://github.com');
      assert.equal(started.redirect?.searchParams.get('redirect_uri'), `${server.url}/login/connections/github/callback`);

      // A linked identity (as a login through the provider leaves it).
      assert.ok(await insertIdentity(db(), { connectionId: 'github', subject: '583231', userId: carol.id, email: 'carol@users.example', now: Date.now() }));
      page = await carolAgent.visit(SECURITY);
      assert.match(page.html, /Connected as <strong>carol@users\.example<\/strong>/);
      assert.ok(page.html.includes('action="/account/security/connections/github/disconnect"'));
      assert.ok(!page.html.includes('action="/account/security/connections/github/connect"'));
      assert.ok(page.html.includes('action="/account/security/connections/acme-okta/connect"'));

      const users = await admin.visit('/admin/users');
      assert.match(users.html, /<th scope="col">Connections<\/th>/);
      assert.match(users.html, /<td data-label="Connections">GitHub<\/td>/);
      assert.match(users.html, /<td data-label="Connections">none<\/td>/);
    });

    test('Disconnect is refused when it would leave no way to log in, and done when there is another', async () => {
      const carolAgent = new UserAgent(server.url);
      await carolAgent.login('carol');
      // No password (an account made by a login through the provider), no passkey, one identity.
      await db().updateTable('users').set({ password_hash: '' }).where('id', '=', carol.id).execute();
      let page = await carolAgent.visit(SECURITY);
      assert.equal((await carolAgent.fetch('/account/security/connections/github/disconnect', { method: 'POST', body: new URLSearchParams() })).status, 403);
      const refused = await carolAgent.submit(page.html, '/account/security/connections/github/disconnect');
      assert.equal(refused.response.status, 400);
      assert.match(refused.html, /This is your only way to log in/);
      assert.deepEqual(await identityIds(carol), ['github']);

      // Another way: an identity at another enabled connection.
      assert.ok(await insertIdentity(db(), { connectionId: 'acme-okta', subject: 'carol-at-acme', userId: carol.id, email: null, now: Date.now() }));
      page = await carolAgent.visit(SECURITY);
      const done = await carolAgent.submit(page.html, '/account/security/connections/github/disconnect');
      assert.equal(done.response.status, 200);
      assert.match(done.html, /Identity disconnected\./);
      assert.ok(done.html.includes('action="/account/security/connections/github/connect"'));
      assert.deepEqual(await identityIds(carol), ['acme-okta']);
      const [unlinked] = await audits('identity_unlinked');
      assert.equal(unlinked?.actor_id, carol.id);
      assert.equal(unlinked?.user_id, carol.id);
      assert.match(String(unlinked!.detail), /"connection":"github"/);
    });

    test('without a recent login the identities are listed, with "log in again" instead of the buttons', async () => {
      const carolAgent = new UserAgent(server.url);
      await db()
        .updateTable('users')
        .set({ password_hash: (await db().selectFrom('users').select('password_hash').where('id', '=', root.id).executeTakeFirstOrThrow()).password_hash })
        .where('id', '=', carol.id)
        .execute();
      await carolAgent.login('carol');
      server.advance(10 * 60);
      const page = await carolAgent.visit(SECURITY);
      assert.match(page.html, /Connected identities/);
      assert.match(page.html, /id="identities-reauth"/);
      assert.match(page.html, /<h3 id="identity-acme-okta">Acme<\/h3>/);
      assert.match(page.html, /<h3 id="identity-github">GitHub<\/h3>/);
      assert.doesNotMatch(page.html, /\/(connect|disconnect)"/);
      const csrf = formFields(page.html, '/logout');
      assert.equal((await carolAgent.fetch('/account/security/connections/acme-okta/disconnect', { method: 'POST', body: csrf })).status, 403);
      assert.deepEqual(await identityIds(carol), ['acme-okta']);
    });

    test('Delete after the confirm page: the connection and its identities go, audited', async () => {
      const confirm = await admin.visit('/admin/connections/acme-okta/delete');
      assert.equal(confirm.response.status, 200);
      assert.match(confirm.html, /<h1>Delete Acme\?<\/h1>/);
      assert.deepEqual(await connectionIds(), ['acme-okta', 'github'], 'the confirm page changes nothing');
      const deleted = await admin.submit(confirm.html, '/admin/connections/acme-okta/delete');
      assert.match(deleted.html, /The connection was deleted/);
      assert.deepEqual(await connectionIds(), ['github']);
      assert.deepEqual(await identityIds(carol), []);
      assert.equal((await audits('connection_deleted'))[0]?.actor_id, root.id);
    });
  });
}
