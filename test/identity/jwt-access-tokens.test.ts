/**
 * JWT access tokens (RFC 9068, SPEC §4.9) for a resource server whose token format is `jwt`,
 * verified the way resource servers verify them — offline, against the published JWKS — with
 * the libraries they use: jose (`createRemoteJWKSet` + `jwtVerify`), oauth4webapi
 * (`validateJwtAccessToken`) and Auth0's express-oauth2-jwt-bearer in front of a small
 * Express API. A token for another audience is refused there; revoking the grant, or the key
 * that signed it, reaches the JWT at introspection.
 */
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import express from 'express';
import { auth } from 'express-oauth2-jwt-bearer';
import { SignJWT, createRemoteJWKSet, decodeProtectedHeader, generateKeyPair, jwtVerify } from 'jose';
import * as oauth from 'oauth4webapi';
import { COMMAND_LINE } from '../../src/audit.ts';
import { changeTokenSettings, findResourceNamed } from '../../src/clients/resources.ts';
import { revokeKey } from '../../src/identity/key-schedule.ts';
import { listAuditEvents } from '../../src/store/audit-events.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { answerAtDevicePage, deviceApp, poll, requestCodes } from '../support/device.ts';
import {
  clientCredentialsTokens,
  discover,
  insecure,
  obtainTokens,
  postForm,
  profile,
  refresh,
  refreshRequest,
  revokeToken,
  type App,
} from '../support/oauth-client.ts';
import { assertOAuthError } from '../support/responses.ts';
import { registerResourceServer, type ResourceServer } from '../support/resources.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';

const FILES = 'https://files.example/mcp';
const NOTES = 'https://notes.example/api';
const PHOTOS = 'https://photos.example/api';
/** A client acting as itself: no login, so no `auth_time` or `amr`. */
const CLAIMS = ['aud', 'client_id', 'exp', 'iat', 'iss', 'jti', 'scope', 'sub'];
/** A person's token: also when and how they logged in (SPEC §4.9, §4.12). */
const PERSON_CLAIMS = [...CLAIMS, 'amr', 'auth_time'].sort();

