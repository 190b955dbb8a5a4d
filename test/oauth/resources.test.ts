/**
 * Resource servers and audiences (SPEC §3, §4.1, §4.2, §4.4; RFC 8707), end to end through
 * oauth4webapi: a token is for the one resource server the request named (`resource`), with
 * scopes of that resource; introspection says which (`aud`); the codes and grants stay bound
 * to it at the token endpoint; consent is asked and remembered per resource server; deleting
 * a scope or a resource server takes away what was granted with it.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as oauth from 'oauth4webapi';
import { COMMAND_LINE } from '../../src/audit.ts';
import { createScope, findResourceNamed, removeResource, removeScope } from '../../src/clients/resources.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import {
  authorizationUrl,
  discover,
  insecure,
  obtainCallback,
  obtainTokens,
  postForm,
  refreshRequest,
  tokenResult,
  type App,
} from '../support/oauth-client.ts';
import { registerResourceServer, type ResourceServer } from '../support/resources.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';

const FILES = 'https://files.example/mcp';
const FILE_SCOPES = [
  { name: 'files:read', description: 'Read your files' },
  { name: 'files:write', description: 'Change your files' },
];

for (const backend of BACKENDS) {
  describe(`resource servers and audiences (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let files: ResourceServer;
    /** A public client allowed the built-in scopes and the files scopes. */
    let app: App;

    before(async () => {
      server = await startServer(backend);
      await server.createUser('alice');
      files = await registerResourceServer(server, FILES, FILE_SCOPES);
      const { client } = await server.createClient({ name: 'Files app', scope: 'annotation:read annotation:write files:read files:write' });
      app = await discover(server, client.id);
    });
    after(() => server?.close());

    const introspect = async (as: App, token: string) =>
      oauth.processIntrospectionResponse(as.as, as.client, await oauth.introspectionRequest(as.as, as.client, as.auth, token, insecure));

    const exchange = (authorized: { callback: URLSearchParams; verifier: string }, resource?: string) =>
      oauth.authorizationCodeGrantRequest(app.as, app.client, app.auth, authorized.callback, app.redirectUri, authorized.verifier, {
        ...insecure,
        ...(resource === undefined ? {} : { additionalParameters: { resource } }),
      });

    test('a token asked for a resource server is for it alone: its scopes, its aud, and its own client may introspect it', async () => {
      const tokens = await obtainTokens(app, new UserAgent(server.url), 'alice', { resource: 'HTTPS://Files.Example/mcp/' });
      assert.equal(tokens.scope, 'files:read files:write', 'absent scope: all the client may have on that resource');
      const info = await introspect(files.introspector, tokens.access_token);
      assert.equal(info.active, true);
      assert.equal(info.aud, FILES, 'aud is the normalized resource URI');
      assert.equal(info.username, 'alice');
    });

    test('without resource a token is for the built-in resource, as before: aud is PUBLIC_URL', async () => {
      const tokens = await obtainTokens(app, new UserAgent(server.url));
      assert.equal(tokens.scope, 'annotation:read annotation:write');
      const info = await introspect(files.introspector, tokens.access_token);
      assert.equal(info.active, true, 'any confidential client may introspect built-in tokens');
      assert.equal(info.aud, server.url);
    });

    test('the scopes asked for must belong to the resource: invalid_scope otherwise', async () => {
      const agent = new UserAgent(server.url);
      await agent.login('alice');
      const { url } = await authorizationUrl(app, { resource: FILES, scope: 'files:read annotation:read' });
      const outcome = await agent.visit(url.pathname + url.search);
      assert.equal(outcome.redirect?.searchParams.get('error'), 'invalid_scope');
      assert.match(outcome.redirect!.searchParams.get('error_description')!, /annotation:read/);
    });

    test("client_credentials names its resource too; the resource server's own client obtains nothing", async () => {
      const registered = await server.createClient({
        name: 'Batch job',
        grantType: 'client_credentials',
        redirectUris: [],
        confidential: true,
        scope: 'files:read',
      });
      const job = await discover(server, registered.client.id, { secret: registered.secret! });
      const granted = await oauth.processClientCredentialsResponse(
        job.as,
        job.client,
        await oauth.clientCredentialsGrantRequest(job.as, job.client, job.auth, new URLSearchParams({ resource: FILES }), insecure),
      );
      assert.equal(granted.scope, 'files:read');
      assert.equal((await introspect(files.introspector, granted.access_token)).aud, FILES);
      const builtin = await tokenResult(await oauth.clientCredentialsGrantRequest(job.as, job.client, job.auth, new URLSearchParams(), insecure));
      assert.equal(builtin.body.error, 'invalid_scope', 'it has no scope on the built-in resource');

      const own = await tokenResult(
        await oauth.clientCredentialsGrantRequest(
          files.introspector.as,
          files.introspector.client,
          files.introspector.auth,
          new URLSearchParams({ resource: FILES }),
          insecure,
        ),
      );
      assert.deepEqual([own.status, own.body.error], [400, 'unauthorized_client']);
    });

    test('a code is exchanged only for its own resource: another is invalid_target and consumes nothing', async () => {
      const authorized = await obtainCallback(app, new UserAgent(server.url), { resource: FILES });
      const wrong = await tokenResult(await exchange(authorized, server.url));
      assert.deepEqual([wrong.status, wrong.body.error], [400, 'invalid_target']);
      const unknown = await tokenResult(await exchange(authorized, 'https://elsewhere.example/'));
      assert.deepEqual([unknown.status, unknown.body.error], [400, 'invalid_target']);
      const tokens = await oauth.processAuthorizationCodeResponse(app.as, app.client, await exchange(authorized, `${FILES}/`));
      assert.equal((await introspect(files.introspector, tokens.access_token)).aud, FILES);
    });

    test('a refresh keeps the resource: another is invalid_target and rotates nothing', async () => {
      const tokens = await obtainTokens(app, new UserAgent(server.url), 'alice', { resource: FILES });
      const refreshWith = (resource: string) =>
        oauth.refreshTokenGrantRequest(app.as, app.client, app.auth, tokens.refresh_token!, { ...insecure, additionalParameters: { resource } });
      const wrong = await tokenResult(await refreshWith(server.url));
      assert.deepEqual([wrong.status, wrong.body.error], [400, 'invalid_target']);
      const twice = await tokenResult(
        await postForm(
          server,
          '/api/token',
          `grant_type=refresh_token&client_id=${app.client.client_id}&refresh_token=${tokens.refresh_token}&resource=${FILES}&resource=${FILES}`,
        ),
      );
      assert.deepEqual([twice.status, twice.body.error], [400, 'invalid_target']);
      const refreshed = await oauth.processRefreshTokenResponse(app.as, app.client, await refreshWith(FILES));
      assert.equal((await introspect(files.introspector, refreshed.access_token)).aud, FILES);
      const plain = await tokenResult(await refreshRequest(app, refreshed.refresh_token!));
      assert.equal(plain.status, 200, "without resource, the grant's own");
    });

    test('the consent page names the resource server and describes its scopes; consent is remembered per resource', async () => {
      const { client } = await server.createClient({ name: 'Consent app', scope: 'annotation:read files:read' });
      const consenting = await discover(server, client.id);
      const agent = new UserAgent(server.url);
      await agent.login('alice');
      const first = await authorizationUrl(consenting, { resource: FILES });
      const page = await agent.visit(first.url.pathname + first.url.search);
      assert.match(page.html, /Files API/);
      assert.match(page.html, /Read your files/);
      await agent.submit(page.html, '/oauth/authorize', { decision: 'approve' });

      const again = await authorizationUrl(consenting, { resource: FILES });
      assert.ok((await agent.visit(again.url.pathname + again.url.search)).redirect, 'approved before: no consent page');
      const builtin = await authorizationUrl(consenting);
      const other = await agent.visit(builtin.url.pathname + builtin.url.search);
      assert.equal(other.redirect, null, 'another resource is asked for again');
      assert.match(other.html, /Read your annotations/);
      assert.doesNotMatch(other.html, /Files API/, 'the built-in resource is not named');
    });

    test('the metadata lists every scope of every resource server, new ones included', async () => {
      const resource = (await findResourceNamed(server.app.gatehouse, FILES))!;
      await createScope(server.app.gatehouse, resource, { name: 'files:share', description: 'Share your files' }, COMMAND_LINE);
      const metadata = (await (await fetch(`${server.url}/.well-known/oauth-authorization-server`)).json()) as { scopes_supported: string[] };
      assert.deepEqual(metadata.scopes_supported, [
        'annotation:read',
        'annotation:write',
        'files:read',
        'files:share',
        'files:write',
        'openid',
        'profile',
        'email',
        'groups',
        'offline_access',
      ]);
    });

    test('deleting a scope revokes the grants holding it; deleting the resource server revokes every grant for it', async () => {
      const ctx = server.app.gatehouse;
      const agent = new UserAgent(server.url);
      const writer = await obtainTokens(app, agent, 'alice', { resource: FILES, scope: 'files:write' });
      const reader = await obtainTokens(app, agent, 'alice', { resource: FILES, scope: 'files:read' });
      const builtin = await obtainTokens(app, agent);
      await removeScope(ctx, 'files:write', COMMAND_LINE);
      assert.deepEqual(await introspect(files.introspector, writer.access_token), { active: false });
      assert.equal((await introspect(files.introspector, reader.access_token)).active, true);
      assert.equal((await tokenResult(await refreshRequest(app, writer.refresh_token!))).body.error, 'invalid_grant');

      const pending = await obtainCallback(app, agent, { resource: FILES, scope: 'files:read' });
      await removeResource(ctx, (await findResourceNamed(ctx, FILES))!, COMMAND_LINE);
      assert.equal((await tokenResult(await refreshRequest(app, reader.refresh_token!))).body.error, 'invalid_grant');
      assert.equal((await tokenResult(await exchange(pending))).body.error, 'invalid_grant', 'its codes not yet exchanged are void');
      const caller = await server.createClient({ name: 'Another API', grantType: 'client_credentials', redirectUris: [], confidential: true });
      const other = await discover(server, caller.client.id, { secret: caller.secret! });
      assert.deepEqual(await introspect(other, reader.access_token), { active: false });
      assert.equal((await introspect(other, builtin.access_token)).active, true, 'the built-in resource is untouched');
      const { url } = await authorizationUrl(app, { resource: FILES });
      const outcome = await agent.visit(url.pathname + url.search);
      assert.equal(outcome.redirect?.searchParams.get('error'), 'invalid_target', 'the resource is unknown now');
    });
  });
}
