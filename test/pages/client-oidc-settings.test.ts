/**
 * Clients' OpenID Connect settings (SPEC §2, §4.5, §4.10) where administrators set them: the
 * `/admin/oauthclients` form (post-logout redirect URLs, back-channel logout URL, ID token
 * algorithm; the authentication method shown) and `gatehouse client create` / `client list`.
 * Bad values are refused with a message naming the field, and change nothing. Both backends.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { listClients } from '../../src/store/clients.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { databaseUrl, gatehouse } from '../support/processes.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';

const FORM = {
  name: 'Wiki',
  grant_type: 'authorization_code',
  redirect_uri: 'https://wiki.example/callback',
  client_type: 'public',
  require_pkce: 'yes',
  scope: 'annotation:read',
  post_logout_redirect_uri: 'https://wiki.example/logged-out\r\nhttps://wiki.example/bye',
  backchannel_logout_uri: 'https://10.1.2.3/backchannel-logout',
  id_token_alg: 'ES256',
};

for (const backend of BACKENDS) {
  describe(`clients' OpenID Connect settings (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let admin: UserAgent;
    const clientCount = async () => (await listClients(server.store.db, {}, 1000)).rows.length;

    before(async () => {
      server = await startServer(backend);
      await server.createUser('root', { admin: true });
      admin = new UserAgent(server.url);
      await admin.login('root');
    });
    after(() => server?.close());

    test('the admin form registers and edits them; the list and the client show the authentication method', async () => {
      const form = await admin.visit('/admin/oauthclients/new');
      const registered = await admin.submit(form.html, '/admin/oauthclients', FORM);
      assert.equal(registered.response.status, 200);
      const clientId = /<code class="id" id="client-id">([0-9a-f-]{36})<\/code>/.exec(registered.html)![1]!;

      const edit = await admin.visit(`/admin/oauthclients/${clientId}`);
      assert.match(edit.html, /<textarea id="post_logout_redirect_uri"[^>]*>https:\/\/wiki\.example\/logged-out\nhttps:\/\/wiki\.example\/bye<\/textarea>/);
      assert.match(edit.html, /<input id="backchannel_logout_uri"[^>]*value="https:\/\/10\.1\.2\.3\/backchannel-logout"/);
      assert.match(edit.html, /<option value="ES256" selected>ES256<\/option>/);
      assert.match(edit.html, /<dt>Authentication method<\/dt><dd><code>none<\/code><\/dd>/);

      const saved = await admin.submit(edit.html, `/admin/oauthclients/${clientId}`, {
        ...FORM,
        post_logout_redirect_uri: 'https://wiki.example/bye',
        backchannel_logout_uri: '',
        id_token_alg: 'RS256',
      });
      assert.match(saved.html, /Changes saved/);
      assert.match(saved.html, /<option value="RS256" selected>RS256<\/option>/);
      const client = (await listClients(server.store.db, {}, 1000)).rows.find((row) => row.id === clientId)!;
      assert.deepEqual([client.post_logout_redirect_uris, client.backchannel_logout_uri, client.id_token_alg], ['["https://wiki.example/bye"]', null, 'RS256']);
      const audited = await server.store.db.selectFrom('audit_events').select('type').where('client_id', '=', clientId).orderBy('id').execute();
      assert.deepEqual(
        audited.map((event) => event.type),
        ['client_created', 'client_updated'],
      );

      await server.createClient({ name: 'Backend', confidential: true });
      const list = await admin.visit('/admin/oauthclients');
      assert.match(list.html, /<th scope="col">Authentication<\/th>/);
      assert.match(list.html, /Wiki<\/a><\/td>[\s\S]*?<td[^>]*><code>none<\/code><\/td>/);
      assert.match(list.html, /Backend<\/a><\/td>[\s\S]*?<td[^>]*><code>client_secret_basic<\/code><\/td>/);
    });

    test('bad values are refused, each next to its field, and nothing is registered', async () => {
      const form = await admin.visit('/admin/oauthclients/new');
      const before = await clientCount();
      const refusals: [Record<string, string>, string, RegExp][] = [
        [{ backchannel_logout_uri: 'http://rp.example/backchannel' }, 'backchannel_logout_uri', /Back-channel logout URL must use https/],
        [{ backchannel_logout_uri: 'https://rp.example/backchannel#x' }, 'backchannel_logout_uri', /Back-channel logout URL must not contain a fragment/],
        [{ backchannel_logout_uri: '/relative' }, 'backchannel_logout_uri', /Back-channel logout URL must be an absolute URL/],
        [{ post_logout_redirect_uri: 'https://wiki.example/bye#x' }, 'post_logout_redirect_uri', /Post-logout redirect URL must not contain a fragment/],
        [
          { post_logout_redirect_uri: 'https://a.example/\nhttps://a.example/' },
          'post_logout_redirect_uri',
          /Each post-logout redirect URL must be listed once/,
        ],
        [{ post_logout_redirect_uri: 'javascript:alert(1)' }, 'post_logout_redirect_uri', /Post-logout redirect URL must use https/],
        [{ id_token_alg: 'none' }, 'id_token_alg', /ID token algorithm must be one of ES256, RS256/],
      ];
      for (const [fields, field, message] of refusals) {
        const refused = await admin.submit(form.html, '/admin/oauthclients', { ...FORM, ...fields });
        assert.equal(refused.response.status, 400, JSON.stringify(fields));
        assert.match(refused.html, new RegExp(`<p class="field-error" id="${field}-error">${message.source}`), JSON.stringify(fields));
        assert.doesNotMatch(refused.html, /<script|javascript:alert\(1\)<\/a>/);
      }
      assert.equal(await clientCount(), before);
    });

    test('gatehouse client create takes them, and client list --json shows them with the authentication method', async () => {
      const env = { DATABASE_URL: databaseUrl(server.config) };
      const created = await gatehouse(
        [
          'client',
          'create',
          '--name',
          'Shell wiki',
          '--redirect-uri',
          'http://127.0.0.1:9000/callback',
          '--post-logout-redirect-uri',
          'http://127.0.0.1:9000/logged-out',
          '--post-logout-redirect-uri',
          'https://wiki.example/bye',
          '--backchannel-logout-uri',
          'http://127.0.0.1:9000/backchannel-logout',
          '--id-token-alg',
          'ES256',
          '--confidential',
          '--json',
        ],
        env,
      );
      assert.equal(created.code, 0, created.stderr);
      const { client_id } = JSON.parse(created.stdout) as { client_id: string };
      const listed = await gatehouse(['client', 'list', '--json'], env);
      const shown = (JSON.parse(listed.stdout) as Array<Record<string, unknown>>).find((c) => c.client_id === client_id)!;
      assert.deepEqual(
        {
          token_endpoint_auth_method: shown.token_endpoint_auth_method,
          post_logout_redirect_uris: shown.post_logout_redirect_uris,
          backchannel_logout_uri: shown.backchannel_logout_uri,
          id_token_signed_response_alg: shown.id_token_signed_response_alg,
        },
        {
          token_endpoint_auth_method: 'client_secret_basic',
          post_logout_redirect_uris: ['http://127.0.0.1:9000/logged-out', 'https://wiki.example/bye'],
          backchannel_logout_uri: 'http://127.0.0.1:9000/backchannel-logout',
          id_token_signed_response_alg: 'ES256',
        },
      );

      const before = await clientCount();
      for (const [flag, value, message] of [
        ['--id-token-alg', 'HS256', /ID token algorithm must be one of ES256, RS256/],
        ['--backchannel-logout-uri', 'http://rp.example/bc', /Back-channel logout URL must use https/],
        ['--post-logout-redirect-uri', 'not a url', /Post-logout redirect URL must be an absolute URL/],
      ] as const) {
        const refused = await gatehouse(['client', 'create', '--name', 'Bad', '--redirect-uri', 'https://bad.example/cb', flag, value], env);
        assert.notEqual(refused.code, 0);
        assert.match(refused.stderr, message);
      }
      assert.equal(await clientCount(), before);
    });
  });
}
