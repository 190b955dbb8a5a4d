/**
 * Clients that no administrator registered (SPEC §3, §4.8), end to end through the real
 * server: client ID metadata documents served over https by this test (a certificate from
 * the throw-away CA test/run.ts puts in NODE_EXTRA_CA_CERTS, and
 * CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES=true so 127.0.0.1 may serve them), dynamic
 * registration, blocking, the purge of unused registrations, several redirect URLs and the
 * localhost any-port rule. The fetch-level refusals themselves are covered by
 * test/security/client-metadata-fetch.test.ts; here, that a refusal reaches the endpoints.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Migrator, type Kysely } from 'kysely';
import * as oauth from 'oauth4webapi';
import { COMMAND_LINE } from '../../src/audit.ts';
import { blockClient, unblockClient } from '../../src/clients/clients.ts';
import { parseDatabaseUrl } from '../../src/config.ts';
import { findClient } from '../../src/store/clients.ts';
import { migrate, openStore } from '../../src/store/database.ts';
import * as initial from '../../src/store/migrations/20261122_001_initial.ts';
import * as setupTokens from '../../src/store/migrations/20261122_002_setup_tokens.ts';
import * as audit from '../../src/store/migrations/20261122_003_audit.ts';
import * as successorBoxIndex from '../../src/store/migrations/20261122_004_successor_box_index.ts';
import { purgeOnce } from '../../src/store/purge.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import {
  authorizationUrl,
  discover,
  insecure,
  obtainCode,
  obtainTokens,
  postForm,
  profile,
  refreshRequest,
  tokenResult,
  type App,
} from '../support/oauth-client.ts';
import { documentServer } from '../support/metadata-document.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { testCaProblem } from '../support/tls.ts';
import { UserAgent, formFields } from '../support/user-agent.ts';

const HOUR = 3600;

/** The authorization endpoint refused to go on: an error page, and no redirect anywhere. */
async function assertErrorPage(agent: UserAgent, url: URL, message: RegExp) {
  const response = await agent.fetch(url.pathname + url.search);
  assert.equal(response.status, 400);
  assert.equal(response.headers.get('location'), null, 'never a redirect');
  assert.match(await response.text(), message);
}

/** The authorization URL's path and query, as a browser on Gatehouse would request it. */
async function authorizationPath(app: App, params: Record<string, string> = {}): Promise<string> {
  const { url } = await authorizationUrl(app, params);
  return url.pathname + url.search;
}

function register(server: TestServer, body: unknown, headers: Record<string, string> = { 'content-type': 'application/json' }): Promise<Response> {
  return fetch(new URL('/oauth/register', server.url), { method: 'POST', headers, body: typeof body === 'string' ? body : JSON.stringify(body) });
}

