/**
 * DPoP (SPEC §4.14, RFC 9449): tokens bound to a key the client holds. The client side is
 * oauth4webapi's DPoP support, unmodified; hand-made proofs (attacks) come from the `dpop`
 * package, or from jose where a proof must break a rule that package will not break.
 */
import assert from 'node:assert/strict';
import type { webcrypto } from 'node:crypto';
import { readFile, rm, writeFile } from 'node:fs/promises';
import { after, before, describe, test } from 'node:test';
import { SignJWT, calculateJwkThumbprint, decodeJwt, exportJWK, generateKeyPair as joseKeyPair, type JWTPayload } from 'jose';
import { generateKeyPair, generateProof } from 'dpop';
import * as oauth from 'oauth4webapi';
import * as oidc from 'openid-client';
import { COMMAND_LINE } from '../../src/audit.ts';
import { changeTokenSettings, findResourceNamed } from '../../src/clients/resources.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { authorizationUrl, discover, insecure, postForm, type App } from '../support/oauth-client.ts';
import { registerResourceServer } from '../support/resources.ts';
import { startWithApp, type Setup } from '../support/token-checks.ts';
import { answerAtDevicePage, deviceApp, requestCodes } from '../support/device.ts';
import { serveMetadataDocument, type MetadataDocument } from '../support/metadata-document.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';
import { connect } from '../support/ws-client.ts';

type CryptoKeyPair = webcrypto.CryptoKeyPair;
const ES256 = { name: 'ECDSA', namedCurve: 'P-256' } as const;
const newKeys = () => crypto.subtle.generateKey(ES256, false, ['sign', 'verify']) as Promise<CryptoKeyPair>;

/** The RFC 7638 thumbprint of a key pair's public key, as `cnf.jkt` and `dpop_jkt` name it. */
async function thumbprint(keys: CryptoKeyPair): Promise<string> {
  return calculateJwkThumbprint(await exportJWK(keys.publicKey));
}

/** Authorize as alice and exchange the code with oauth4webapi, proving `keys` (or no proof). */
async function dpopTokens(setup: Setup, keys: CryptoKeyPair | null, params: Record<string, string> = {}): Promise<oauth.TokenEndpointResponse> {
  const { app, agent } = setup;
  const authorization = await authorizationUrl(app, params);
  const outcome = await agent.authorize(authorization.url);
  const callback = oauth.validateAuthResponse(app.as, app.client, outcome.redirect!, authorization.state);
  const DPoP = keys === null ? undefined : oauth.DPoP(app.client, keys);
  const response = await oauth.authorizationCodeGrantRequest(app.as, app.client, app.auth, callback, app.redirectUri, authorization.verifier, {
    ...insecure,
    DPoP,
  });
  return oauth.processAuthorizationCodeResponse(app.as, app.client, response);
}

/** The profile through oauth4webapi's protected-resource request: `Authorization: DPoP` with a proof by `keys`. */
function dpopProfile(setup: Setup, token: string, keys: CryptoKeyPair): Promise<Response> {
  return oauth.protectedResourceRequest(token, 'GET', new URL('/api/profile', setup.server.url), undefined, undefined, {
    ...insecure,
    DPoP: oauth.DPoP(setup.app.client, keys),
  });
}

function refreshWith(app: App, token: string, keys: CryptoKeyPair | null): Promise<Response> {
  return oauth.refreshTokenGrantRequest(app.as, app.client, app.auth, token, { ...insecure, DPoP: keys === null ? undefined : oauth.DPoP(app.client, keys) });
}

/** The resource server code of docs/integration.md §11, loaded as the docs print it. */
async function documentedChecker(): Promise<{ dpopChecker: (options: { issuer: string; audience: string }) => (request: object) => Promise<JWTPayload> }> {
  const docs = await readFile(new URL('../../docs/integration.md', import.meta.url), 'utf8');
  const code = /## 11\. DPoP-bound tokens at a resource server[\s\S]*?```js\n([\s\S]*?)```/.exec(docs)![1]!;
  // Beside the tests, so that it imports the project's jose.
  const file = new URL(`./dpop-checker-${process.pid}.mjs`, import.meta.url);
  await writeFile(file, code);
  try {
    return await import(file.href);
  } finally {
    await rm(file);
  }
}

