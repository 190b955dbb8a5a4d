/**
 * Registering a `private_key_jwt` client (SPEC §2, §4.5, §4.11) where administrators do it:
 * the `/admin/oauthclients` form (a JWKS URL or a pasted JWKS; the keys replaced later, which
 * is how they are rotated) and `gatehouse client create --jwks-uri | --jwks-file`, with
 * `client list --json`. Private keys, symmetric keys, other algorithms, plain-http URLs and
 * both at once are refused with a message naming the field, and change nothing. Both backends.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { exportJWK, generateKeyPair } from 'jose';
import { listClients } from '../../src/store/clients.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { databaseUrl, gatehouse } from '../support/processes.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';

const FORM = {
  name: 'Signing service',
  grant_type: 'client_credentials',
  redirect_uri: '',
  client_type: 'private_key_jwt',
  scope: 'annotation:read',
  post_logout_redirect_uri: '',
  backchannel_logout_uri: '',
  id_token_alg: 'RS256',
  jwks_uri: 'https://keys.example/jwks.json',
  jwks: '',
};

for (const backend of BACKENDS) {
  describe(`private_key_jwt clients' keys (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let admin: UserAgent;
    let publicJwks: string, privateJwks: string;
    const dir = mkdtempSync(join(tmpdir(), 'gatehouse-jwks-'));
    const clientCount = async () => (await listClients(server.store.db, {}, 1000)).rows.length;

    before(async () => {
      const { publicKey, privateKey } = await generateKeyPair('ES256', { extractable: true });
      publicJwks = JSON.stringify({ keys: [{ ...(await exportJWK(publicKey)), kid: 'k1', alg: 'ES256' }] });
      privateJwks = JSON.stringify({ keys: [{ ...(await exportJWK(privateKey)), kid: 'k1', alg: 'ES256' }] });
      server = await startServer(backend);
      await server.createUser('root', { admin: true });
      admin = new UserAgent(server.url);
      await admin.login('root');
    });
    after(async () => {
      await server?.close();
      rmSync(dir, { recursive: true, force: true });
    });

    test('the admin form registers a client with a JWKS URL, shows no secret, and replaces its keys with a pasted JWKS', async () => {
      const form = await admin.visit('/admin/oauthclients/new');
      assert.match(form.html, /<input id="jwks_uri"/);
      assert.match(form.html, /<textarea id="jwks"/);
      const registered = await admin.submit(form.html, '/admin/oauthclients', FORM);
      assert.equal(registered.response.status, 200);
      assert.doesNotMatch(registered.html, /id="client-secret"/);
      const clientId = /<code class="id" id="client-id">([0-9a-f-]{36})<\/code>/.exec(registered.html)![1]!;

      const edit = await admin.visit(`/admin/oauthclients/${clientId}`);
      assert.match(edit.html, /<dt>Authentication method<\/dt><dd><code>private_key_jwt<\/code><\/dd>/);
      assert.match(edit.html, /<input id="jwks_uri"[^>]*value="https:\/\/keys\.example\/jwks\.json"/);
      assert.doesNotMatch(edit.html, /secret-heading/, 'no secret to rotate');
      const saved = await admin.submit(edit.html, `/admin/oauthclients/${clientId}`, { ...FORM, jwks_uri: '', jwks: publicJwks });
      assert.match(saved.html, /Changes saved/);
      const client = (await listClients(server.store.db, {}, 1000)).rows.find((row) => row.id === clientId)!;
      assert.deepEqual([client.jwks_uri, client.secret_hash, JSON.parse(client.jwks!)], [null, null, JSON.parse(publicJwks)]);
      // Keys cannot be taken away: the client would have no way left to authenticate.
      const emptied = await admin.submit(saved.html, `/admin/oauthclients/${clientId}`, { ...FORM, jwks_uri: '', jwks: '' });
      assert.equal(emptied.response.status, 400);

      const list = await admin.visit('/admin/oauthclients');
      assert.match(list.html, /Signing service<\/a><\/td>[\s\S]*?<td[^>]*><code>private_key_jwt<\/code><\/td>/);
    });

    test('bad keys are refused next to their field, and nothing is registered', async () => {
      const form = await admin.visit('/admin/oauthclients/new');
      const before = await clientCount();
      const refusals: [Record<string, string>, string, RegExp][] = [
        [{ jwks_uri: 'http://keys.example/jwks.json' }, 'jwks_uri', /JWKS URL is not an https URL/],
        [{ jwks_uri: '', jwks: privateJwks }, 'jwks', /JWKS key 1 has the private member &quot;d&quot;/],
        [{ jwks_uri: '', jwks: '{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}' }, 'jwks', /JWKS key 1 has the private member &quot;k&quot;/],
        [{ jwks_uri: '', jwks: '{"keys":[' }, 'jwks', /JWKS is not JSON/],
        [{ jwks: publicJwks }, 'jwks', /Give a JWKS URL or a JWKS, not both/],
        [{ jwks_uri: '' }, 'jwks_uri', /Give the URL of its JWKS, or paste the JWKS/],
      ];
      for (const [fields, field, message] of refusals) {
        const refused = await admin.submit(form.html, '/admin/oauthclients', { ...FORM, ...fields });
        assert.equal(refused.response.status, 400, JSON.stringify(fields));
        assert.match(refused.html, new RegExp(`<p class="field-error" id="${field}-error">${message.source}`), JSON.stringify(fields));
      }
      assert.equal(await clientCount(), before);
    });

    test('the FAPI 2.0 profile, DPoP and PAR are ticked on the form; FAPI 2.0 for a client without keys is refused next to its box', async () => {
      const form = await admin.visit('/admin/oauthclients/new');
      const fapi = {
        ...FORM,
        name: 'Bank app',
        grant_type: 'authorization_code',
        redirect_uri: 'https://bank.example/cb',
        require_dpop: 'yes',
        require_par: 'yes',
        profile: 'fapi2',
      };
      const before = await clientCount();
      const keyless = await admin.submit(form.html, '/admin/oauthclients', { ...fapi, client_type: 'confidential', jwks_uri: '' });
      assert.equal(keyless.response.status, 400);
      assert.match(keyless.html, /id="profile-error">[^<]*private_key_jwt/);
      assert.equal(await clientCount(), before, 'nothing registered');

      const registered = await admin.submit(form.html, '/admin/oauthclients', fapi);
      assert.equal(registered.response.status, 200);
      const client = (await listClients(server.store.db, {}, 1000)).rows.find((row) => row.name === 'Bank app')!;
      assert.deepEqual([client.require_dpop, client.require_par, client.profile], [1, 1, 'fapi2']);
      const edit = await admin.visit(`/admin/oauthclients/${client.id}`);
      for (const name of ['require_dpop', 'require_par']) assert.match(edit.html, new RegExp(`name="${name}" value="yes" checked`));
      assert.match(edit.html, /name="profile" value="fapi2" checked/);
    });

    test('token exchange and ID-JAG audiences are set on the form, shown again, and refused for a public client or a bad issuer', async () => {
      const form = await admin.visit('/admin/oauthclients/new');
      const agent = {
        ...FORM,
        name: 'Agent',
        grant_type: 'authorization_code',
        redirect_uri: 'https://agent.example/cb',
        client_type: 'confidential',
        jwks_uri: '',
        token_exchange: 'yes',
        id_jag_audiences: 'https://auth.mcp.example\nhttps://other.example=agent-7',
      };
      const before = await clientCount();
      const open = await admin.submit(form.html, '/admin/oauthclients', { ...agent, client_type: 'public' });
      assert.equal(open.response.status, 400);
      assert.match(open.html, /id="token_exchange-error">Only a confidential client may exchange tokens or get ID-JAGs/);
      const plain = await admin.submit(form.html, '/admin/oauthclients', { ...agent, id_jag_audiences: 'http://auth.mcp.example' });
      assert.equal(plain.response.status, 400);
      assert.match(plain.html, /id="id_jag_audiences-error">ID-JAG audience http:\/\/auth\.mcp\.example must use https/);
      assert.equal(await clientCount(), before, 'nothing registered');

      assert.equal((await admin.submit(form.html, '/admin/oauthclients', agent)).response.status, 200);
      const client = (await listClients(server.store.db, {}, 1000)).rows.find((row) => row.name === 'Agent')!;
      assert.equal(client.token_exchange, 1);
      assert.deepEqual(JSON.parse(client.id_jag_audiences), [
        { issuer: 'https://auth.mcp.example', client_id: null },
        { issuer: 'https://other.example', client_id: 'agent-7' },
      ]);
      const edit = await admin.visit(`/admin/oauthclients/${client.id}`);
      assert.match(edit.html, /name="token_exchange" value="yes" checked/);
      assert.match(edit.html, /<textarea id="id_jag_audiences"[^>]*>https:\/\/auth\.mcp\.example\nhttps:\/\/other\.example=agent-7<\/textarea>/);
    });

    test('gatehouse client create --jwks-file / --jwks-uri, and client list --json', async () => {
      const env = { DATABASE_URL: databaseUrl(server.config) };
      writeFileSync(join(dir, 'public.json'), publicJwks);
      writeFileSync(join(dir, 'private.json'), privateJwks);
      const created = await gatehouse(
        ['client', 'create', '--name', 'Shell job', '--grant-type', 'client_credentials', '--jwks-file', join(dir, 'public.json'), '--json'],
        env,
      );
      assert.equal(created.code, 0, created.stderr);
      const printed = JSON.parse(created.stdout) as Record<string, string>;
      assert.equal(printed.client_secret, undefined, 'no secret is made');
      const viaUri = await gatehouse(
        ['client', 'create', '--name', 'Shell app', '--redirect-uri', 'https://app.example/cb', '--jwks-uri', 'https://app.example/jwks', '--json'],
        env,
      );
      assert.equal(viaUri.code, 0, viaUri.stderr);
      const list = await gatehouse(['client', 'list', '--json'], env);
      assert.equal(list.code, 0, list.stderr);
      const listed = JSON.parse(list.stdout) as Array<Record<string, unknown>>;
      const job = listed.find((c) => c.client_id === printed.client_id)!;
      assert.deepEqual([job.token_endpoint_auth_method, job.confidential, job.jwks], ['private_key_jwt', true, JSON.parse(publicJwks)]);
      const app = listed.find((c) => c.client_id === (JSON.parse(viaUri.stdout) as Record<string, string>).client_id)!;
      assert.deepEqual([app.token_endpoint_auth_method, app.jwks_uri, app.require_pkce], ['private_key_jwt', 'https://app.example/jwks', false]);

      const before = await clientCount();
      for (const [args, message] of [
        [['--jwks-file', join(dir, 'private.json')], /private member "d"/],
        [['--jwks-file', join(dir, 'missing.json')], /--jwks-file: cannot read/],
        [['--jwks-uri', 'http://app.example/jwks'], /JWKS URL is not an https URL/],
        [['--jwks-uri', 'https://app.example/jwks', '--jwks-file', join(dir, 'public.json')], /one or the other/],
      ] as const) {
        const refused = await gatehouse(['client', 'create', '--name', 'Bad', '--grant-type', 'client_credentials', ...args], env);
        assert.notEqual(refused.code, 0);
        assert.match(refused.stderr, message);
      }
      assert.equal(await clientCount(), before);
      const help = await gatehouse(['client', 'create', '--help'], env);
      assert.match(help.stdout + help.stderr, /--jwks-uri <url> \| --jwks-file <path>/);
    });
  });
}