describe('clients no administrator registered', { skip: testCaProblem() ?? false }, () => {
  let documents: Awaited<ReturnType<typeof documentServer>>;
  before(async () => {
    documents = await documentServer();
  });
  after(() => documents?.server.close());

  for (const backend of BACKENDS) {
    describe(`(${backend.name})`, backendOptions(backend), () => {
      let server: TestServer;
      let alice: UserAgent;
      const ctx = () => server.app.gatehouse;
      const metadataApp = (clientId: string, redirectUri = 'http://127.0.0.1:51004/callback') => discover(server, clientId, { redirectUri });

      before(async () => {
        server = await startServer(backend, { CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES: 'true', DYNAMIC_CLIENT_REGISTRATION: 'true' });
        await server.createUser('alice');
        await server.createUser('root', { admin: true });
        alice = new UserAgent(server.url);
        await alice.login('alice');
      });
      after(() => server?.close());

      test('the metadata lists registration, metadata documents, none among the auth methods, and iss in responses', async () => {
        const metadata = (await (await fetch(new URL('/.well-known/oauth-authorization-server', server.url))).json()) as Record<string, unknown>;
        assert.equal(metadata.registration_endpoint, `${server.url}/oauth/register`);
        assert.equal(metadata.client_id_metadata_document_supported, true);
        assert.equal(metadata.authorization_response_iss_parameter_supported, true);
        assert.ok((metadata.token_endpoint_auth_methods_supported as string[]).includes('none'));
      });

      test('a metadata-document client: consent says nobody checked it, then the whole flow with oauth4webapi', async () => {
        const url = documents.serve('/apps/notes-cli.json');
        const app = await metadataApp(url);
        const authorization = await authorizationUrl(app);
        const consent = await alice.visit(authorization.url.pathname + authorization.url.search);
        assert.equal(consent.response.status, 200);
        assert.match(consent.html, /No administrator has checked this application/);
        assert.match(consent.html, /It runs on this computer/);
        assert.match(consent.html, /Notes CLI/);
        const approved = await alice.submit(consent.html, '/oauth/authorize', { decision: 'approve' });
        const callback = oauth.validateAuthResponse(app.as, app.client, approved.redirect!, authorization.state);
        const response = await oauth.authorizationCodeGrantRequest(app.as, app.client, app.auth, callback, app.redirectUri, authorization.verifier, insecure);
        const tokens = await oauth.processAuthorizationCodeResponse(app.as, app.client, response);
        assert.equal(((await (await profile(server, tokens.access_token)).json()) as { client_id: string }).client_id, url);
        const row = await findClient(server.store.db, url);
        assert.equal(row?.kind, 'metadata_document');
        assert.equal(row?.secret_hash, null);
        assert.equal(row?.trusted, 0);
        assert.equal(row?.require_pkce, 1);
        // The person's applications page lists it like any other.
        assert.match((await alice.visit('/account/applications')).html, /Notes CLI/);
      });

      test('a remote redirect URL: the consent page names its host', async () => {
        const url = documents.serve('/apps/web.json', { client_name: 'Web Notes', redirect_uris: ['https://notes.example/callback'] });
        const authorization = await authorizationUrl(await metadataApp(url, 'https://notes.example/callback'));
        const consent = await alice.visit(authorization.url.pathname + authorization.url.search);
        assert.match(consent.html, /you will be sent to <strong>notes\.example<\/strong>/);
      });

      /** What a signed-in person's browser gets for a top-level GET of the authorization URL. */
      const visitAuthorization = async (app: App, params: Record<string, string> = {}) => alice.visit(await authorizationPath(app, params));

      test('attack: a dynamic client approved for its loopback redirect cannot send a code to its remote one without asking', async () => {
        const registered = (await (
          await register(server, { client_name: 'Two Homes', redirect_uris: ['http://127.0.0.1/callback', 'https://collector.example/cb'] })
        ).json()) as { client_id: string };
        const loopback = await discover(server, registered.client_id, { redirectUri: 'http://127.0.0.1:41001/callback' });
        const remote = await discover(server, registered.client_id, { redirectUri: 'https://collector.example/cb' });
        const consent = await visitAuthorization(loopback);
        // The page names every place the application may send the person, not only this request's.
        assert.match(consent.html, /It may send you to: <strong>this computer<\/strong>, <strong>collector\.example<\/strong>/);
        assert.ok((await alice.submit(consent.html, '/oauth/authorize', { decision: 'approve' })).redirect?.searchParams.get('code'));
        // Another run of the native app (another port): remembered, no page (RFC 8252 §7.3).
        const again = await visitAuthorization(await discover(server, registered.client_id, { redirectUri: 'http://127.0.0.1:41002/callback' }));
        assert.equal(again.redirect?.origin, 'http://127.0.0.1:41002');
        assert.ok(again.redirect?.searchParams.get('code'));
        // The remote redirect: a consent page naming its host, never a code.
        const asked = await visitAuthorization(remote);
        assert.equal(asked.redirect, null, 'no code goes to the remote host without a new consent page');
        assert.equal(asked.response.status, 200);
        assert.match(asked.html, /you will be sent to <strong>collector\.example<\/strong>/);
        const silent = await visitAuthorization(remote, { prompt: 'none' });
        assert.equal(silent.redirect?.origin, 'https://collector.example');
        assert.equal(silent.redirect?.searchParams.get('error'), 'consent_required');
        assert.equal(silent.redirect?.searchParams.get('code'), null);
        // Once approved there too, that origin is remembered as well.
        assert.ok((await alice.submit(asked.html, '/oauth/authorize', { decision: 'approve' })).redirect?.searchParams.get('code'));
        assert.ok((await visitAuthorization(remote)).redirect?.searchParams.get('code'));
      });

      test('attack: a metadata document approved for a loopback redirect that later adds a remote one must ask again', async () => {
        const url = documents.serve('/apps/grows.json', { client_name: 'Growing CLI' });
        await obtainCode(await metadataApp(url), alice);
        documents.serve('/apps/grows.json', { client_name: 'Growing CLI', redirect_uris: ['http://127.0.0.1/callback', 'https://harvest.example/cb'] });
        server.advance(301); // past the shortest cache lifetime (5 minutes): the new document is fetched
        try {
          const asked = await visitAuthorization(await metadataApp(url, 'https://harvest.example/cb'));
          assert.equal(asked.redirect, null, 'no code goes to the new remote host without a new consent page');
          assert.match(asked.html, /you will be sent to <strong>harvest\.example<\/strong>/);
          assert.match(asked.html, /It may send you to: <strong>this computer<\/strong>, <strong>harvest\.example<\/strong>/);
          const silent = await visitAuthorization(await metadataApp(url, 'https://harvest.example/cb'), { prompt: 'none' });
          assert.equal(silent.redirect?.searchParams.get('error'), 'consent_required');
          // The loopback approval still stands for the loopback redirect.
          assert.ok((await visitAuthorization(await metadataApp(url))).redirect?.searchParams.get('code'));
        } finally {
          server.advance(-301);
        }
      });

      test("an administrator's client keeps one consent for all its redirect URLs", async () => {
        const { client } = await server.createClient({ redirectUris: ['https://first.example/cb', 'https://second.example/cb'] });
        await obtainCode(await discover(server, client.id, { redirectUri: 'https://first.example/cb' }), alice);
        const second = await visitAuthorization(await discover(server, client.id, { redirectUri: 'https://second.example/cb' }));
        assert.ok(second.redirect?.searchParams.get('code'), 'approved once, for the client: no page');
      });

      /** Names that would pass for another's, or hide what they are, as a person reads them. */
      const impersonating = (adminName: string) => [
        ['zero-width space', 'Git\u200BHub'],
        ['line separator', 'Notes\u2028Official'],
        ['soft hyphen', 'Note\u00ADs'],
        ['Hangul filler', '\u3164'],
        ['Hangul filler inside', `${adminName}\u3164`],
        ['braille blank', 'Notes\u2800'],
        ['variation selector', 'Notes\uFE0F'],
        ["an administrator's client's exact name", adminName],
        ["an administrator's client's name in other case", adminName.toUpperCase()],
        [
          "an administrator's client's name in full-width letters",
          [...adminName].map((c) => (c === ' ' ? '\u3000' : String.fromCodePoint(c.codePointAt(0)! + 0xfee0))).join(''),
        ],
      ];

      test('attack: impersonating names are refused at registration (invalid_client_metadata)', async () => {
        const { client } = await server.createClient({ name: 'Payroll Portal' });
        const before = (await server.store.db.selectFrom('clients').select('id').execute()).length;
        for (const [what, name] of impersonating(client.name)) {
          const response = await register(server, { client_name: name, redirect_uris: ['https://app.example/cb'] });
          assert.equal(response.status, 400, what);
          assert.equal(((await response.json()) as { error: string }).error, 'invalid_client_metadata', what);
        }
        assert.equal((await server.store.db.selectFrom('clients').select('id').execute()).length, before, 'nothing registered');
        // Spacing is normalised, not refused.
        const spaced = (await (await register(server, { client_name: '  Tidy \u00A0  Notes ', redirect_uris: ['https://app.example/cb'] })).json()) as {
          client_name: string;
        };
        assert.equal(spaced.client_name, 'Tidy Notes');
      });

      test('attack: impersonating names refuse the metadata document (unknown client)', async () => {
        const { client } = await server.createClient({ name: 'Expense Reports' });
        for (const [index, [what, name]] of impersonating(client.name).entries()) {
          const url = documents.serve(`/names/${index}.json`, { client_name: name });
          const response = await alice.fetch(await authorizationPath(await metadataApp(url)));
          assert.equal(response.status, 400, what);
          assert.equal(response.headers.get('location'), null, what);
          assert.match(await response.text(), /unknown client/, what);
          assert.equal(await findClient(server.store.db, url), undefined, `${what}: nothing stored`);
        }
      });

      test('the login page says that no administrator has checked the application', async () => {
        const registered = (await (await register(server, { client_name: 'Unchecked Tool', redirect_uris: ['http://127.0.0.1/callback'] })).json()) as {
          client_id: string;
        };
        const visitor = new UserAgent(server.url);
        const login = await visitor.visit(await authorizationPath(await discover(server, registered.client_id)));
        assert.match(login.html, /action="\/login"/);
        assert.match(login.html, /to continue to <strong>Unchecked Tool<\/strong>/);
        assert.match(login.html, /No administrator has checked this application/);
        const document = await visitor.visit(await authorizationPath(await metadataApp(documents.serve('/apps/login-page.json'))));
        assert.match(document.html, /No administrator has checked this application/);
        assert.match(document.html, new RegExp(`It introduced itself through ${new URL(documents.origin).host.replace(/\./g, '\\.')}`));
        // An administrator's client: no such warning.
        const { client } = await server.createClient({ name: 'Checked App' });
        const checked = await visitor.visit(await authorizationPath(await discover(server, client.id)));
        assert.match(checked.html, /to continue to <strong>Checked App<\/strong>/);
        assert.doesNotMatch(checked.html, /No administrator has checked/);
      });

      test('a refused document is an unknown client: the error page, never a redirect, the reason in the log', async () => {
        for (const [path, fields] of [
          ['/refused/other-id.json', { client_id: 'https://elsewhere.example/client.json' }],
          ['/refused/secret.json', { token_endpoint_auth_method: 'client_secret_basic' }],
          ['/refused/no-redirects.json', { redirect_uris: [] }],
        ] as const) {
          const url = documents.serve(path, fields);
          await assertErrorPage(alice, (await authorizationUrl(await metadataApp(url))).url, /unknown client/);
        }
        assert.ok(
          server.logs.some((line) => line.includes('has a client_id other than its own URL')),
          'the reason is logged',
        );
        // Not fetched at all: an http URL, a fragment, a document that is not there.
        for (const clientId of [`http://127.0.0.1/apps/notes-cli.json`, `${documents.origin}/apps/notes-cli.json#x`, `${documents.origin}/missing.json`]) {
          await assertErrorPage(alice, (await authorizationUrl(await metadataApp(clientId))).url, /unknown client/);
        }
      });

      test('a redirect URL the document does not list is refused on the error page', async () => {
        const url = documents.serve('/apps/strict.json');
        await assertErrorPage(alice, (await authorizationUrl(await metadataApp(url, 'https://evil.example/callback'))).url, /not a redirect URL registered/);
      });

      test('the token endpoint answers invalid_client once the document no longer resolves', async () => {
        const url = documents.serve('/apps/changing.json');
        const app = await metadataApp(url);
        const authorized = await obtainCode(app, alice);
        documents.serve('/apps/changing.json', { client_id: 'https://elsewhere.example/x.json' });
        server.advance(301); // past the shortest cache lifetime (5 minutes), still inside the code's
        try {
          const form = {
            grant_type: 'authorization_code',
            code: authorized.code,
            code_verifier: authorized.verifier,
            client_id: url,
            redirect_uri: app.redirectUri,
          };
          const refused = await tokenResult(await postForm(server, '/api/token', form));
          assert.equal(refused.status, 401);
          assert.equal(refused.body.error, 'invalid_client');
        } finally {
          server.advance(-301);
        }
      });

      test('blocking a metadata-document client revokes what it holds and refuses it; unblocking lets it back', async () => {
        const url = documents.serve('/apps/blocked.json');
        const app = await metadataApp(url);
        const tokens = await obtainTokens(app, alice);
        const pending = await obtainCode(app, alice);
        await blockClient(ctx(), url, COMMAND_LINE);
        assert.equal((await profile(server, tokens.access_token)).status, 401);
        assert.equal((await tokenResult(await refreshRequest(app, tokens.refresh_token!))).status >= 400, true);
        const exchange = {
          grant_type: 'authorization_code',
          code: pending.code,
          code_verifier: pending.verifier,
          client_id: url,
          redirect_uri: app.redirectUri,
        };
        const refused = await tokenResult(await postForm(server, '/api/token', exchange));
        assert.deepEqual([refused.status, refused.body.error], [401, 'invalid_client'], 'a blocked client is unknown, before its code is looked at');
        await assertErrorPage(alice, (await authorizationUrl(app)).url, /unknown client/);
        assert.equal(await unblockClient(ctx(), url, COMMAND_LINE), true);
        assert.equal((await tokenResult(await postForm(server, '/api/token', exchange))).body.error, 'invalid_grant', 'codes not yet exchanged are void');
        assert.ok((await obtainTokens(app, alice)).access_token);
      });

      test('a blocked URL prefix refuses every metadata document under it, and only those', async () => {
        const inside = documents.serve('/tenant/one.json');
        const outside = documents.serve('/other/one.json');
        const insideApp = await metadataApp(inside);
        const held = await obtainTokens(insideApp, alice);
        await blockClient(ctx(), `${documents.origin}/tenant/`, COMMAND_LINE);
        assert.equal((await profile(server, held.access_token)).status, 401, 'what a client under the prefix held is revoked');
        await assertErrorPage(alice, (await authorizationUrl(await metadataApp(documents.serve('/tenant/two.json')))).url, /unknown client/);
        assert.ok((await obtainTokens(await metadataApp(outside), alice)).access_token);
        await unblockClient(ctx(), `${documents.origin}/tenant/`, COMMAND_LINE);
        assert.ok((await obtainTokens(insideApp, alice)).access_token);
      });

      test('dynamic registration: 201 with the metadata, then the whole flow with oauth4webapi', async () => {
        const issuer = new URL(server.url);
        const as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }));
        const metadata = {
          client_name: 'Inspector',
          redirect_uris: ['http://localhost/callback', 'https://inspector.example/cb'],
          token_endpoint_auth_method: 'none',
          software_id: 'ignored',
        };
        const response = await oauth.dynamicClientRegistrationRequest(as, metadata, insecure);
        assert.equal(response.status, 201);
        assert.equal(response.headers.get('cache-control'), 'no-store');
        const registered = await oauth.processDynamicClientRegistrationResponse(response);
        assert.match(registered.client_id, /^[0-9a-f-]{36}$/);
        assert.equal(typeof registered.client_id_issued_at, 'number');
        assert.deepEqual(registered.redirect_uris, metadata.redirect_uris);
        assert.deepEqual(registered.grant_types, ['authorization_code', 'refresh_token']);
        assert.equal(registered.token_endpoint_auth_method, 'none');
        assert.equal(registered.software_id, undefined, 'unknown fields are ignored');
        assert.equal(registered.client_secret, undefined);
        // localhost matches any port, and the consent page warns.
        const app = await discover(server, registered.client_id, { redirectUri: 'http://localhost:33418/callback' });
        const authorization = await authorizationUrl(app);
        const consent = await alice.visit(authorization.url.pathname + authorization.url.search);
        assert.match(consent.html, /No administrator has checked this application/);
        const tokens = await obtainTokens(app, alice);
        assert.equal(((await (await profile(server, tokens.access_token)).json()) as { client_id: string }).client_id, registered.client_id);
        // PKCE is required.
        await assertRefusedWithoutPkce(app);
      });

      async function assertRefusedWithoutPkce(app: App) {
        const { url } = await authorizationUrl(app);
        url.searchParams.delete('code_challenge');
        url.searchParams.delete('code_challenge_method');
        const response = await alice.fetch(url.pathname + url.search);
        assert.equal(response.status, 302);
        assert.equal(new URL(response.headers.get('location')!).searchParams.get('error'), 'invalid_request');
      }

      test('registration errors: 400 with RFC 7591 codes, nothing registered, never a 5xx', async () => {
        const cases: Array<[unknown, string, Record<string, string>?]> = [
          [{}, 'invalid_redirect_uri'],
          [{ redirect_uris: [] }, 'invalid_redirect_uri'],
          [{ redirect_uris: 'https://app.example/cb' }, 'invalid_redirect_uri'],
          [{ redirect_uris: [42] }, 'invalid_redirect_uri'],
          [{ redirect_uris: ['http://app.example/cb'] }, 'invalid_redirect_uri'],
          [{ redirect_uris: ['https://app.example/cb#x'] }, 'invalid_redirect_uri'],
          [{ redirect_uris: ['javascript:alert(1)'] }, 'invalid_redirect_uri'],
          [{ redirect_uris: Array.from({ length: 30 }, (_, i) => `https://app.example/${i}`) }, 'invalid_redirect_uri'],
          [{ redirect_uris: ['https://app.example/cb'], token_endpoint_auth_method: 'client_secret_basic' }, 'invalid_client_metadata'],
          [{ redirect_uris: ['https://app.example/cb'], grant_types: ['client_credentials'] }, 'invalid_client_metadata'],
          [{ redirect_uris: ['https://app.example/cb'], response_types: ['token'] }, 'invalid_client_metadata'],
          [{ redirect_uris: ['https://app.example/cb'], client_name: { a: 1 } }, 'invalid_client_metadata'],
          [{ redirect_uris: ['https://app.example/cb'], client_name: 'x'.repeat(101) }, 'invalid_client_metadata'],
          [{ redirect_uris: ['https://app.example/cb'], logo_uri: 'http://app.example/logo.png' }, 'invalid_client_metadata'],
          [{ redirect_uris: ['https://app.example/cb'], scope: 'a  b' }, 'invalid_client_metadata'],
          [[{ redirect_uris: ['https://app.example/cb'] }], 'invalid_client_metadata'],
          ['null', 'invalid_client_metadata'],
          ['{"redirect_uris": [', 'invalid_client_metadata'],
          ['redirect_uris=https%3A%2F%2Fapp.example%2Fcb', 'invalid_client_metadata', { 'content-type': 'application/x-www-form-urlencoded' }],
          ['{"redirect_uris":["https://app.example/cb"]}', 'invalid_client_metadata', { 'content-type': 'text/plain' }],
          ['{"redirect_uris":["https://app.example/cb"]}', 'invalid_client_metadata', {}],
        ];
        const before = (await server.store.db.selectFrom('clients').select('id').execute()).length;
        for (const [body, error, headers] of cases) {
          const response = await register(server, body, headers);
          assert.equal(response.status, 400, JSON.stringify(body));
          const answer = (await response.json()) as { error: string; error_description: string };
          assert.equal(answer.error, error, JSON.stringify(body));
          assert.ok(answer.error_description.length > 0);
        }
        const huge = await register(server, { redirect_uris: ['https://app.example/cb'], client_name: 'x'.repeat(64 * 1024) });
        assert.equal(huge.status, 413);
        assert.equal((await server.store.db.selectFrom('clients').select('id').execute()).length, before, 'nothing registered');
      });

      test('the registration endpoint answers CORS preflights', async () => {
        const preflight = await fetch(new URL('/oauth/register', server.url), {
          method: 'OPTIONS',
          headers: { origin: 'https://inspector.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type' },
        });
        assert.equal(preflight.status, 204);
        assert.equal(preflight.headers.get('access-control-allow-origin'), '*');
        const response = await register(
          server,
          { redirect_uris: ['https://inspector.example/cb'] },
          { 'content-type': 'application/json', origin: 'https://inspector.example' },
        );
        assert.equal(response.status, 201);
        assert.equal(response.headers.get('access-control-allow-origin'), '*');
      });

      test('the admin client list shows both kinds with Block, which revokes and refuses', async () => {
        const registered = (await (await register(server, { client_name: 'Blockable', redirect_uris: ['http://127.0.0.1/callback'] })).json()) as {
          client_id: string;
        };
        const app = await discover(server, registered.client_id);
        const tokens = await obtainTokens(app, alice);
        const admin = new UserAgent(server.url);
        await admin.login('root');
        const list = await admin.visit('/admin/oauthclients');
        assert.match(list.html, /dynamic registration/);
        assert.match(list.html, /metadata document/);
        assert.match(list.html, /Block Blockable/);
        const form = formFields(list.html, '/admin/oauthclients/block');
        form.set('client_id', registered.client_id);
        const blocked = await admin.visit('/admin/oauthclients/block', { method: 'POST', body: form });
        assert.match(blocked.html, /The client is blocked/);
        assert.equal((await profile(server, tokens.access_token)).status, 401);
        await assertErrorPage(alice, (await authorizationUrl(app)).url, /blocked/);
        const refreshed = await tokenResult(await refreshRequest(app, tokens.refresh_token!));
        assert.equal(refreshed.status >= 400 && refreshed.status < 500, true);
      });

      test('unused registrations are purged: none within a day, or none for REFRESH_TOKEN_TTL', async () => {
        const unused = (await (await register(server, { redirect_uris: ['http://127.0.0.1/callback'] })).json()) as { client_id: string };
        const used = (await (await register(server, { redirect_uris: ['http://127.0.0.1/callback'] })).json()) as { client_id: string };
        await obtainTokens(await discover(server, used.client_id), alice);
        const now = server.app.gatehouse.now();
        await purgeOnce(server.store, now + 23 * HOUR * 1000, 0);
        assert.ok(await findClient(server.store.db, unused.client_id), 'kept during its first day');
        await purgeOnce(server.store, now + 25 * HOUR * 1000, 0);
        assert.equal(await findClient(server.store.db, unused.client_id), undefined, 'no token within a day: purged');
        assert.ok(await findClient(server.store.db, used.client_id), 'it obtained a token: kept');
        await purgeOnce(server.store, now + (server.config.refreshTokenTtl + HOUR) * 1000, 0);
        assert.equal(await findClient(server.store.db, used.client_id), undefined, 'no token for REFRESH_TOKEN_TTL: purged');
        await alice.login('alice'); // that purge ended her session too
      });

      test('several redirect URLs: each works, none is the default, an unlisted one is refused', async () => {
        const { client } = await server.createClient({ redirectUris: ['https://one.example/cb', 'https://two.example/cb'], trusted: true });
        for (const redirectUri of ['https://one.example/cb', 'https://two.example/cb']) {
          const app = await discover(server, client.id, { redirectUri });
          const authorization = await authorizationUrl(app);
          const response = await alice.fetch(authorization.url.pathname + authorization.url.search);
          assert.equal(response.status, 302);
          assert.equal(new URL(response.headers.get('location')!).origin, new URL(redirectUri).origin);
        }
        const app = await discover(server, client.id, { redirectUri: 'https://three.example/cb' });
        await assertErrorPage(alice, (await authorizationUrl(app)).url, /not a redirect URL registered/);
        const omitted = (await authorizationUrl(app)).url;
        omitted.searchParams.delete('redirect_uri');
        await assertErrorPage(alice, omitted, /several redirect URLs/);
      });
    });
  }

  describe('with the settings off', () => {
    let server: TestServer;
    before(async () => {
      server = await startServer(BACKENDS[0]!, { CLIENT_METADATA_DOCUMENTS: 'false' });
      await server.createUser('alice');
    });
    after(() => server?.close());

    test('no registration endpoint (404), and metadata documents are unknown clients', async () => {
      assert.equal((await register(server, { redirect_uris: ['https://app.example/cb'] })).status, 404);
      const metadata = (await (await fetch(new URL('/.well-known/oauth-authorization-server', server.url))).json()) as Record<string, unknown>;
      assert.equal(metadata.registration_endpoint, undefined);
      assert.equal(metadata.client_id_metadata_document_supported, false);
      const alice = new UserAgent(server.url);
      await alice.login('alice');
      const app: App = await discover(server, documents.serve('/apps/off.json'));
      await assertErrorPage(alice, (await authorizationUrl(app)).url, /unknown client/);
    });
  });

  describe('registration throttling', () => {
    let server: TestServer;
    before(async () => {
      server = await startServer(BACKENDS[0]!, { DYNAMIC_CLIENT_REGISTRATION: 'true', TOKEN_REQUESTS_PER_ADDRESS: '3' });
    });
    after(() => server?.close());

    test('an address gets TOKEN_REQUESTS_PER_ADDRESS registrations a minute, malformed ones included, then 429', async () => {
      assert.equal((await register(server, '{')).status, 400);
      for (let i = 0; i < 2; i++) assert.equal((await register(server, { redirect_uris: ['https://app.example/cb'] })).status, 201);
      const refused = await register(server, { redirect_uris: ['https://app.example/cb'] });
      assert.equal(refused.status, 429);
      assert.ok(Number(refused.headers.get('retry-after')) > 0);
    });
  });
});