async function errorOf(response: Response): Promise<[number, string]> {
  return [response.status, ((await response.json()) as { error: string }).error];
}

for (const backend of BACKENDS) {
  describe(`DPoP (${backend.name})`, backendOptions(backend), () => {
    let setup: Setup;
    let tokenUrl: string;
    before(async () => {
      setup = await startWithApp(backend);
      tokenUrl = setup.app.as.token_endpoint!;
    });
    after(() => setup?.server.close());

    test('the metadata lists the proof algorithms', () => {
      assert.deepEqual(setup.app.as.dpop_signing_alg_values_supported, ['ES256', 'RS256', 'PS256', 'EdDSA']);
    });

    test('a code exchanged with a proof gives DPoP tokens: the API takes them with a proof by that key, never as Bearer or by another key', async () => {
      const keys = await newKeys();
      const tokens = await dpopTokens(setup, keys);
      assert.equal(tokens.token_type, 'dpop');
      const answered = await dpopProfile(setup, tokens.access_token, keys);
      assert.equal(answered.status, 200);

      const asBearer = await fetch(new URL('/api/profile', setup.server.url), { headers: { authorization: `Bearer ${tokens.access_token}` } });
      assert.equal(asBearer.status, 401);
      assert.match(asBearer.headers.get('www-authenticate')!, /^DPoP algs="ES256 RS256 PS256 EdDSA", error="invalid_token"/);

      // oauth4webapi reads the challenge itself: a DPoP one naming the proof.
      await assert.rejects(dpopProfile(setup, tokens.access_token, await newKeys()), (error: unknown) => {
        assert.ok(error instanceof oauth.WWWAuthenticateChallengeError);
        assert.equal(error.status, 401);
        assert.deepEqual([error.cause[0]!.scheme, error.cause[0]!.parameters.error], ['dpop', 'invalid_dpop_proof']);
        return true;
      });

      // A proof for another token (its `ath` names that one) does not open this one.
      const other = await dpopTokens(setup, keys);
      const proof = await generateProof(
        { privateKey: keys.privateKey, publicKey: keys.publicKey },
        `${setup.server.url}/api/profile`,
        'GET',
        undefined,
        other.access_token,
      );
      const wrongAth = await fetch(new URL('/api/profile', setup.server.url), { headers: { authorization: `DPoP ${tokens.access_token}`, dpop: proof } });
      assert.equal(wrongAth.status, 401);
      assert.match(
        wrongAth.headers.get('www-authenticate')!,
        /error="invalid_dpop_proof", error_description="the DPoP proof's 'ath' must be the hash of the access token it is sent with"/,
      );
    });

    test('a bound token short of the scope gets insufficient_scope under the DPoP scheme', async () => {
      const keys = await newKeys();
      const tokens = await dpopTokens(setup, keys, { scope: 'annotation:write' });
      await assert.rejects(dpopProfile(setup, tokens.access_token, keys), (error: unknown) => {
        assert.ok(error instanceof oauth.WWWAuthenticateChallengeError);
        assert.equal(error.status, 403);
        const [challenge] = error.cause;
        assert.deepEqual([challenge!.scheme, challenge!.parameters.error, challenge!.parameters.scope], ['dpop', 'insufficient_scope', 'annotation:read']);
        return true;
      });
    });

    test("a public client's refresh token is bound: a refresh needs a proof by the same key, and a thief's attempt rotates nothing", async () => {
      const keys = await newKeys();
      const tokens = await dpopTokens(setup, keys);
      assert.deepEqual(await errorOf(await refreshWith(setup.app, tokens.refresh_token!, null)), [400, 'invalid_dpop_proof']);
      assert.deepEqual(await errorOf(await refreshWith(setup.app, tokens.refresh_token!, await newKeys())), [400, 'invalid_dpop_proof']);
      const refreshed = await oauth.processRefreshTokenResponse(setup.app.as, setup.app.client, await refreshWith(setup.app, tokens.refresh_token!, keys));
      assert.equal(refreshed.token_type, 'dpop');
      assert.equal((await dpopProfile(setup, refreshed.access_token, keys)).status, 200);
      // The successor keeps the binding.
      assert.deepEqual(await errorOf(await refreshWith(setup.app, refreshed.refresh_token!, await newKeys())), [400, 'invalid_dpop_proof']);
    });

    test("a public client's unbound refresh token is bound by the first refresh that proves a key", async () => {
      const tokens = await dpopTokens(setup, null);
      assert.equal(tokens.token_type, 'bearer');
      const keys = await newKeys();
      const refreshed = await oauth.processRefreshTokenResponse(setup.app.as, setup.app.client, await refreshWith(setup.app, tokens.refresh_token!, keys));
      assert.equal(refreshed.token_type, 'dpop');
      assert.deepEqual(await errorOf(await refreshWith(setup.app, refreshed.refresh_token!, null)), [400, 'invalid_dpop_proof']);
      assert.equal((await refreshWith(setup.app, refreshed.refresh_token!, keys)).status, 200);
    });

    test("a confidential client's refresh token is not bound (RFC 9449 §5): it refreshes without a proof, to a bearer token", async () => {
      const registered = await setup.server.createClient({ confidential: true });
      const confidential: Setup = {
        ...setup,
        app: await discover(setup.server, registered.client.id, { secret: registered.secret }),
        secret: registered.secret,
      };
      const keys = await newKeys();
      const tokens = await dpopTokens(confidential, keys);
      assert.equal(tokens.token_type, 'dpop');
      const refreshed = await oauth.processRefreshTokenResponse(
        confidential.app.as,
        confidential.app.client,
        await refreshWith(confidential.app, tokens.refresh_token!, null),
      );
      assert.equal(refreshed.token_type, 'bearer');
      const profile = await fetch(new URL('/api/profile', setup.server.url), { headers: { authorization: `Bearer ${refreshed.access_token}` } });
      assert.equal(profile.status, 200);
    });

    test('a proof is accepted once: sent again it is refused, and of 20 parallel requests with one proof exactly one gets a token', async () => {
      const registered = await setup.server.createClient({ grantType: 'client_credentials', redirectUris: [], confidential: true });
      const basic = `Basic ${btoa(`${registered.client.id}:${encodeURIComponent(registered.secret!)}`)}`;
      const keys = await generateKeyPair('ES256');
      const proof = await generateProof(keys, tokenUrl, 'POST');
      const request = () => postForm(setup.server, '/api/token', { grant_type: 'client_credentials' }, { authorization: basic, dpop: proof });
      const statuses = await Promise.all(Array.from({ length: 20 }, request));
      assert.deepEqual(statuses.map((r) => r.status).sort(), [200, ...Array<number>(19).fill(400)]);
      const refused = statuses.find((r) => r.status === 400)!;
      assert.deepEqual(await refused.json(), {
        error: 'invalid_dpop_proof',
        error_description: 'the DPoP proof has been used before: make a new one for each request',
      });
      assert.deepEqual(await errorOf(await request()), [400, 'invalid_dpop_proof']);
    });

    test('proofs for another request, with a private key, of the wrong type or algorithm, or two at once, are refused and change nothing', async () => {
      const registered = await setup.server.createClient({ grantType: 'client_credentials', redirectUris: [], confidential: true });
      const basic = `Basic ${btoa(`${registered.client.id}:${encodeURIComponent(registered.secret!)}`)}`;
      const keys = await generateKeyPair('ES256');
      const send = (dpop: string | string[]) => {
        const headers = new Headers({ authorization: basic, 'content-type': 'application/x-www-form-urlencoded' });
        for (const value of [dpop].flat()) headers.append('dpop', value);
        return fetch(tokenUrl, { method: 'POST', headers, body: 'grant_type=client_credentials' });
      };
      const exportable = await joseKeyPair('ES256', { extractable: true });
      const publicJwk = await exportJWK(exportable.publicKey);
      const handMade = (header: Record<string, unknown>, claims: Record<string, unknown> = {}) =>
        new SignJWT({ htm: 'POST', htu: tokenUrl, jti: crypto.randomUUID(), iat: Math.floor(Date.now() / 1000), ...claims })
          .setProtectedHeader({ alg: 'ES256', typ: 'dpop+jwt', jwk: publicJwk, ...header })
          .sign(exportable.privateKey);
      const cases: [string, string | string[], RegExp][] = [
        ['htm GET', await generateProof(keys, tokenUrl, 'GET'), /'htm' must be 'POST'/],
        ['htu of another endpoint', await generateProof(keys, `${setup.server.url}/oauth/revoke`, 'POST'), /'htu' must be/],
        ['htu on another host', await generateProof(keys, tokenUrl.replace('127.0.0.1', 'localhost'), 'POST'), /'htu' must be/],
        ['a private key in the header', await handMade({ jwk: await exportJWK(exportable.privateKey) }), /must be a public key, never a private one/],
        ['typ JWT', await handMade({ typ: 'JWT' }), /'typ' must be 'dpop\+jwt'/],
        ['an old iat', await handMade({}, { iat: Math.floor(Date.now() / 1000) - 120 }), /'iat' must be within 60 seconds/],
        ['no jti', await handMade({}, { jti: undefined }), /lacks the 'jti' claim/],
        [
          'a key other than the one in the header',
          await handMade({ jwk: await exportJWK((await joseKeyPair('ES256', { extractable: true })).publicKey) }),
          /signature/,
        ],
        [
          'HS256',
          await new SignJWT({ htm: 'POST', htu: tokenUrl, jti: 'x', iat: Math.floor(Date.now() / 1000) })
            .setProtectedHeader({ alg: 'HS256', typ: 'dpop+jwt' })
            .sign(new Uint8Array(32)),
          /signed with one of ES256/,
        ],
        ['not a JWT', 'hello', /not a JWT/],
        ['two proofs', [await generateProof(keys, tokenUrl, 'POST'), await generateProof(keys, tokenUrl, 'POST')], /exactly one DPoP proof/],
      ];
      for (const [name, proof, description] of cases) {
        const response = await send(proof);
        const body = (await response.json()) as { error: string; error_description: string };
        assert.equal(response.status, 400, name);
        assert.equal(body.error, 'invalid_dpop_proof', name);
        assert.match(body.error_description, description, name);
      }
      // A refused proof is not used up: its jti can still be presented in a valid proof.
      const answered = await send(await handMade({}, { jti: 'reused-after-refusal' }));
      assert.equal(answered.status, 200);
      // That key is known now (its import is kept): a proof with the very same header, signed by another key, is still refused.
      const forger = await joseKeyPair('ES256');
      const forged = await new SignJWT({ htm: 'POST', htu: tokenUrl, jti: crypto.randomUUID(), iat: Math.floor(Date.now() / 1000) })
        .setProtectedHeader({ alg: 'ES256', typ: 'dpop+jwt', jwk: publicJwk })
        .sign(forger.privateKey);
      assert.equal(forged.split('.')[0], (await handMade({})).split('.')[0], 'the same header, byte for byte');
      const refused = await send(forged);
      assert.deepEqual([refused.status, ((await refused.json()) as { error: string }).error], [400, 'invalid_dpop_proof']);
    });

    test('dpop_jkt at authorize binds the code: an exchange proving another key, or none, is refused without using the code up', async () => {
      const keys = await newKeys();
      const { app, agent } = setup;
      const authorization = await authorizationUrl(app, { dpop_jkt: await thumbprint(keys) });
      const callback = oauth.validateAuthResponse(app.as, app.client, (await agent.authorize(authorization.url)).redirect!, authorization.state);
      const exchange = (proving: CryptoKeyPair | null) =>
        oauth.authorizationCodeGrantRequest(app.as, app.client, app.auth, callback, app.redirectUri, authorization.verifier, {
          ...insecure,
          DPoP: proving === null ? undefined : oauth.DPoP(app.client, proving),
        });
      assert.deepEqual(await errorOf(await exchange(await newKeys())), [400, 'invalid_dpop_proof']);
      assert.deepEqual(await errorOf(await exchange(null)), [400, 'invalid_dpop_proof']);
      const tokens = await oauth.processAuthorizationCodeResponse(app.as, app.client, await exchange(keys));
      assert.equal(tokens.token_type, 'dpop');

      const malformed = await agent.authorize((await authorizationUrl(app, { dpop_jkt: 'not-a-thumbprint' })).url);
      assert.equal(new URL(malformed.redirect!).searchParams.get('error'), 'invalid_request');
    });

    test('a client with --require-dpop gets no token without a proof', async () => {
      const registered = await setup.server.createClient({ requireDpop: true });
      const strict: Setup = { ...setup, app: await discover(setup.server, registered.client.id) };
      await assert.rejects(dpopTokens(strict, null), (error: unknown) => error instanceof oauth.ResponseBodyError && error.error === 'invalid_dpop_proof');
      assert.equal((await dpopTokens(strict, await newKeys())).token_type, 'dpop');
    });

    test('a resource server with --require-dpop gets only bound tokens; its JWTs and introspection say the key (cnf.jkt)', async () => {
      const uri = `https://dpop-${backend.name.toLowerCase()}.example/api`;
      const resource = await registerResourceServer(setup.server, uri, [{ name: `dpop-${backend.name}:read`, description: 'Read' }]);
      const ctx = setup.server.app.gatehouse;
      await changeTokenSettings(ctx, (await findResourceNamed(ctx, uri))!, { tokenFormat: 'jwt', requireDpop: true }, COMMAND_LINE);
      const registered = await setup.server.createClient({
        grantType: 'client_credentials',
        redirectUris: [],
        confidential: true,
        scope: `dpop-${backend.name}:read`,
      });
      const job = await discover(setup.server, registered.client.id, { secret: registered.secret });
      const params = new URLSearchParams({ resource: uri });
      const request = (keys: CryptoKeyPair | null) =>
        oauth.clientCredentialsGrantRequest(job.as, job.client, job.auth, params, {
          ...insecure,
          DPoP: keys === null ? undefined : oauth.DPoP(job.client, keys),
        });
      assert.deepEqual(await errorOf(await request(null)), [400, 'invalid_dpop_proof']);

      const keys = await newKeys();
      const tokens = await oauth.processClientCredentialsResponse(job.as, job.client, await request(keys));
      assert.equal(tokens.token_type, 'dpop');
      assert.deepEqual(decodeJwt(tokens.access_token).cnf, { jkt: await thumbprint(keys) });
      const { introspector } = resource;
      const introspected = await oauth.processIntrospectionResponse(
        introspector.as,
        introspector.client,
        await oauth.introspectionRequest(introspector.as, introspector.client, introspector.auth, tokens.access_token, insecure),
      );
      assert.equal(introspected.token_type, 'DPoP');
      assert.deepEqual(introspected.cnf, { jkt: await thumbprint(keys) });

      // docs/integration.md's resource server, as printed there, accepts the token with a proof by its key, once.
      const { dpopChecker } = await documentedChecker();
      const check = dpopChecker({ issuer: setup.server.url, audience: uri });
      const called = `${uri}/files?page=2`;
      const proof = await generateProof({ privateKey: keys.privateKey, publicKey: keys.publicKey }, `${uri}/files`, 'GET', undefined, tokens.access_token);
      const call = { method: 'GET', url: called, authorization: `DPoP ${tokens.access_token}`, dpop: proof };
      assert.equal((await check(call)).client_id, registered.client.id);
      await assert.rejects(check(call), /used before/);
      const thief = await generateProof(await generateKeyPair('ES256'), `${uri}/files`, 'GET', undefined, tokens.access_token);
      await assert.rejects(check({ ...call, dpop: thief }), /not by the key the token is bound to/);
    });

    test('the device grant binds its tokens too: a public device client polls with a proof, and refreshes only with that key', async () => {
      const device = await deviceApp(setup.server);
      const codes = await requestCodes(device);
      // alice's browser is logged in from the tests before.
      await answerAtDevicePage(setup.agent, codes, 'approve');
      // The interval applies before the first poll (RFC 8628 §3.5): the server's clock moves past it.
      setup.server.advance(6);
      try {
        const keys = await newKeys();
        const DPoP = oauth.DPoP(device.client, keys);
        const polled = await oauth.deviceCodeGrantRequest(device.as, device.client, device.auth, codes.device_code, { ...insecure, DPoP });
        const tokens = await oauth.processDeviceCodeResponse(device.as, device.client, polled);
        assert.equal(tokens.token_type, 'dpop');
        assert.deepEqual(await errorOf(await refreshWith(device, tokens.refresh_token!, await newKeys())), [400, 'invalid_dpop_proof']);
        assert.equal((await refreshWith(device, tokens.refresh_token!, keys)).status, 200);
      } finally {
        setup.server.advance(-6);
      }
    });

    test("openid-client's DPoP: the code grant, a refresh and the API with one handle", async () => {
      const config = await oidc.discovery(new URL(setup.server.url), setup.app.client.client_id, undefined, oidc.None(), {
        execute: [oidc.allowInsecureRequests],
      });
      const DPoP = oidc.getDPoPHandle(config, await oidc.randomDPoPKeyPair('ES256'));
      const verifier = oidc.randomPKCECodeVerifier();
      const state = oidc.randomState();
      const url = oidc.buildAuthorizationUrl(config, {
        redirect_uri: setup.app.redirectUri,
        state,
        code_challenge: await oidc.calculatePKCECodeChallenge(verifier),
        code_challenge_method: 'S256',
      });
      const outcome = await setup.agent.authorize(url);
      const tokens = await oidc.authorizationCodeGrant(
        config,
        outcome.redirect!,
        { pkceCodeVerifier: verifier, expectedState: state, idTokenExpected: false },
        undefined,
        {
          DPoP,
        },
      );
      assert.equal(tokens.token_type, 'dpop');
      const refreshed = await oidc.refreshTokenGrant(config, tokens.refresh_token!, undefined, { DPoP });
      const profile = await oidc.fetchProtectedResource(
        config,
        refreshed.access_token,
        new URL('/api/profile', setup.server.url),
        'GET',
        undefined,
        undefined,
        {
          DPoP,
        },
      );
      assert.equal(profile.status, 200);
    });

    test('the WebSocket opens for a bound token with a proof, and refuses it as Bearer or in the query', async () => {
      const keys = await generateKeyPair('ES256');
      const tokens = await dpopTokens(setup, keys as CryptoKeyPair);
      const wsUrl = `${setup.server.url.replace(/^http/, 'ws')}/ws`;
      const proof = await generateProof(keys, wsUrl, 'GET', undefined, tokens.access_token);
      const opened = await connect(setup.server.url, tokens.access_token, 'header', proof);
      assert.equal((await opened.ask({ type: 'whoami', id: 1 })).ok, true);
      opened.socket.close();
      await assert.rejects(connect(setup.server.url, tokens.access_token), { status: 401 });
      await assert.rejects(connect(setup.server.url, tokens.access_token, 'query'), { status: 401 });
    });
  });
}

