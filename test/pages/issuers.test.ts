/**
 * `/admin/issuers` over plain HTTP, on both backends (SPEC §4.5, §4.11): an administrator adds
 * a trusted issuer with the form, sees it listed (a page at a time) and deletes it; each change
 * is audited; the forms need their CSRF token and an administrator, and refused input changes
 * nothing. The same domain functions as `gatehouse issuer`.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { COMMAND_LINE } from '../../src/audit.ts';
import { createIssuer } from '../../src/oauth/assertions/issuers.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent, formFields } from '../support/user-agent.ts';

const ISSUER = 'https://example.okta.com/oauth2/default';

for (const backend of BACKENDS) {
  describe(`trusted issuers in the admin console (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let admin: UserAgent;
    let clientId: string;

    before(async () => {
      server = await startServer(backend);
      await server.createUser('root', { admin: true });
      await server.createUser('alice');
      clientId = (await server.createClient({ name: 'Agent', confidential: true })).client.id;
      admin = new UserAgent(server.url);
      await admin.login('root');
    });
    after(() => server?.close());

    const stored = async () => (await server.store.db.selectFrom('trusted_issuers').select('issuer').execute()).map((row) => row.issuer).sort();
    const audited = async (type: string) => (await server.store.db.selectFrom('audit_events').select('type').where('type', '=', type).execute()).length;

    test('an administrator trusts an issuer with the form, sees it listed, and deletes it; both are audited', async () => {
      const page = await admin.visit('/admin/issuers');
      assert.equal(page.response.status, 200);
      assert.match(page.html, /href="\/admin\/issuers" aria-current="page"/);
      assert.match(page.html, /No trusted issuers yet/);
      const added = await admin.submit(page.html, '/admin/issuers', {
        issuer: ISSUER,
        profile: 'id-jag',
        subject_claim: 'email',
        clients: clientId,
        scope: 'annotation:read',
      });
      assert.equal(added.response.status, 200);
      assert.match(added.html, /The issuer is trusted/);
      assert.match(added.html, new RegExp(`<code class="id">${ISSUER}</code>`));
      assert.ok(added.html.includes(clientId));
      assert.deepEqual(await stored(), [ISSUER]);
      assert.equal(await audited('issuer_created'), 1);
      const row = await server.store.db
        .selectFrom('audit_events')
        .select(['actor_id', 'detail'])
        .where('type', '=', 'issuer_created')
        .executeTakeFirstOrThrow();
      assert.ok(row.actor_id !== null, 'made by the administrator');

      const fields = formFields(added.html, '/admin/issuers/delete');
      fields.set('issuer', ISSUER);
      const deleted = await admin.visit('/admin/issuers/delete', { method: 'POST', body: fields });
      assert.match(deleted.html, /no longer trusted/);
      assert.deepEqual(await stored(), []);
      assert.equal(await audited('issuer_deleted'), 1);
    });

    test('bad input is refused with the field named, and nothing is stored', async () => {
      const page = await admin.visit('/admin/issuers');
      for (const [values, message] of [
        [{ issuer: 'http://idp.example', profile: 'id-jag' }, 'Issuer must be an https URL'],
        [{ issuer: 'https://idp.example', profile: 'saml' }, 'Profile must be one of id-jag, workload'],
        [{ issuer: 'https://idp.example', profile: 'workload' }, 'A workload issuer needs exactly one client: the one its workloads act as'],
        [
          { issuer: 'https://idp.example', profile: 'id-jag', clients: '00000000-0000-4000-8000-000000000000' },
          'There is no client 00000000-0000-4000-8000-000000000000',
        ],
        [{ issuer: 'https://idp.example', profile: 'id-jag', scope: 'nope:nope' }, 'Unknown scope &quot;nope:nope&quot;: see gatehouse scope list'],
        [{ issuer: 'https://idp.example<script>', profile: 'id-jag' }, 'Issuer must be an absolute https URL'],
      ] as const) {
        const refused = await admin.submit(page.html, '/admin/issuers', values);
        assert.equal(refused.response.status, 400, JSON.stringify(values));
        assert.ok(refused.html.includes(message), `${JSON.stringify(values)}: ${message}`);
        assert.doesNotMatch(refused.html, /<script>/);
      }
      assert.deepEqual(await stored(), []);
    });

    test('the forms need the CSRF token and an administrator', async () => {
      const page = await admin.visit('/admin/issuers');
      const forged = formFields(page.html, '/admin/issuers');
      forged.delete('_csrf');
      forged.set('issuer', ISSUER);
      forged.set('profile', 'id-jag');
      assert.equal((await admin.fetch('/admin/issuers', { method: 'POST', body: forged })).status, 403);
      const alice = new UserAgent(server.url);
      await alice.login('alice');
      assert.equal((await alice.visit('/admin/issuers')).response.status, 403);
      assert.deepEqual(await stored(), []);
    });

    test('the list is paginated: at most 100 issuers a page', async () => {
      for (let i = 0; i < 101; i++)
        await createIssuer(server.app.gatehouse, { issuer: `https://idp${String(i).padStart(3, '0')}.example`, profile: 'id-jag' }, COMMAND_LINE);
      const first = await admin.visit('/admin/issuers');
      assert.equal([...first.html.matchAll(/<tr>\s*<td data-label="Issuer">/g)].length, 100);
      const next = /<a href="([^"]+)">Next issuers<\/a>/.exec(first.html)?.[1]?.replace(/&amp;/g, '&');
      assert.ok(next, 'a link to the next page');
      const second = await admin.visit(next);
      assert.equal([...second.html.matchAll(/<tr>\s*<td data-label="Issuer">/g)].length, 1);
      assert.match(second.html, /https:\/\/idp100\.example/);
    });
  });
}