for (const backend of BACKENDS) {
  describe(`the client kinds migration (${backend.name})`, backendOptions(backend), () => {
    test('existing clients keep their redirect URL, as a one-element list, and are registered and unblocked', async () => {
      const database = await backend.create();
      const store = openStore(parseDatabaseUrl(database.url));
      try {
        const before = {
          '20261122_001_initial': initial,
          '20261122_002_setup_tokens': setupTokens,
          '20261122_003_audit': audit,
          '20261122_004_successor_box_index': successorBoxIndex,
        };
        const { error } = await new Migrator({ db: store.db, provider: { getMigrations: async () => before } }).migrateToLatest();
        assert.ifError(error);
        const old = (id: string, redirectUri: string | null) => ({
          id,
          name: 'Old',
          grant_type: 'authorization_code',
          redirect_uri: redirectUri,
          secret_hash: null,
          trusted: 0,
          require_pkce: 1,
          scopes: 'annotation:read',
          created_at: 1,
        });
        await (store.db as Kysely<any>)
          .insertInto('clients')
          .values([old('00000000-0000-4000-8000-000000000001', 'https://old.example/cb'), old('00000000-0000-4000-8000-000000000002', null)])
          .execute();
        await migrate(store);
        const [withUrl, without] = await Promise.all(
          ['00000000-0000-4000-8000-000000000001', '00000000-0000-4000-8000-000000000002'].map((id) => findClient(store.db, id)),
        );
        assert.equal(withUrl?.redirect_uris, '["https://old.example/cb"]');
        assert.equal(without?.redirect_uris, '[]');
        assert.equal(withUrl?.kind, 'registered');
        assert.equal(withUrl?.blocked, 0);
      } finally {
        await store.close();
        await database.drop();
      }
    });
  });
}