for (const backend of BACKENDS) {
  describe(`JWT access tokens (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let files: ResourceServer;
    let app: App;
    let api: { url: string; close(): Promise<void> };

    before(async () => {
      server = await startServer(backend);
      await server.createUser('alice');
      files = await registerResourceServer(server, FILES, [{ name: 'files:read', description: 'Read your files' }]);
      await registerResourceServer(server, NOTES, [{ name: 'notes:read', description: 'Read your notes' }]);
      await registerResourceServer(server, PHOTOS, [{ name: 'photos:read', description: 'See your photos' }]);
      const ctx = server.app.gatehouse;
      await changeTokenSettings(ctx, (await findResourceNamed(ctx, FILES))!, { tokenFormat: 'jwt' }, COMMAND_LINE);
      await changeTokenSettings(ctx, (await findResourceNamed(ctx, NOTES))!, { tokenFormat: 'jwt', signingAlg: 'RS256' }, COMMAND_LINE);
      await changeTokenSettings(ctx, (await findResourceNamed(ctx, PHOTOS))!, { tokenFormat: 'jwt' }, COMMAND_LINE);
      const { client } = await server.createClient({ name: 'Files app', scope: 'annotation:read files:read notes:read photos:read' });
      app = await discover(server, client.id);
      api = await filesApi(server);
    });
    after(async () => {
      await api?.close();
      await server?.close();
    });

    const jwks = () => createRemoteJWKSet(new URL('/oauth/jwks', server.url));
    const introspect = async (token: string) =>
      oauth.processIntrospectionResponse(
        files.introspector.as,
        files.introspector.client,
        await oauth.introspectionRequest(files.introspector.as, files.introspector.client, files.introspector.auth, token, insecure),
      );

    test('the code exchange answers a JWT with exactly the RFC 9068 claims, verified offline with jose; the refresh token stays opaque', async () => {
      const tokens = await obtainTokens(app, new UserAgent(server.url), 'alice', { resource: FILES, scope: 'files:read' });
      assert.equal(tokens.token_type.toLowerCase(), 'bearer');
      assert.equal(tokens.expires_in, server.config.jwtAccessTokenTtl);
      assert.doesNotMatch(tokens.refresh_token!, /\./, 'the refresh token is opaque');
      const { payload, protectedHeader } = await jwtVerify(tokens.access_token, jwks(), {
        issuer: server.url,
        audience: FILES,
        typ: 'at+jwt',
        algorithms: ['ES256'],
      });
      assert.equal(protectedHeader.alg, 'ES256');
      assert.ok(protectedHeader.kid);
      assert.deepEqual(Object.keys(payload).sort(), PERSON_CLAIMS, 'no profile data');
      assert.equal(payload.sub, `acct:alice@127.0.0.1`);
      assert.equal(payload.client_id, app.client.client_id);
      assert.equal(payload.scope, 'files:read');
      assert.equal(payload.exp! - payload.iat!, server.config.jwtAccessTokenTtl);
      assert.ok(Buffer.from(payload.jti!.slice(-43), 'base64url').length >= 16, 'a jti of at least 128 random bits after its time');
    });

    test('every refresh answers a new JWT; the service’s own API refuses it (another audience)', async () => {
      const tokens = await obtainTokens(app, new UserAgent(server.url), 'alice', { resource: FILES, scope: 'files:read' });
      const refreshed = await refresh(app, tokens.refresh_token!);
      assert.notEqual(refreshed.access_token, tokens.access_token);
      const { payload } = await jwtVerify(refreshed.access_token, jwks(), { issuer: server.url, audience: FILES, typ: 'at+jwt' });
      assert.equal(payload.sub, `acct:alice@127.0.0.1`);
      assert.equal((await profile(server, refreshed.access_token)).status, 401);
    });

    test('RS256 for a resource server that asks for it, checked by oauth4webapi’s validateJwtAccessToken', async () => {
      const tokens = await obtainTokens(app, new UserAgent(server.url), 'alice', { resource: NOTES, scope: 'notes:read' });
      assert.equal(decodeProtectedHeader(tokens.access_token).alg, 'RS256');
      const request = new Request(`${NOTES}/notes`, { headers: { authorization: `Bearer ${tokens.access_token}` } });
      const claims = await oauth.validateJwtAccessToken(app.as, request, NOTES, { ...insecure, signingAlgorithms: ['RS256'] });
      assert.equal(claims.client_id, app.client.client_id);
      await assert.rejects(oauth.validateJwtAccessToken(app.as, request, FILES, insecure), 'a token for another audience');
    });

    test('client_credentials and the device grant issue JWTs too; a client acting as itself is their sub', async () => {
      const { clientId, tokens: granted } = await clientCredentialsTokens(server, 'files:read', FILES);
      const { payload } = await jwtVerify(granted.access_token, jwks(), { issuer: server.url, audience: FILES, typ: 'at+jwt' });
      assert.equal(payload.sub, clientId);
      assert.deepEqual(Object.keys(payload).sort(), CLAIMS, 'no auth_time or amr: nobody logged in');

      const device = await deviceApp(server, { scope: 'files:read' });
      const codes = await requestCodes(device, { resource: FILES });
      const agent = new UserAgent(server.url);
      await agent.login('alice');
      await answerAtDevicePage(agent, codes, 'approve');
      server.advance(codes.interval ?? 5);
      const result = await poll(device, codes.device_code);
      assert.equal(result.status, 200, JSON.stringify(result.body));
      await jwtVerify(result.body.access_token as string, jwks(), { issuer: server.url, audience: FILES, typ: 'at+jwt' });
    });

    test('express-oauth2-jwt-bearer in front of an API accepts its own audience’s JWT and refuses another’s', async () => {
      const forFiles = await obtainTokens(app, new UserAgent(server.url), 'alice', { resource: FILES, scope: 'files:read' });
      const forPhotos = await obtainTokens(app, new UserAgent(server.url), 'alice', { resource: PHOTOS, scope: 'photos:read' });
      const call = (token: string) => fetch(`${api.url}/files`, { headers: { authorization: `Bearer ${token}` } });
      const accepted = await call(forFiles.access_token);
      assert.equal(accepted.status, 200);
      assert.deepEqual(await accepted.json(), { sub: 'acct:alice@127.0.0.1', scope: 'files:read' });
      assert.equal(decodeProtectedHeader(forPhotos.access_token).alg, 'ES256');
      const refused = await call(forPhotos.access_token);
      assert.equal(refused.status, 401, 'a token for another audience, signed alike');
      assert.match(refused.headers.get('www-authenticate') ?? '', /invalid_token/);
      assert.equal((await call(forFiles.refresh_token!)).status, 401, 'a refresh token is no access token');
    });

    test('introspection describes a JWT with its jti, and says inactive once its grant is revoked', async () => {
      const tokens = await obtainTokens(app, new UserAgent(server.url), 'alice', { resource: FILES, scope: 'files:read' });
      const { payload } = await jwtVerify(tokens.access_token, jwks(), { issuer: server.url, audience: FILES });
      const live = await introspect(tokens.access_token);
      assert.equal(live.active, true);
      assert.equal(live.jti, payload.jti);
      assert.equal(live.aud, FILES);
      assert.equal(live.sub, 'acct:alice@127.0.0.1');
      await revokeToken(app, tokens.refresh_token!);
      assert.deepEqual(await introspect(tokens.access_token), { active: false });
    });

    describe('revoking a JWT access token revokes its grant (SPEC §4.3)', () => {
      const revokedGrants = async () =>
        (await listAuditEvents(server.app.gatehouse.db, { clientId: app.client.client_id, type: 'token_revoked', limit: 1000 })).map(
          (event) => event.detail?.grant_id,
        );

      for (const hint of [undefined, 'access_token', 'refresh_token'] as const) {
        test(`with ${hint ? `token_type_hint=${hint}` : 'no hint'}: the JWT introspects inactive, the refresh token fails, audited`, async () => {
          const tokens = await obtainTokens(app, new UserAgent(server.url), 'alice', { resource: FILES, scope: 'files:read' });
          const before = await revokedGrants();
          const response = await postForm(server, '/oauth/revoke', {
            token: tokens.access_token,
            client_id: app.client.client_id,
            ...(hint ? { token_type_hint: hint } : {}),
          });
          assert.equal(response.status, 200);
          assert.deepEqual(await response.json(), {});
          assert.deepEqual(await introspect(tokens.access_token), { active: false });
          await assertOAuthError(await refreshRequest(app, tokens.refresh_token!), 400, 'invalid_grant', 'the refresh token has been revoked');
          assert.equal((await revokedGrants()).length, before.length + 1, 'one token_revoked event');
        });
      }

      test('an expired JWT still revokes its grant, whose refresh token lives on', async () => {
        const tokens = await obtainTokens(app, new UserAgent(server.url), 'alice', { resource: FILES, scope: 'files:read' });
        server.advance(server.config.jwtAccessTokenTtl + 60);
        await revokeToken(app, tokens.access_token);
        await assertOAuthError(await refreshRequest(app, tokens.refresh_token!), 400, 'invalid_grant', 'the refresh token has been revoked');
      });

      test('another client’s JWT is refused, and its grant stays alive', async () => {
        const tokens = await obtainTokens(app, new UserAgent(server.url), 'alice', { resource: FILES, scope: 'files:read' });
        const { client } = await server.createClient({ name: 'Intruder' });
        const intruder = await discover(server, client.id);
        const refused = await oauth.revocationRequest(intruder.as, intruder.client, intruder.auth, tokens.access_token, insecure);
        await assertOAuthError(refused, 400, 'unauthorized_client', 'the token was not issued to this client');
        assert.equal((await introspect(tokens.access_token)).active, true);
        assert.ok((await refresh(app, tokens.refresh_token!)).access_token);
      });

      test('a JWT signed by a key this server does not publish revokes nothing', async () => {
        const tokens = await obtainTokens(app, new UserAgent(server.url), 'alice', { resource: FILES, scope: 'files:read' });
        const [header, payload] = tokens.access_token.split('.');
        const { privateKey } = await generateKeyPair('ES256');
        const forged = await new SignJWT(JSON.parse(Buffer.from(payload!, 'base64url').toString()))
          .setProtectedHeader(JSON.parse(Buffer.from(header!, 'base64url').toString()))
          .sign(privateKey);
        await revokeToken(app, forged);
        assert.equal((await introspect(tokens.access_token)).active, true);
      });
    });

    /** The server's clock, in the claims' epoch seconds. */
    const serverSeconds = () => Math.floor(server.app.gatehouse.now() / 1000);

    test('a person’s JWT says when and how they logged in, and every refresh keeps it; introspection says the same', async () => {
      const agent = new UserAgent(server.url);
      const loggedIn = serverSeconds();
      await agent.login('alice');
      server.advance(30);
      const tokens = await obtainTokens(app, agent, 'alice', { resource: FILES, scope: 'files:read' });
      const first = (await jwtVerify(tokens.access_token, jwks(), { issuer: server.url, audience: FILES, typ: 'at+jwt' })).payload;
      assert.ok(Math.abs((first.auth_time as number) - loggedIn) <= 2, `auth_time ${first.auth_time} is the login's ${loggedIn}, not the code's`);
      assert.ok(first.iat! >= (first.auth_time as number) + 30);
      assert.deepEqual(first.amr, ['pwd']);
      const described = await introspect(tokens.access_token);
      assert.equal(described.auth_time, first.auth_time);
      assert.deepEqual(described.amr, ['pwd']);

      server.advance(120);
      const refreshed = await refresh(app, tokens.refresh_token!);
      const second = (await jwtVerify(refreshed.access_token, jwks(), { issuer: server.url, audience: FILES, typ: 'at+jwt' })).payload;
      assert.ok(second.iat! >= first.iat! + 120, 'a new token');
      assert.equal(second.auth_time, first.auth_time, 'a refresh is not a login');
      assert.deepEqual(second.amr, ['pwd']);
      const again = await introspect(refreshed.access_token);
      assert.equal(again.auth_time, first.auth_time);
      assert.deepEqual(again.amr, ['pwd']);
    });

    test('a device grant’s JWT carries the login in which the person approved it', async () => {
      const device = await deviceApp(server, { scope: 'files:read' });
      const agent = new UserAgent(server.url);
      const loggedIn = serverSeconds();
      await agent.login('alice');
      server.advance(40);
      const codes = await requestCodes(device, { resource: FILES });
      await answerAtDevicePage(agent, codes, 'approve');
      server.advance(codes.interval ?? 5);
      const result = await poll(device, codes.device_code);
      assert.equal(result.status, 200, JSON.stringify(result.body));
      const { payload } = await jwtVerify(result.body.access_token as string, jwks(), { issuer: server.url, audience: FILES, typ: 'at+jwt' });
      assert.deepEqual(Object.keys(payload).sort(), PERSON_CLAIMS);
      assert.ok(Math.abs((payload.auth_time as number) - loggedIn) <= 2, `auth_time ${payload.auth_time} is the login's ${loggedIn}`);
      assert.deepEqual(payload.amr, ['pwd']);
    });

    test('revoking the key that signed a JWT makes it inactive at once, and the next token is signed by a new key', async () => {
      const tokens = await obtainTokens(app, new UserAgent(server.url), 'alice', { resource: FILES, scope: 'files:read' });
      const { kid } = decodeProtectedHeader(tokens.access_token);
      assert.equal((await introspect(tokens.access_token)).active, true);
      await revokeKey(server.app.gatehouse, kid!, COMMAND_LINE);
      assert.deepEqual(await introspect(tokens.access_token), { active: false });
      await assert.rejects(jwtVerify(tokens.access_token, createRemoteJWKSet(new URL('/oauth/jwks', server.url))), 'gone from the JWKS');
      const next = await refresh(app, tokens.refresh_token!);
      assert.notEqual(decodeProtectedHeader(next.access_token).kid, kid);
      assert.equal((await introspect(next.access_token)).active, true);
    });
  });
}

