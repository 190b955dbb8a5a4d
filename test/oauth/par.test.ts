/**
 * Pushed authorization requests (SPEC §4.14, RFC 9126) and the FAPI 2.0 profile, driven by
 * oauth4webapi's and openid-client's PAR support, unmodified.
 */
import assert from 'node:assert/strict';
import type { webcrypto } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import * as oauth from 'oauth4webapi';
import * as oidc from 'openid-client';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { jwksOf, signingKey } from '../support/jwks-server.ts';
import { authorizationUrl, discover, insecure, postForm, type App } from '../support/oauth-client.ts';
import { startWithApp, type Setup } from '../support/token-checks.ts';
import { UserAgent } from '../support/user-agent.ts';

type CryptoKeyPair = webcrypto.CryptoKeyPair;
const newKeys = () => crypto.subtle.generateKey({ name: 'ECDSA', namedCurve: 'P-256' }, false, ['sign', 'verify']) as Promise<CryptoKeyPair>;

interface Pushed {
  requestUri: string;
  expiresIn: number;
  verifier: string;
  state: string;
}

/** Pushes an authorization request with oauth4webapi: the one the tests would send the browser with (PKCE, a state), `params` on top. */
async function push(app: App, params: Record<string, string> = {}, DPoP?: oauth.DPoPHandle): Promise<Pushed> {
  const { url, state, verifier } = await authorizationUrl(app, params);
  const response = await oauth.pushedAuthorizationRequest(app.as, app.client, app.auth, url.searchParams, { ...insecure, DPoP });
  const pushed = await oauth.processPushedAuthorizationResponse(app.as, app.client, response);
  return { requestUri: pushed.request_uri, expiresIn: pushed.expires_in, verifier, state };
}

/** The authorization endpoint URL that carries only the client and the pushed request. */
function byReference(app: App, requestUri: string, extra: Record<string, string> = {}): URL {
  const url = new URL(app.as.authorization_endpoint!);
  url.search = new URLSearchParams({ client_id: app.client.client_id, request_uri: requestUri, ...extra }).toString();
  return url;
}

async function exchange(app: App, pushed: Pushed, redirect: URL, DPoP?: oauth.DPoPHandle): Promise<Response> {
  const callback = oauth.validateAuthResponse(app.as, app.client, redirect, pushed.state);
  return oauth.authorizationCodeGrantRequest(app.as, app.client, app.auth, callback, app.redirectUri, pushed.verifier, { ...insecure, DPoP });
}

async function errorOf(response: Response): Promise<[number, string]> {
  return [response.status, ((await response.json()) as { error: string }).error];
}

