/**
 * OpenID Connect core (SPEC §3 identity scopes, §4.1, §4.2, §4.4, §4.10): discovery, the code
 * flow with PKCE and a nonce as openid-client v6 runs it (strict: it checks the ID token's
 * signature, `iss`, `aud`, `nonce`, `at_hash` and userinfo's `sub`), refresh, claims by
 * scope, ES256 clients, the device grant, userinfo, the OIDC request parameters and their
 * refusals, and `response_mode=form_post`.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as jose from 'jose';
import * as client from 'openid-client';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { answerAtDevicePage, deviceApp, poll, requestCodes } from '../support/device.ts';
import { postForm, profile, type TokenResult } from '../support/oauth-client.ts';
import { registerResourceServer } from '../support/resources.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent, formFields, type Outcome } from '../support/user-agent.ts';

const REDIRECT_URI = 'http://127.0.0.1:8765/callback';

/** What the relying party keeps between sending the person away and their coming back. */
interface Pending {
  url: URL;
  verifier: string;
  nonce: string;
  state: string;
}

for (const backend of BACKENDS) {
  describe(`OpenID Connect (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let rp: client.Configuration;
    let clientId: string;

    /** openid-client's configuration for a client, from the server's discovery document. */
    function discover(id: string, metadata: Partial<client.ClientMetadata> = {}, auth: client.ClientAuth = client.None()): Promise<client.Configuration> {
      return client.discovery(new URL(server.url), id, { redirect_uris: [REDIRECT_URI], ...metadata }, auth, { execute: [client.allowInsecureRequests] });
    }

    async function authorization(config: client.Configuration, params: Record<string, string> = {}): Promise<Pending> {
      const verifier = client.randomPKCECodeVerifier();
      const nonce = client.randomNonce();
      const state = client.randomState();
      const url = client.buildAuthorizationUrl(config, {
        redirect_uri: REDIRECT_URI,
        scope: 'openid profile email groups',
        code_challenge: await client.calculatePKCECodeChallenge(verifier),
        code_challenge_method: 'S256',
        nonce,
        state,
        ...params,
      });
      return { url, verifier, nonce, state };
    }

    /** The whole code flow: the person logs in and approves, the relying party exchanges and validates. */
    async function signIn(config = rp, agent = new UserAgent(server.url), params: Record<string, string> = {}, username = 'alice') {
      const pending = await authorization(config, params);
      const outcome = await agent.authorize(pending.url, { username });
      assert.ok(outcome.redirect, `the authorization came back (${outcome.response.status})`);
      const tokens = await client.authorizationCodeGrant(config, outcome.redirect, {
        pkceCodeVerifier: pending.verifier,
        expectedNonce: pending.nonce,
        expectedState: pending.state,
        idTokenExpected: true,
      });
      return { tokens, claims: tokens.claims()!, agent };
    }

    /** Where the authorization endpoint sent the browser, for a request it refuses. */
    async function refusal(agent: UserAgent, params: Record<string, string>): Promise<URLSearchParams> {
      const pending = await authorization(rp, params);
      const outcome = await agent.visit(pending.url.pathname + pending.url.search);
      assert.ok(outcome.redirect, `redirected back (${outcome.response.status})`);
      assert.equal(outcome.redirect.origin + outcome.redirect.pathname, REDIRECT_URI);
      assert.equal(outcome.redirect.searchParams.get('state'), pending.state);
      assert.equal(outcome.redirect.searchParams.get('iss'), server.url);
      return outcome.redirect.searchParams;
    }

    async function loggedIn(username = 'alice'): Promise<UserAgent> {
      const agent = new UserAgent(server.url);
      await agent.login(username);
      return agent;
    }

    function userinfo(token: string | null, init: RequestInit = {}): Promise<Response> {
      const headers = new Headers(init.headers);
      if (token !== null) headers.set('authorization', `Bearer ${token}`);
      return fetch(new URL('/oauth/userinfo', server.url), { ...init, headers });
    }

    const jwks = () => jose.createRemoteJWKSet(new URL('/oauth/jwks', server.url));

    before(async () => {
      server = await startServer(backend);
      const alice = await server.createUser('alice');
      await server.createUser('bob');
      const { db } = server.store;
      await db.updateTable('users').set({ display_name: 'Alice Liddell', email_verified: 1 }).where('id', '=', alice.id).execute();
      await db
        .insertInto('groups')
        .values([
          { name: 'editors', created_at: Date.now() },
          { name: 'admins', created_at: Date.now() },
        ])
        .execute();
      await db
        .insertInto('group_members')
        .values([
          { group_name: 'editors', user_id: alice.id },
          { group_name: 'admins', user_id: alice.id },
        ])
        .execute();
      clientId = (await server.createClient({ name: 'Team wiki', requirePkce: true })).client.id;
      rp = await discover(clientId);
    });
    after(() => server?.close());

    test('discovery: the OpenID Provider configuration is the authorization server metadata, with the OIDC fields', async () => {
      const [oidc, oauth] = await Promise.all(
        ['/.well-known/openid-configuration', '/.well-known/oauth-authorization-server'].map((path) =>
          fetch(new URL(path, server.url), { headers: { origin: 'https://app.example' } }),
        ),
      );
      assert.equal(oidc!.status, 200);
      assert.equal(oidc!.headers.get('access-control-allow-origin'), '*');
      const document = (await oidc!.json()) as Record<string, unknown>;
      assert.deepEqual(document, await oauth!.json());
      assert.equal(document.userinfo_endpoint, `${server.url}/oauth/userinfo`);
      assert.equal(document.end_session_endpoint, `${server.url}/oauth/logout`);
      assert.deepEqual(document.id_token_signing_alg_values_supported, ['RS256', 'ES256']);
      assert.deepEqual(document.subject_types_supported, ['public']);
      assert.deepEqual(document.prompt_values_supported, ['none', 'login', 'consent']);
      assert.deepEqual(document.response_modes_supported, ['query', 'form_post', 'web_message']);
      for (const scope of ['openid', 'profile', 'email', 'groups', 'offline_access', 'annotation:read'])
        assert.ok((document.scopes_supported as string[]).includes(scope), scope);
      assert.deepEqual(document.claims_supported, [
        'sub',
        'iss',
        'aud',
        'exp',
        'iat',
        'auth_time',
        'nonce',
        'at_hash',
        'sid',
        'amr',
        'azp',
        'preferred_username',
        'name',
        'email',
        'email_verified',
        'groups',
      ]);
      assert.equal(document.backchannel_logout_supported, true);
      assert.equal(document.backchannel_logout_session_supported, true);
      assert.equal(document.request_parameter_supported, false);
      assert.equal(document.request_uri_parameter_supported, false);
      assert.equal(rp.serverMetadata().issuer, server.url, 'openid-client discovered the issuer');
    });

    test('the code flow with PKCE and a nonce: openid-client validates the ID token, userinfo agrees, refresh gives a new ID token', async () => {
      const { tokens, claims } = await signIn();
      assert.equal(tokens.scope, 'email groups openid profile');
      assert.equal(claims.iss, server.url);
      assert.equal(claims.sub, 'acct:alice@127.0.0.1');
      assert.equal(claims.aud, clientId);
      assert.equal(claims.azp, clientId);
      assert.equal(claims.exp - claims.iat, 3600);
      assert.deepEqual(claims.amr, ['pwd']);
      assert.match(String(claims.sid), /^[A-Za-z0-9_-]{22}$/);
      assert.ok(Math.abs(claims.auth_time! - Date.now() / 1000) < 60);
      assert.equal(claims.preferred_username, 'alice');
      assert.equal(claims.name, 'Alice Liddell');
      assert.equal(claims.email, 'alice@example.com');
      assert.equal(claims.email_verified, true);
      assert.deepEqual(claims.groups, ['admins', 'editors']);
      const header = jose.decodeProtectedHeader(tokens.id_token!);
      assert.deepEqual([header.alg, header.typ], ['RS256', 'JWT']);
      assert.ok(header.kid);

      const info = await client.fetchUserInfo(rp, tokens.access_token, claims.sub);
      const { iss, aud, azp, iat, exp, auth_time, amr, sid, nonce, at_hash, ...identity } = claims;
      void [iss, aud, azp, iat, exp, auth_time, amr, sid, nonce, at_hash];
      assert.deepEqual({ ...info }, identity, 'userinfo releases exactly the identity claims of the ID token');

      const refreshed = await client.refreshTokenGrant(rp, tokens.refresh_token!);
      const again = refreshed.claims()!;
      assert.notEqual(refreshed.id_token, tokens.id_token);
      assert.deepEqual([again.sub, again.auth_time, again.sid], [claims.sub, claims.auth_time, claims.sid]);
      assert.equal(again.nonce, undefined, 'no nonce on refresh');
      assert.deepEqual(again.groups, ['admins', 'editors']);
      await client.fetchUserInfo(rp, refreshed.access_token, claims.sub);
    });

    test('within the grace window the same refresh token gets the same response, ID token included', async () => {
      const { tokens } = await signIn();
      const send = () => postForm(server, '/api/token', { grant_type: 'refresh_token', refresh_token: tokens.refresh_token!, client_id: clientId });
      const first = (await (await send()).json()) as Record<string, string>;
      const second = (await (await send()).json()) as Record<string, string>;
      assert.ok(first.id_token);
      assert.equal(second.id_token, first.id_token);
      assert.equal(second.access_token, first.access_token);
    });

    test('claims follow the granted scopes; narrowing on refresh narrows them, and dropping openid drops the ID token', async () => {
      const { tokens, claims } = await signIn(rp, undefined, { scope: 'openid' });
      assert.equal(tokens.scope, 'openid', 'identity scopes alone are a valid request');
      for (const claim of ['preferred_username', 'name', 'email', 'email_verified', 'groups']) assert.equal(claims[claim], undefined, claim);
      assert.deepEqual(await (await userinfo(tokens.access_token)).json(), { sub: 'acct:alice@127.0.0.1' });
      // For the built-in resource, with only identity scopes: /api/profile wants annotation:read.
      assert.equal((await profile(server, tokens.access_token)).status, 403);

      const bob = await signIn(rp, new UserAgent(server.url), { scope: 'openid email groups annotation:read' }, 'bob');
      assert.deepEqual([bob.claims.email, bob.claims.email_verified, bob.claims.groups], ['bob@example.com', false, []]);
      assert.equal((await profile(server, bob.tokens.access_token)).status, 200, 'identity scopes do not change the audience');
      const narrowed = await client.refreshTokenGrant(rp, bob.tokens.refresh_token!, { scope: 'openid groups' });
      assert.equal(narrowed.claims()!.email, undefined);
      const without = await client.refreshTokenGrant(rp, narrowed.refresh_token!, { scope: 'groups' });
      assert.equal(without.id_token, undefined);
    });

    test('an ES256 client gets ES256 ID tokens', async () => {
      const { client: registered } = await server.createClient({ name: 'Dashboard', requirePkce: true });
      await server.store.db.updateTable('clients').set({ id_token_alg: 'ES256' }).where('id', '=', registered.id).execute();
      const config = await discover(registered.id, { id_token_signed_response_alg: 'ES256' });
      const { tokens, claims } = await signIn(config);
      assert.equal(jose.decodeProtectedHeader(tokens.id_token!).alg, 'ES256');
      assert.equal(claims.aud, registered.id);
    });

    test('a client whose scope list leaves out openid is refused it; a client acting as itself is refused it', async () => {
      const { client: narrow } = await server.createClient({ name: 'Plain OAuth', scope: 'annotation:read' });
      const config = await discover(narrow.id);
      const pending = await authorization(config, { scope: 'openid annotation:read' });
      const outcome = await (await loggedIn()).visit(pending.url.pathname + pending.url.search);
      assert.equal(outcome.redirect?.searchParams.get('error'), 'invalid_scope');

      const batch = await server.createClient({ name: 'Batch', grantType: 'client_credentials', redirectUris: [], confidential: true });
      const credentials = { client_id: batch.client.id, client_secret: batch.secret! };
      const refused = await postForm(server, '/api/token', { grant_type: 'client_credentials', scope: 'openid', ...credentials });
      assert.equal(refused.status, 400);
      assert.equal(((await refused.json()) as { error: string }).error, 'invalid_scope');
      const harmless = await postForm(server, '/api/token', { grant_type: 'client_credentials', scope: 'annotation:read profile', ...credentials });
      const body = (await harmless.json()) as Record<string, string>;
      assert.equal(body.scope, 'annotation:read profile');
      assert.equal(body.id_token, undefined);
    });

    test('the device grant: the exchange carries an ID token, without nonce, for the session that approved at /device', async () => {
      const device = await deviceApp(server);
      const codes = await requestCodes(device, { scope: 'openid profile' });
      const agent = await loggedIn();
      await answerAtDevicePage(agent, codes, 'approve');
      server.advance(codes.interval!); // the interval applies before the first poll too
      const result: TokenResult & { body: { id_token?: string } } = await poll(device, codes.device_code);
      assert.equal(result.status, 200);
      const { payload } = await jose.jwtVerify(result.body.id_token!, jwks(), { issuer: server.url, audience: device.client.client_id, typ: 'JWT' });
      assert.equal(payload.sub, 'acct:alice@127.0.0.1');
      assert.equal(payload.preferred_username, 'alice');
      assert.equal(payload.nonce, undefined);
      assert.match(String(payload.sid), /^[A-Za-z0-9_-]{22}$/);
    });

    test('userinfo: GET and POST, no-store and CORS; its refusals', async () => {
      const { tokens } = await signIn();
      const get = await userinfo(tokens.access_token, { headers: { origin: 'https://app.example' } });
      assert.equal(get.status, 200);
      assert.equal(get.headers.get('cache-control'), 'no-store');
      assert.equal(get.headers.get('access-control-allow-origin'), '*');
      const post = await userinfo(tokens.access_token, { method: 'POST' });
      assert.equal(((await post.json()) as { sub: string }).sub, 'acct:alice@127.0.0.1');
      const inBody = await postForm(server, '/oauth/userinfo', { access_token: tokens.access_token });
      assert.equal(inBody.status, 200);

      const none = await userinfo(null);
      assert.equal(none.status, 401);
      assert.equal(none.headers.get('www-authenticate'), 'Bearer realm="gatehouse"', 'no error code without a token (RFC 6750 §3.1)');
      const unknown = await userinfo('gat_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA');
      assert.equal(unknown.status, 401);
      assert.match(unknown.headers.get('www-authenticate')!, /error="invalid_token"/);

      const plain = await signInWithoutOpenid();
      const forbidden = await userinfo(plain);
      assert.equal(forbidden.status, 403);
      assert.match(forbidden.headers.get('www-authenticate')!, /error="insufficient_scope".*scope="openid"/);

      await registerResourceServer(server, 'https://files.example/api', [{ name: 'files:read', description: 'Read your files' }]);
      const files = await discover((await server.createClient({ name: 'File browser', scope: 'openid files:read' })).client.id);
      const other = await signIn(files, undefined, { scope: 'openid files:read', resource: 'https://files.example/api' });
      const elsewhere = await userinfo(other.tokens.access_token);
      assert.equal(elsewhere.status, 401, 'a token for another resource server');
      assert.match(elsewhere.headers.get('www-authenticate')!, /error="invalid_token"/);
      assert.equal(other.claims.sub, 'acct:alice@127.0.0.1', 'but its ID token is as any other');

      await client.tokenRevocation(rp, tokens.access_token);
      assert.equal((await userinfo(tokens.access_token)).status, 401, 'revoked');
      server.advance(3601);
      try {
        const fresh = await signIn();
        server.advance(3601);
        assert.equal((await userinfo(fresh.tokens.access_token)).status, 401, 'expired');
      } finally {
        server.advance(-7202);
      }
    });

    test("docs/oidc.md §3: an application with an API's token reads the claims from its ID token; userinfo wants a token for Gatehouse itself", async () => {
      await registerResourceServer(server, 'https://calendar.example/api', [{ name: 'calendar:read', description: 'Read your calendar' }]);
      const calendar = await discover((await server.createClient({ name: 'Calendar', scope: 'openid profile email calendar:read' })).client.id);
      const agent = new UserAgent(server.url);
      const api = await signIn(calendar, agent, { scope: 'openid profile email calendar:read', resource: 'https://calendar.example/api' });
      assert.deepEqual(
        [api.claims.sub, api.claims.preferred_username, api.claims.email],
        ['acct:alice@127.0.0.1', 'alice', 'alice@example.com'],
        'the identity claims ride along with a request for an API, in the ID token',
      );
      const refused = await userinfo(api.tokens.access_token);
      assert.equal(refused.status, 401, "userinfo refuses the API's token (SPEC §4.10: a token for the built-in resource)");
      assert.match(refused.headers.get('www-authenticate')!, /error="invalid_token"/);
      // The refresh's ID token carries them too; its access token is still for the API alone.
      const refreshed = await client.refreshTokenGrant(calendar, api.tokens.refresh_token!);
      assert.equal(refreshed.claims()!.email, 'alice@example.com');
      assert.equal((await userinfo(refreshed.access_token)).status, 401);
      // One more request, the identity scopes alone and no resource: its token opens userinfo, with the same claims.
      const identity = await signIn(calendar, agent, { scope: 'openid profile email' });
      const info = (await (await userinfo(identity.tokens.access_token)).json()) as Record<string, unknown>;
      assert.deepEqual(info, {
        sub: 'acct:alice@127.0.0.1',
        preferred_username: 'alice',
        name: 'Alice Liddell',
        email: 'alice@example.com',
        email_verified: true,
      });
      assert.equal(api.claims.name, info.name);
    });

    async function signInWithoutOpenid(): Promise<string> {
      const pending = await authorization(rp, { scope: 'annotation:read' });
      const outcome = await new UserAgent(server.url).authorize(pending.url);
      const tokens = await client.authorizationCodeGrant(rp, outcome.redirect!, { pkceCodeVerifier: pending.verifier, expectedState: pending.state });
      return tokens.access_token;
    }

    test('the OIDC parameters that are refused, each with its error, and nothing issued', async () => {
      const agent = await loggedIn();
      const codesBefore = await countCodes();
      assert.equal((await refusal(agent, { nonce: 'n'.repeat(513) })).get('error'), 'invalid_request');
      for (const maxAge of ['-1', '1.5', 'abc', '1e3'])
        assert.deepEqual(
          [maxAge, (await refusal(agent, { max_age: maxAge })).get('error_description')],
          [maxAge, "'max_age' must be a non-negative integer (seconds)"],
        );
      assert.equal((await refusal(agent, { request: 'eyJhbGciOiJub25lIn0.e30.' })).get('error'), 'request_not_supported');
      assert.equal((await refusal(agent, { request_uri: 'https://rp.example/request.jwt' })).get('error'), 'request_uri_not_supported');

      const foreign = await jose.generateKeyPair('RS256');
      const forged = await new jose.SignJWT({ sub: 'acct:alice@127.0.0.1', aud: clientId })
        .setProtectedHeader({ alg: 'RS256', typ: 'JWT', kid: 'foreign' })
        .setIssuer(server.url)
        .setIssuedAt()
        .setExpirationTime('1h')
        .sign(foreign.privateKey);
      const forgedRefusal = await refusal(agent, { id_token_hint: forged });
      assert.deepEqual(
        [forgedRefusal.get('error'), forgedRefusal.get('error_description')],
        ['invalid_request', "'id_token_hint' is not an ID token this server issued"],
      );
      assert.equal((await refusal(agent, { id_token_hint: 'not a jwt' })).get('error'), 'invalid_request');
      assert.equal(await countCodes(), codesBefore, 'no code was issued');

      // A 512-character nonce is fine, and comes back in the ID token.
      const pending = await authorization(rp);
      pending.url.searchParams.set('nonce', 'n'.repeat(512));
      const outcome = await agent.authorize(pending.url);
      const tokens = await client.authorizationCodeGrant(rp, outcome.redirect!, {
        pkceCodeVerifier: pending.verifier,
        expectedNonce: 'n'.repeat(512),
        expectedState: pending.state,
      });
      assert.equal(tokens.claims()!.nonce, 'n'.repeat(512));
    });

    async function countCodes(): Promise<number> {
      const row = await server.store.db
        .selectFrom('auth_codes')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .executeTakeFirstOrThrow();
      return Number(row.n);
    }

    test('id_token_hint: a hint for the person logged in passes prompt=none, even expired; one for someone else is login_required', async () => {
      const { tokens, agent } = await signIn();
      const silent = await authorization(rp, { prompt: 'none', id_token_hint: tokens.id_token! });
      server.advance(7200); // the hint's expiry is ignored; the session lasts longer
      try {
        const outcome = await agent.visit(silent.url.pathname + silent.url.search);
        assert.ok(outcome.redirect?.searchParams.get('code'), `a code, without asking: ${outcome.response.status} ${outcome.html.slice(-600)}`);
      } finally {
        server.advance(-7200);
      }
      const bob = await loggedIn('bob');
      const other = await refusal(bob, { prompt: 'none', id_token_hint: tokens.id_token! });
      assert.equal(other.get('error'), 'login_required');
      const nobody = await refusal(new UserAgent(server.url), { prompt: 'none', id_token_hint: tokens.id_token! });
      assert.equal(nobody.get('error'), 'login_required');
    });

    test('max_age: an older login logs in again, then the request goes on; 0 always asks; with prompt=none it is login_required', async () => {
      const first = await signIn();
      const agent = first.agent;
      server.advance(120);
      try {
        const pending = await authorization(rp, { max_age: '60' });
        const page = await agent.visit(pending.url.pathname + pending.url.search);
        assert.equal(page.redirect, null);
        assert.match(page.html, /action="\/login"/, 'the login page, though a session exists');
        assert.equal((await refusal(agent, { max_age: '60', prompt: 'none' })).get('error'), 'login_required');
        const back: Outcome = await agent.submit(page.html, '/login', { username: 'alice', password: 'correct horse battery staple' });
        assert.ok(back.redirect?.searchParams.get('code'), 'back to the application after logging in');
        const tokens = await client.authorizationCodeGrant(rp, back.redirect!, {
          pkceCodeVerifier: pending.verifier,
          expectedNonce: pending.nonce,
          expectedState: pending.state,
          maxAge: 60,
        });
        assert.ok(tokens.claims()!.auth_time! >= first.claims.auth_time! + 120, 'auth_time is the new login');
        assert.notEqual(tokens.claims()!.sid, first.claims.sid, 'a new session');

        const recent = await authorization(rp, { max_age: '3600' });
        assert.ok((await agent.visit(recent.url.pathname + recent.url.search)).redirect?.searchParams.get('code'), 'a recent login is enough');
        const zero = await authorization(rp, { max_age: '0' });
        assert.match((await agent.visit(zero.url.pathname + zero.url.search)).html, /action="\/login"/, 'max_age=0 acts like prompt=login');
      } finally {
        server.advance(-120);
      }
    });

    test('login_hint fills in the username field of the login page', async () => {
      const pending = await authorization(rp, { login_hint: 'alice@example.com' });
      const page = await new UserAgent(server.url).visit(pending.url.pathname + pending.url.search);
      assert.match(page.html, /<input id="username" name="username"[^>]*value="alice@example.com"/);
    });

    test('response_mode=form_post: a page whose form posts the answer to the redirect URL, without inline script', async () => {
      const agent = await loggedIn();
      await signIn(rp, agent); // approved before: no consent page now
      const pending = await authorization(rp, { response_mode: 'form_post' });
      const outcome = await agent.visit(pending.url.pathname + pending.url.search);
      assert.equal(outcome.response.status, 200);
      assert.equal(outcome.response.headers.get('cache-control'), 'no-store');
      assert.match(outcome.response.headers.get('content-security-policy')!, /script-src 'self'/);
      assert.match(outcome.html, new RegExp(`<form method="post" action="${REDIRECT_URI}" id="form-post">`));
      assert.match(outcome.html, /<script src="\/static\/form-post.js"><\/script>/);
      assert.doesNotMatch(outcome.html, /<script>|<script [^s]/, 'no inline script');
      assert.match(outcome.html, /<button type="submit">Continue<\/button>/, 'a button for browsers without scripts');
      const fields = formFields(outcome.html, REDIRECT_URI);
      assert.deepEqual([...fields.keys()].sort(), ['code', 'iss', 'state']);
      const callback = new URL(REDIRECT_URI);
      callback.search = fields.toString();
      const tokens = await client.authorizationCodeGrant(rp, callback, {
        pkceCodeVerifier: pending.verifier,
        expectedNonce: pending.nonce,
        expectedState: pending.state,
      });
      assert.ok(tokens.id_token);

      const denied = await authorization(rp, { response_mode: 'form_post', request: 'x' });
      const error = formFields((await agent.visit(denied.url.pathname + denied.url.search)).html, REDIRECT_URI);
      assert.deepEqual(
        [error.get('error'), error.get('error_description'), error.get('state'), error.get('iss')],
        ['request_not_supported', "the 'request' parameter is not supported", denied.state, server.url],
      );
    });
  });
}
