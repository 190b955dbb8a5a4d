/**
 * The authorization endpoint as a browser and an application see it (SPEC §4.1): which
 * mistakes end on an error page and which go back to the application, logging in on the
 * way, the consent page, redirect URL matching, and the popup (web_message) flow.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as oauth from 'oauth4webapi';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { discover, postForm } from '../support/oauth-client.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent, dataAttributes, formFields } from '../support/user-agent.ts';

const REDIRECT_URI = 'http://127.0.0.1:8765/callback';

/** Query parameters of an authorization request: `undefined` leaves a default out, an array repeats the parameter. */
type Params = Record<string, string | string[] | undefined>;

interface AuthorizationRequest {
  path: string;
  state: string;
  verifier: string;
}

/** A well-formed request (with PKCE) for `clientId`, changed by `overrides`. */
async function authorizeRequest(clientId: string, overrides: Params = {}): Promise<AuthorizationRequest> {
  const verifier = oauth.generateRandomCodeVerifier();
  const params: Params = {
    client_id: clientId,
    redirect_uri: REDIRECT_URI,
    response_type: 'code',
    state: oauth.generateRandomState(),
    code_challenge: await oauth.calculatePKCECodeChallenge(verifier),
    code_challenge_method: 'S256',
    ...overrides,
  };
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    for (const one of value === undefined ? [] : [value].flat()) query.append(name, one);
  }
  const state = typeof params.state === 'string' ? params.state : '';
  return { path: `/oauth/authorize?${query}`, state, verifier };
}

/** A browser without a session: one request, redirects not followed. */
function anonymousGet(server: TestServer, path: string): Promise<Response> {
  return fetch(new URL(path, server.url), { redirect: 'manual' });
}

/** An HTML error page with status 400, and above all not a redirect to the unverified URL. */
async function assertErrorPage(response: Response): Promise<string> {
  assert.equal(response.status, 400);
  assert.equal(response.headers.get('location'), null);
  assert.match(response.headers.get('content-type')!, /^text\/html/);
  const html = await response.text();
  assert.match(html, /<p role="alert">[^<]+<\/p>/);
  return html;
}

/** What the popup page (response_mode=web_message) posts to its opener, and the origin it posts to. */
function postedMessage(html: string): { origin: string; message: Record<string, unknown> } {
  const data = dataAttributes(html, 'web-message');
  return { origin: data.origin!, message: JSON.parse(data.message!) };
}