for (const backend of BACKENDS) {
  describe(`pushed authorization requests (${backend.name})`, backendOptions(backend), () => {
    let setup: Setup;
    before(async () => {
      setup = await startWithApp(backend);
    });
    after(() => setup?.server.close());

    test('the metadata names the endpoint; oauth4webapi pushes, the browser brings the request_uri, the code is exchanged', async () => {
      assert.equal(setup.app.as.pushed_authorization_request_endpoint, `${setup.server.url}/oauth/par`);
      assert.equal(setup.app.as.require_pushed_authorization_requests, false);
      const pushed = await push(setup.app, { scope: 'annotation:read' });
      assert.match(pushed.requestUri, /^urn:ietf:params:oauth:request_uri:[A-Za-z0-9_-]{43}$/);
      assert.equal(pushed.expiresIn, 60);
      const outcome = await setup.agent.authorize(byReference(setup.app, pushed.requestUri));
      const tokens = await oauth.processAuthorizationCodeResponse(setup.app.as, setup.app.client, await exchange(setup.app, pushed, outcome.redirect!));
      assert.equal(tokens.scope, 'annotation:read');
    });

    test('a pushed request answers once, for its own client, within 60 s; parameters beside it are ignored', async () => {
      const pushed = await push(setup.app, { scope: 'annotation:read' });
      // Another redirect URL and scope in the front channel change nothing.
      const tampered = byReference(setup.app, pushed.requestUri, { redirect_uri: 'https://evil.example/cb', scope: 'annotation:write' });
      const outcome = await setup.agent.authorize(tampered);
      assert.ok(outcome.redirect!.href.startsWith(setup.app.redirectUri), outcome.redirect!.href);
      const tokens = await oauth.processAuthorizationCodeResponse(setup.app.as, setup.app.client, await exchange(setup.app, pushed, outcome.redirect!));
      assert.equal(tokens.scope, 'annotation:read');

      const again = await setup.agent.authorize(byReference(setup.app, pushed.requestUri));
      assert.deepEqual([again.response.status, again.redirect], [400, null], 'used twice');

      const other = await discover(setup.server, (await setup.server.createClient({ name: 'Other app' })).client.id);
      const theirs = await push(setup.app);
      const stolen = await setup.agent.authorize(byReference(other, theirs.requestUri));
      assert.deepEqual([stolen.response.status, stolen.redirect], [400, null], 'by another client');
      // ...which did not use it up for its own client.
      assert.ok((await setup.agent.authorize(byReference(setup.app, theirs.requestUri))).redirect);

      const late = await push(setup.app);
      setup.server.advance(61);
      try {
        const expired = await setup.agent.authorize(byReference(setup.app, late.requestUri));
        assert.deepEqual([expired.response.status, expired.redirect], [400, null], 'after 60 s');
      } finally {
        setup.server.advance(-61);
      }
    });

    test('every check that needs no person happens at push time, answered as at the token endpoint', async () => {
      const { server, app } = setup;
      const base = {
        client_id: app.client.client_id,
        response_type: 'code',
        redirect_uri: app.redirectUri,
        code_challenge: 'x'.repeat(43),
        code_challenge_method: 'S256',
      };
      const cases: [Record<string, string>, number, string][] = [
        [{ redirect_uri: 'https://evil.example/cb' }, 400, 'invalid_request'],
        [{ scope: 'no:such-scope' }, 400, 'invalid_scope'],
        [{ resource: 'https://unknown.example/api' }, 400, 'invalid_target'],
        [{ code_challenge_method: 'plain' }, 400, 'invalid_request'],
        [{ response_type: 'token' }, 400, 'unsupported_response_type'],
        [{ prompt: 'sometimes' }, 400, 'invalid_request'],
        [{ request_uri: 'urn:ietf:params:oauth:request_uri:abc' }, 400, 'invalid_request'],
        [{ client_id: 'd6b7b3f0-0000-4000-8000-000000000000' }, 401, 'invalid_client'],
      ];
      for (const [change, status, error] of cases) {
        const response = await postForm(server, '/oauth/par', { ...base, ...change });
        assert.deepEqual(await errorOf(response), [status, error], JSON.stringify(change));
      }
      const confidential = await server.createClient({ confidential: true });
      assert.deepEqual(
        await errorOf(await postForm(server, '/oauth/par', { ...base, client_id: confidential.client.id })),
        [401, 'invalid_client'],
        'no secret',
      );
    });

    test('prompt=login pushed: one login, then the code (no loop)', async () => {
      const fresh = new UserAgent(setup.server.url);
      // Logged in already (and the application approved) before the request that asks for a new login.
      assert.ok((await fresh.authorize(byReference(setup.app, (await push(setup.app)).requestUri))).redirect);
      const pushed = await push(setup.app, { prompt: 'login' });
      const outcome = await fresh.authorize(byReference(setup.app, pushed.requestUri));
      assert.ok(outcome.redirect, 'logged in again, then answered');
      assert.equal(new URL(outcome.redirect!).searchParams.get('state'), pushed.state);
    });

    test("the login page on the way shows the pushed login_hint, not the URL's", async () => {
      const pushed = await push(setup.app, { login_hint: 'alice' });
      const page = await new UserAgent(setup.server.url).visit(byReference(setup.app, pushed.requestUri, { login_hint: 'mallory' }).href);
      const login = page.redirect === null ? page : await new UserAgent(setup.server.url).visit(page.redirect.pathname + page.redirect.search);
      assert.match(login.html, /name="username"[^>]*value="alice"|value="alice"[^>]*name="username"/);
      assert.doesNotMatch(login.html, /value="mallory"/);
    });

    test('a DPoP proof at push time binds the code to that key', async () => {
      const keys = await newKeys();
      const DPoP = oauth.DPoP(setup.app.client, keys);
      const pushed = await push(setup.app, {}, DPoP);
      const outcome = await setup.agent.authorize(byReference(setup.app, pushed.requestUri));
      assert.deepEqual(await errorOf(await exchange(setup.app, pushed, outcome.redirect!, oauth.DPoP(setup.app.client, await newKeys()))), [
        400,
        'invalid_dpop_proof',
      ]);
      const tokens = await oauth.processAuthorizationCodeResponse(setup.app.as, setup.app.client, await exchange(setup.app, pushed, outcome.redirect!, DPoP));
      assert.equal(tokens.token_type, 'dpop');
    });

    test('openid-client builds the authorization URL with PAR', async () => {
      const config = await oidc.discovery(new URL(setup.server.url), setup.app.client.client_id, undefined, oidc.None(), {
        execute: [oidc.allowInsecureRequests],
      });
      const verifier = oidc.randomPKCECodeVerifier();
      const url = await oidc.buildAuthorizationUrlWithPAR(config, {
        redirect_uri: setup.app.redirectUri,
        scope: 'annotation:read',
        code_challenge: await oidc.calculatePKCECodeChallenge(verifier),
        code_challenge_method: 'S256',
      });
      assert.deepEqual([...url.searchParams.keys()].sort(), ['client_id', 'request_uri']);
      const outcome = await setup.agent.authorize(url);
      const tokens = await oidc.authorizationCodeGrant(config, new URL(outcome.redirect!), { pkceCodeVerifier: verifier, idTokenExpected: false });
      assert.equal(tokens.scope, 'annotation:read');
    });

    test('--require-par refuses a request that was not pushed, back to the client; the same for every client with REQUIRE_PAR', async () => {
      const registered = await setup.server.createClient({ name: 'Pushes', requirePar: true });
      const strict = await discover(setup.server, registered.client.id);
      const { url: direct } = await authorizationUrl(strict);
      const refused = await setup.agent.authorize(direct);
      assert.ok(refused.redirect, `${refused.response.status} ${refused.html.slice(0, 2000)}`);
      assert.equal(new URL(refused.redirect!).searchParams.get('error'), 'invalid_request');
      const pushed = await push(strict);
      assert.ok((await setup.agent.authorize(byReference(strict, pushed.requestUri))).redirect!.searchParams.has('code'));

      const everyone = await startWithApp(backend, { REQUIRE_PAR: 'true' });
      try {
        assert.equal(everyone.app.as.require_pushed_authorization_requests, true);
        const { url } = await authorizationUrl(everyone.app);
        assert.equal(new URL((await everyone.agent.authorize(url)).redirect!).searchParams.get('error'), 'invalid_request');
      } finally {
        await everyone.server.close();
      }
    });

    test('--profile fapi2: private_key_jwt only; PAR, PKCE and DPoP required; codes live 60 s', async () => {
      await assert.rejects(setup.server.createClient({ name: 'Not FAPI', profile: 'fapi2', confidential: true }), /private_key_jwt/);
      const key = await signingKey('ES256', 'fapi');
      const registered = await setup.server.createClient({ name: 'Bank', profile: 'fapi2', confidential: true, jwks: JSON.stringify(jwksOf(key)) });
      const bank: App = { ...(await discover(setup.server, registered.client.id)), auth: oauth.PrivateKeyJwt({ key: key.privateKey, kid: key.kid }) };

      const { url: direct } = await authorizationUrl(bank);
      assert.equal(new URL((await setup.agent.authorize(direct)).redirect!).searchParams.get('error'), 'invalid_request', 'PAR required');

      const body = { client_id: registered.client.id, response_type: 'code', redirect_uri: bank.redirectUri };
      const pkceless = await oauth.pushedAuthorizationRequest(bank.as, bank.client, bank.auth, new URLSearchParams(body), insecure);
      assert.deepEqual(await errorOf(pkceless), [400, 'invalid_request'], 'PKCE required');
      const withPkce = { ...body, code_challenge: 'x'.repeat(43), code_challenge_method: 'S256' };
      const { redirect_uri: _, ...unnamed } = withPkce;
      const redirectless = await oauth.pushedAuthorizationRequest(bank.as, bank.client, bank.auth, new URLSearchParams(unnamed), insecure);
      assert.deepEqual(await errorOf(redirectless), [400, 'invalid_request'], 'redirect_uri required');
      // Its client assertions name the issuer alone as their audience, not an endpoint's URL.
      const atEndpoint = oauth.PrivateKeyJwt(
        { key: key.privateKey, kid: key.kid },
        {
          [oauth.modifyAssertion]: (_header, payload) => {
            payload.aud = bank.as.pushed_authorization_request_endpoint;
          },
        },
      );
      const endpointAudience = await oauth.pushedAuthorizationRequest(bank.as, bank.client, atEndpoint, new URLSearchParams(withPkce), insecure);
      assert.deepEqual(await errorOf(endpointAudience), [401, 'invalid_client'], 'aud: the endpoint URL');

      const keys = await newKeys();
      const withoutProof = await push(bank);
      const code = await setup.agent.authorize(byReference(bank, withoutProof.requestUri));
      assert.deepEqual(await errorOf(await exchange(bank, withoutProof, code.redirect!)), [400, 'invalid_dpop_proof'], 'DPoP required');

      const DPoP = oauth.DPoP(bank.client, keys);
      const late = await push(bank, {}, DPoP);
      const lateCode = await setup.agent.authorize(byReference(bank, late.requestUri));
      setup.server.advance(61);
      try {
        // The client's clock moves with the server's, so that its assertion and proof are on time.
        const later: App = { ...bank, client: { ...bank.client, [oauth.clockSkew]: 61 } };
        const lateExchange = await exchange(later, late, lateCode.redirect!, oauth.DPoP(later.client, keys));
        assert.deepEqual(await errorOf(lateExchange), [400, 'invalid_grant'], 'a code of 61 s');
      } finally {
        setup.server.advance(-61);
      }

      const pushed = await push(bank, {}, DPoP);
      const outcome = await setup.agent.authorize(byReference(bank, pushed.requestUri));
      const tokens = await oauth.processAuthorizationCodeResponse(bank.as, bank.client, await exchange(bank, pushed, outcome.redirect!, DPoP));
      assert.equal(tokens.token_type, 'dpop');
    });
  });
}