describe('DPoP nonces (DPOP_NONCES)', () => {
  const env = { DPOP_NONCES: 'true', KEYS_SECRET: 'a shared secret of at least thirty-two characters' };
  let setup: Setup;
  let other: Setup;
  before(async () => {
    // Two instances that share nothing but their settings: not even a database.
    [setup, other] = await Promise.all([startWithApp(BACKENDS[0]!, env), startWithApp(BACKENDS[0]!, env)]);
  });
  after(() => Promise.all([setup?.server.close(), other?.server.close()]));

  test("a proof without the server's nonce gets use_dpop_nonce and the nonce; oauth4webapi's retry with it gets the tokens", async () => {
    const keys = await newKeys();
    const { app, agent } = setup;
    const authorization = await authorizationUrl(app);
    const callback = oauth.validateAuthResponse(app.as, app.client, (await agent.authorize(authorization.url)).redirect!, authorization.state);
    const DPoP = oauth.DPoP(app.client, keys);
    const exchange = () =>
      oauth.authorizationCodeGrantRequest(app.as, app.client, app.auth, callback, app.redirectUri, authorization.verifier, { ...insecure, DPoP });
    const first = await exchange();
    assert.equal(first.status, 400);
    assert.match(first.headers.get('dpop-nonce')!, /^[0-9a-z]+\.[A-Za-z0-9_-]{43}$/);
    await assert.rejects(oauth.processAuthorizationCodeResponse(app.as, app.client, first), (error: unknown) => oauth.isDPoPNonceError(error));
    // The handle keeps the nonce it was given: the same code (not used up by the refusal), a new proof.
    const tokens = await oauth.processAuthorizationCodeResponse(app.as, app.client, await exchange());
    assert.equal(tokens.token_type, 'dpop');

    // The API asks for the nonce too; the handle holds the one the token endpoint gave (same origin).
    const profile = await oauth.protectedResourceRequest(tokens.access_token, 'GET', new URL('/api/profile', setup.server.url), undefined, undefined, {
      ...insecure,
      DPoP,
    });
    assert.equal(profile.status, 200);
    const proof = await generateProof(
      { privateKey: keys.privateKey, publicKey: keys.publicKey },
      `${setup.server.url}/api/profile`,
      'GET',
      undefined,
      tokens.access_token,
    );
    const without = await fetch(new URL('/api/profile', setup.server.url), { headers: { authorization: `DPoP ${tokens.access_token}`, dpop: proof } });
    assert.equal(without.status, 401);
    assert.match(without.headers.get('www-authenticate')!, /^DPoP .*error="use_dpop_nonce"/);
    assert.ok(without.headers.get('dpop-nonce'));
  });

  test('a nonce one instance gave is good at another that shares only KEYS_SECRET; a made-up one is not', async () => {
    const nonce = (await postForm(setup.server, '/api/token', { grant_type: 'client_credentials' })).headers.get('dpop-nonce')!;
    const registered = await other.server.createClient({ grantType: 'client_credentials', redirectUris: [], confidential: true });
    const basic = `Basic ${btoa(`${registered.client.id}:${encodeURIComponent(registered.secret!)}`)}`;
    const keys = await generateKeyPair('ES256');
    const tokenUrl = other.app.as.token_endpoint!;
    const send = async (proofNonce: string) =>
      postForm(
        other.server,
        '/api/token',
        { grant_type: 'client_credentials' },
        { authorization: basic, dpop: await generateProof(keys, tokenUrl, 'POST', proofNonce) },
      );
    assert.equal((await send(nonce)).status, 200);
    assert.deepEqual(await errorOf(await send(`${nonce.split('.')[0]}.${'A'.repeat(43)}`)), [400, 'use_dpop_nonce']);
  });
});

describe('a metadata-document client that says dpop_bound_access_tokens', () => {
  let server: TestServer;
  let document: MetadataDocument;
  before(async () => {
    document = await serveMetadataDocument('Bound notes', '/apps/bound.json', { dpop_bound_access_tokens: true });
    server = await startServer(BACKENDS[0]!, { CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES: 'true' });
    await server.createUser('alice');
  });
  after(async () => {
    await server?.close();
    document?.close();
  });

  test('gets no token without a proof, as its document says, and a bound one with a proof', async () => {
    const app = await discover(server, document.url, { redirectUri: 'http://127.0.0.1/callback' });
    const bound: Setup = { server, app, secret: null, agent: new UserAgent(server.url) };
    await assert.rejects(dpopTokens(bound, null), (error: unknown) => error instanceof oauth.ResponseBodyError && error.error === 'invalid_dpop_proof');
    assert.equal((await dpopTokens(bound, await newKeys())).token_type, 'dpop');
  });
});