async function countCodes(server: TestServer): Promise<number> {
  const row = await server.store.db
    .selectFrom('auth_codes')
    .select((eb) => eb.fn.countAll().as('n'))
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

for (const backend of BACKENDS) {
  describe(`GET /oauth/authorize (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let as: oauth.AuthorizationServer;
    let annotator: string; // an ordinary public client
    let trusted: string;
    let readOnly: string;
    let pkceRequired: string;
    /** alice, logged in once for the whole suite. */
    let alice: UserAgent;

    before(async () => {
      server = await startServer(backend);
      await server.createUser('alice');
      const create = async (input: Parameters<TestServer['createClient']>[0]) => (await server.createClient(input)).client.id;
      annotator = await create({ name: 'Annotator' });
      trusted = await create({ name: 'First-party app', trusted: true });
      readOnly = await create({ name: 'Reader', scope: 'annotation:read' });
      pkceRequired = await create({ name: 'Strict app', requirePkce: true });
      as = (await discover(server, annotator)).as;
      alice = new UserAgent(server.url);
      assert.ok((await alice.login('alice')).redirect === null);
    });
    after(() => server?.close());

    /**
     * A 302 back to the application carrying `error`, `error_description`, `state` and
     * `iss`, checked by oauth4webapi as a client would (it verifies `iss` and `state`).
     */
    function assertRedirectedError(response: Response, clientId: string, state: string, error: string, redirectUri = REDIRECT_URI): URLSearchParams {
      assert.equal(response.status, 302);
      const location = new URL(response.headers.get('location')!);
      assert.equal(location.origin + location.pathname, redirectUri);
      const params = location.searchParams;
      assert.equal(params.get('error'), error);
      assert.ok(params.get('error_description'), 'error_description explains the error');
      assert.equal(params.get('state'), state);
      assert.equal(params.get('iss'), server.url);
      assert.equal(params.get('code'), null);
      try {
        oauth.validateAuthResponse(as, { client_id: clientId }, location, state);
        assert.fail('oauth4webapi accepted an error response');
      } catch (thrown) {
        assert.ok(thrown instanceof oauth.AuthorizationResponseError, String(thrown));
        assert.equal(thrown.error, error);
      }
      return params;
    }

    /** A 302 back to the application with a code that oauth4webapi accepts. */
    function assertRedirectedCode(response: Response, clientId: string, state: string, redirectUri = REDIRECT_URI): string {
      assert.equal(response.status, 302);
      const location = new URL(response.headers.get('location')!);
      assert.equal(location.origin + location.pathname, redirectUri);
      const callback = oauth.validateAuthResponse(as, { client_id: clientId }, location, state);
      return callback.get('code')!;
    }

    describe('requests that cannot be trusted to go back: an error page, never a redirect', () => {
      const cases: Array<[string, (ids: { annotator: string }) => Params]> = [
        ['unknown client_id', () => ({ client_id: '2b7e1516-28ae-4d2a-a6ab-f7158809cf4f' })],
        ['malformed client_id', () => ({ client_id: '<script>alert(1)</script>' })],
        ['missing client_id', () => ({ client_id: undefined })],
        ['repeated client_id', ({ annotator }) => ({ client_id: [annotator, annotator] })],
        ['redirect_uri on another host', () => ({ redirect_uri: 'https://evil.example/callback' })],
        ['redirect_uri with another path', () => ({ redirect_uri: `${REDIRECT_URI}/more` })],
        ['redirect_uri with an extra query', () => ({ redirect_uri: `${REDIRECT_URI}?next=https://evil.example` })],
        ['repeated redirect_uri', () => ({ redirect_uri: [REDIRECT_URI, REDIRECT_URI] })],
      ];
      for (const [name, params] of cases) {
        test(name, async () => {
          const request = await authorizeRequest(annotator, params({ annotator }));
          const html = await assertErrorPage(await alice.fetch(request.path));
          assert.doesNotMatch(html, /<script>alert/);
        });
      }

      test('the page is the same for someone not logged in (no detour through /login)', async () => {
        const request = await authorizeRequest(annotator, { redirect_uri: 'https://evil.example/callback' });
        await assertErrorPage(await anonymousGet(server, request.path));
      });
    });

    describe('errors sent back to the redirect URL with error, error_description, state and iss', () => {
      const cases: Array<[string, () => string, Params, string]> = [
        ['response_type=token', () => annotator, { response_type: 'token' }, 'unsupported_response_type'],
        ['missing response_type', () => annotator, { response_type: undefined }, 'invalid_request'],
        ['an unknown scope', () => annotator, { scope: 'annotation:read admin' }, 'invalid_scope'],
        ['a scope the client may not have', () => readOnly, { scope: 'annotation:write' }, 'invalid_scope'],
        ['a repeated scope parameter', () => annotator, { scope: ['annotation:read', 'annotation:read'] }, 'invalid_request'],
        ['code_challenge_method=plain', () => annotator, { code_challenge_method: 'plain' }, 'invalid_request'],
        ['code_challenge without code_challenge_method', () => annotator, { code_challenge_method: undefined }, 'invalid_request'],
        ['no PKCE for a client that requires it', () => pkceRequired, { code_challenge: undefined, code_challenge_method: undefined }, 'invalid_request'],
        ['an unknown prompt value', () => annotator, { prompt: 'select_account' }, 'invalid_request'],
      ];
      for (const [name, clientId, params, error] of cases) {
        test(`${name} → ${error}`, async () => {
          const request = await authorizeRequest(clientId(), params);
          assertRedirectedError(await alice.fetch(request.path), clientId(), request.state, error);
        });
      }

      test('the description says what was wrong', async () => {
        const request = await authorizeRequest(annotator, { response_type: undefined });
        const params = assertRedirectedError(await alice.fetch(request.path), annotator, request.state, 'invalid_request');
        assert.equal(params.get('error_description'), "the 'response_type' parameter is missing");
      });

      test('prompt=none when not logged in → login_required', async () => {
        const request = await authorizeRequest(annotator, { prompt: 'none' });
        assertRedirectedError(await anonymousGet(server, request.path), annotator, request.state, 'login_required');
      });

      test('prompt=none for an application the user has not approved → consent_required', async () => {
        const { client } = await server.createClient({ name: 'Never approved' });
        const request = await authorizeRequest(client.id, { prompt: 'none' });
        const codes = await countCodes(server);
        assertRedirectedError(await alice.fetch(request.path), client.id, request.state, 'consent_required');
        assert.equal(await countCodes(server), codes);
      });

      test('PKCE is required of every client with REQUIRE_PKCE=true', async (t) => {
        const strict = await startServer(backend, { REQUIRE_PKCE: 'true' });
        t.after(() => strict.close());
        const { client } = await strict.createClient({ requirePkce: false });
        const strictAs = (await discover(strict, client.id)).as;
        const request = await authorizeRequest(client.id, { code_challenge: undefined, code_challenge_method: undefined });
        const response = await anonymousGet(strict, request.path);
        assert.equal(response.status, 302);
        const location = new URL(response.headers.get('location')!);
        assert.equal(location.searchParams.get('error'), 'invalid_request');
        assert.equal(location.searchParams.get('iss'), strict.url);
        assert.throws(() => oauth.validateAuthResponse(strictAs, { client_id: client.id }, location, request.state), oauth.AuthorizationResponseError);
      });
    });

    describe('logging in on the way', () => {
      test('not logged in: to /login?next=…, and after logging in back to the same request', async () => {
        const request = await authorizeRequest(annotator, { scope: 'annotation:read' });
        const response = await anonymousGet(server, request.path);
        assert.equal(response.status, 302);
        const login = new URL(response.headers.get('location')!, server.url);
        assert.equal(login.origin + login.pathname, `${server.url}/login`);
        const next = new URL(login.searchParams.get('next')!, server.url);
        assert.equal(next.pathname, '/oauth/authorize');
        assert.deepEqual([...next.searchParams].sort(), [...new URL(request.path, server.url).searchParams].sort());

        const bob = new UserAgent(server.url);
        await server.createUser('bob');
        const page = await bob.visit(login.pathname + login.search);
        const consent = await bob.submit(page.html, '/login', { username: 'bob', password: 'correct horse battery staple' });
        assert.equal(consent.response.status, 200);
        assert.equal(formFields(consent.html, '/oauth/authorize').get('state'), request.state);
        assert.match(consent.html, /wants to use your account <strong>bob<\/strong>/);
      });

      test('prompt=login shows the login page even when logged in, then carries on', async () => {
        const agent = new UserAgent(server.url);
        await agent.login('alice');
        const request = await authorizeRequest(trusted, { prompt: 'login' });
        const response = await agent.fetch(request.path);
        assert.equal(response.status, 302);
        const page = await agent.visit(response.headers.get('location')!);
        assert.equal(page.response.status, 200);
        assert.match(page.html, /<form method="post" action="\/login"[ >]/);
        const back = await agent.submit(page.html, '/login', { username: 'alice', password: 'correct horse battery staple' });
        assert.ok(back.redirect, 'after logging in again the request completes instead of asking again');
        assert.ok(back.redirect.searchParams.get('code'));
        assert.equal(back.redirect.searchParams.get('state'), request.state);
      });
    });

    describe('the consent page', () => {
      test('names the application, the user and each scope in plain words, with Authorize and Deny', async () => {
        const request = await authorizeRequest(annotator, { prompt: 'consent' });
        const page = await alice.visit(request.path);
        assert.equal(page.response.status, 200);
        assert.match(page.html, /Authorize Annotator/);
        assert.match(page.html, /<strong>alice<\/strong>/);
        assert.match(page.html, /Read your annotations, including private ones/);
        assert.match(page.html, /Create, edit and delete annotations as you/);
        assert.match(page.html, /<button[^>]*value="approve"[^>]*>Authorize<\/button>/);
        assert.match(page.html, /<button[^>]*value="deny"[^>]*>Deny<\/button>/);
        assert.ok(formFields(page.html, '/oauth/authorize').get('_csrf'), 'the form carries a CSRF token');
      });

      test('only the requested scopes are listed', async () => {
        const page = await alice.visit((await authorizeRequest(annotator, { prompt: 'consent', scope: 'annotation:read' })).path);
        assert.match(page.html, /Read your annotations/);
        assert.doesNotMatch(page.html, /Create, edit and delete annotations/);
      });

      test('cannot be framed and is not cached', async () => {
        const response = await alice.fetch((await authorizeRequest(annotator, { prompt: 'consent' })).path);
        assert.equal(response.status, 200);
        assert.match(response.headers.get('content-security-policy')!, /frame-ancestors 'none'/);
        assert.equal(response.headers.get('x-frame-options'), 'DENY');
        assert.equal(response.headers.get('cache-control'), 'no-store');
      });

      test('an answer without the CSRF token, or with a wrong one, is refused with 403 and issues no code', async () => {
        const page = await alice.visit((await authorizeRequest(annotator, { prompt: 'consent' })).path);
        const fields = formFields(page.html, '/oauth/authorize');
        fields.set('decision', 'approve');
        const codes = await countCodes(server);
        for (const csrf of [null, 'forged-token']) {
          const body = new URLSearchParams(fields);
          if (csrf === null) body.delete('_csrf');
          else body.set('_csrf', csrf);
          const response = await alice.fetch('/oauth/authorize', { method: 'POST', body });
          assert.equal(response.status, 403);
          assert.equal(response.headers.get('location'), null);
        }
        assert.equal(await countCodes(server), codes);
      });

      test('Authorize: back to the application with a code, state and iss', async () => {
        const request = await authorizeRequest(annotator, { prompt: 'consent' });
        const outcome = await alice.authorize(request.path, { decision: 'approve' });
        assert.ok(outcome.redirect);
        const code = oauth.validateAuthResponse(as, { client_id: annotator }, outcome.redirect, request.state).get('code');
        assert.match(code!, /^gac_/);
      });

      test('Deny: back to the application with access_denied, state and iss, and no code', async () => {
        const request = await authorizeRequest(annotator, { prompt: 'consent' });
        const codes = await countCodes(server);
        const page = await alice.visit(request.path);
        const response = await alice.fetch('/oauth/authorize', {
          method: 'POST',
          body: new URLSearchParams([...formFields(page.html, '/oauth/authorize'), ['decision', 'deny']]),
        });
        assertRedirectedError(response, annotator, request.state, 'access_denied');
        assert.equal(await countCodes(server), codes);
      });

      test('a trusted application skips it', async () => {
        const request = await authorizeRequest(trusted);
        assertRedirectedCode(await alice.fetch(request.path), trusted, request.state);
      });
    });

    describe('redirect URLs', () => {
      test('a registered http://127.0.0.1 URL matches any port, but not another path', async () => {
        const { client } = await server.createClient({ name: 'Native app', redirectUris: ['http://127.0.0.1/cb'], trusted: true });
        for (const redirectUri of ['http://127.0.0.1:51004/cb', 'http://127.0.0.1:8080/cb']) {
          const request = await authorizeRequest(client.id, { redirect_uri: redirectUri });
          assertRedirectedCode(await alice.fetch(request.path), client.id, request.state, redirectUri);
        }
        const elsewhere = await authorizeRequest(client.id, { redirect_uri: 'http://127.0.0.1:51004/other' });
        await assertErrorPage(await alice.fetch(elsewhere.path));
      });

      test('an omitted redirect_uri means the registered one', async () => {
        const request = await authorizeRequest(trusted, { redirect_uri: undefined });
        assertRedirectedCode(await alice.fetch(request.path), trusted, request.state);
      });
    });

    describe('response_mode=web_message (popups)', () => {
      test('Authorize: a page (not a redirect) posting the code to the redirect URL origin, whatever "origin" says', async () => {
        const request = await authorizeRequest(annotator, { response_mode: 'web_message', prompt: 'consent', origin: 'https://evil.example' });
        const page = await alice.visit(request.path);
        assert.equal(dataAttributes(page.html, 'consent').origin, 'http://127.0.0.1:8765');
        const outcome = await alice.submit(page.html, '/oauth/authorize', { decision: 'approve' });
        assert.equal(outcome.redirect, null);
        assert.equal(outcome.response.status, 200);
        assert.match(outcome.response.headers.get('content-type')!, /^text\/html/);
        const { origin, message } = postedMessage(outcome.html);
        assert.equal(origin, 'http://127.0.0.1:8765');
        assert.deepEqual(Object.keys(message).sort(), ['code', 'state', 'type']);
        assert.equal(message.type, 'authorization_response');
        assert.equal(message.state, request.state);

        // The posted code is a real one.
        const token = await postForm(server, '/api/token', {
          grant_type: 'authorization_code',
          code: message.code as string,
          client_id: annotator,
          redirect_uri: REDIRECT_URI,
          code_verifier: request.verifier,
        });
        assert.equal(token.status, 200);
      });

      test('Deny: authorization_canceled with the state', async () => {
        const request = await authorizeRequest(annotator, { response_mode: 'web_message', prompt: 'consent' });
        const outcome = await alice.authorize(request.path, { decision: 'deny' });
        assert.equal(outcome.response.status, 200);
        assert.deepEqual(postedMessage(outcome.html), { origin: 'http://127.0.0.1:8765', message: { type: 'authorization_canceled', state: request.state } });
      });

      test('an error that would be redirected is posted instead', async () => {
        const request = await authorizeRequest(annotator, { response_mode: 'web_message', scope: 'nonsense' });
        const response = await alice.fetch(request.path);
        assert.equal(response.status, 200);
        const { origin, message } = postedMessage(await response.text());
        assert.equal(origin, 'http://127.0.0.1:8765');
        assert.equal(message.type, 'authorization_response');
        assert.equal(message.error, 'invalid_scope');
        assert.ok(message.error_description);
        assert.equal(message.state, request.state);
      });
    });

    describe('HTML escaping', () => {
      const script = '<script>alert(1)</script>';

      test('a client name and a state with markup appear escaped', async () => {
        const { client } = await server.createClient({ name: script });
        const request = await authorizeRequest(client.id, { state: `"'>${script}`, response_mode: 'web_message' });
        const page = await alice.visit(request.path);
        assert.equal(page.response.status, 200);
        assert.match(page.html, /Authorize &lt;script&gt;alert\(1\)&lt;\/script&gt;/);
        assert.doesNotMatch(page.html, /<script>alert/);
        assert.equal(formFields(page.html, '/oauth/authorize').get('state'), request.state);

        const outcome = await alice.submit(page.html, '/oauth/authorize', { decision: 'deny' });
        assert.doesNotMatch(outcome.html, /<script>alert/);
        assert.equal(postedMessage(outcome.html).message.state, request.state);
      });
    });
  });
}