describe('clients that register themselves saying require_pushed_authorization_requests and dpop_bound_access_tokens', () => {
  let setup: Setup;
  before(async () => {
    setup = await startWithApp(BACKENDS[0]!, { DYNAMIC_CLIENT_REGISTRATION: 'true' });
  });
  after(() => setup?.server.close());

  test('get both rules: a request not pushed is refused, a pushed one answered, and its code exchanged only with a proof', async () => {
    const registered = await oauth.processDynamicClientRegistrationResponse(
      await oauth.dynamicClientRegistrationRequest(
        setup.app.as,
        {
          redirect_uris: [setup.app.redirectUri],
          token_endpoint_auth_method: 'none',
          require_pushed_authorization_requests: true,
          dpop_bound_access_tokens: true,
        },
        insecure,
      ),
    );
    assert.equal(registered.require_pushed_authorization_requests, true);
    assert.equal(registered.dpop_bound_access_tokens, true);
    const app = await discover(setup.server, registered.client_id);
    const { url: direct } = await authorizationUrl(app);
    assert.equal((await setup.agent.authorize(direct)).redirect!.searchParams.get('error'), 'invalid_request');
    const pushed = await push(app);
    const outcome = await setup.agent.authorize(byReference(app, pushed.requestUri));
    assert.deepEqual(await errorOf(await exchange(app, pushed, outcome.redirect!)), [400, 'invalid_dpop_proof']);
    const DPoP = oauth.DPoP(app.client, await newKeys());
    const tokens = await oauth.processAuthorizationCodeResponse(app.as, app.client, await exchange(app, pushed, outcome.redirect!, DPoP));
    assert.equal(tokens.token_type, 'dpop');
  });
});