/** A small API of the `files` resource server, guarded by Auth0's JWT middleware, verifying offline against the JWKS. */
async function filesApi(server: TestServer): Promise<{ url: string; close(): Promise<void> }> {
  const api = express();
  api.use(auth({ issuer: server.url, jwksUri: `${server.url}/oauth/jwks`, audience: FILES, tokenSigningAlg: 'ES256' }));
  api.get('/files', (request, response) => {
    // Read as the middleware sets it (the MCP SDK's Express types declare another `auth`).
    const claims = (request as unknown as { auth: { payload: { sub?: string; scope?: string } } }).auth.payload;
    response.json({ sub: claims.sub, scope: claims.scope });
  });
  // The middleware's refusals are answered as it describes them, without Express's stack-trace page.
  api.use(
    (error: { status?: number; headers?: Record<string, string> }, _request: express.Request, response: express.Response, _next: express.NextFunction) => {
      response
        .status(error.status ?? 500)
        .set(error.headers ?? {})
        .end();
    },
  );
  const listening = api.listen(0, '127.0.0.1');
  await new Promise((resolve) => listening.once('listening', resolve));
  return {
    url: `http://127.0.0.1:${(listening.address() as AddressInfo).port}`,
    close: () => new Promise((resolve) => listening.close(() => resolve())),
  };
}
