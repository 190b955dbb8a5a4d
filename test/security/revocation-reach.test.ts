/**
 * Revocation that reaches everything (issue 11 item 3, SPEC §4.2, §4.5). A code issued
 * before the person pressed **Revoke access** used to exchange for a full token chain and
 * bring the application back on their page; a code issued before an administrator took a
 * scope away produced tokens with that scope, which kept refreshing. Now Revoke access and
 * scope-narrowing edits void the codes not yet exchanged, and every exchange and refresh
 * checks again that the user is enabled, the client exists and the scopes are still the
 * client's — dropping those taken away since, refusing when none is left.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { disableUser } from '../../src/accounts/users.ts';
import { COMMAND_LINE } from '../../src/audit.ts';
import { changeClient, type Client } from '../../src/clients/clients.ts';
import { updateClient } from '../../src/store/clients.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import {
  discover,
  exchangeRequest,
  obtainCallback,
  obtainTokens,
  profile,
  refreshRequest,
  tokenResult,
  type App,
  type TokenResult,
} from '../support/oauth-client.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent, formFields } from '../support/user-agent.ts';

const READ = 'annotation:read';
const WRITE = 'annotation:write';

for (const backend of BACKENDS) {
  describe(`revocation reaches codes and refreshes (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;

    before(async () => {
      server = await startServer(backend);
      await server.createUser('alice');
    });
    after(() => server?.close());

    /** A fresh public client with both built-in scopes, its app, and alice's browser, logged in and consented. */
    async function freshApp(): Promise<{ client: Client; app: App; agent: UserAgent }> {
      const { client } = await server.createClient({ name: 'Notes' });
      const app = await discover(server, client.id);
      const agent = new UserAgent(server.url);
      await obtainTokens(app, agent);
      return { client, app, agent };
    }

    const takeScopes = (client: Client, scope: string) =>
      changeClient(
        server.app.gatehouse,
        client,
        { name: client.name, redirectUris: JSON.parse(client.redirect_uris), trusted: false, requirePkce: false, scope },
        COMMAND_LINE,
      );

    async function profileScopes(accessToken: string): Promise<string[]> {
      const response = await profile(server, accessToken);
      assert.equal(response.status, 200);
      return ((await response.json()) as { scopes: string[] }).scopes;
    }

    function assertRefused(result: TokenResult, why: string): void {
      assert.deepEqual([result.status, result.body.error], [400, 'invalid_grant'], why);
    }

    test('a code issued before Revoke access does not exchange, and the application stays off the page', async () => {
      const { client, app, agent } = await freshApp();
      const outstanding = await obtainCallback(app, agent); // consent remembered: a code at once
      const page = await agent.visit('/account/applications');
      const action = '/account/applications/revoke'; // the client ID is a field of the form
      const revoked = await agent.fetch(action, { method: 'POST', body: formFields(page.html, action) });
      assert.equal(revoked.status, 303);

      assertRefused(await tokenResult(await exchangeRequest(app, outstanding)), 'the outstanding code still exchanged');
      const after = await agent.visit('/account/applications');
      assert.doesNotMatch(after.html, new RegExp(`id="app-${client.id}"`), 'the application is back on the page');
      assert.match(after.html, /No application has access to your account\./);
    });

    test('a code issued before a scope was taken from the client yields at most the scopes left', async () => {
      const { client, app, agent } = await freshApp();
      const outstanding = await obtainCallback(app, agent); // both scopes
      await takeScopes(client, READ);
      const result = await tokenResult(await exchangeRequest(app, outstanding));
      if (result.status === 200) assert.deepEqual(await profileScopes(result.body.access_token!), [READ]);
      else assertRefused(result, 'the exchange failed otherwise');
    });

    test('a code whose every scope was taken from the client does not exchange', async () => {
      const { client, app, agent } = await freshApp();
      const outstanding = await obtainCallback(app, agent, { scope: WRITE });
      await takeScopes(client, READ);
      assertRefused(await tokenResult(await exchangeRequest(app, outstanding)), 'a code for a withdrawn scope still exchanged');
    });

    // The edits above void the codes; these take the scope away under them (as any path that
    // changes the stored client would) to show that the exchange and the refresh check again.
    test('the exchange itself drops a scope the client no longer has', async () => {
      const { client, app, agent } = await freshApp();
      const outstanding = await obtainCallback(app, agent);
      await updateClient(server.store.db, client.id, { scopes: READ });
      const result = await tokenResult(await exchangeRequest(app, outstanding));
      assert.equal(result.status, 200, JSON.stringify(result.body));
      assert.deepEqual(await profileScopes(result.body.access_token!), [READ]);
      const refreshed = await tokenResult(await refreshRequest(app, result.body.refresh_token!));
      assert.equal(refreshed.status, 200);
      assert.deepEqual(await profileScopes(refreshed.body.access_token!), [READ]);
    });

    test('a refresh after a scope was taken away yields tokens without it; with none left the grant is revoked', async () => {
      const { client, app, agent } = await freshApp();
      const both = await obtainTokens(app, agent);
      const writing = await obtainTokens(app, agent, 'alice', { scope: WRITE });
      await updateClient(server.store.db, client.id, { scopes: READ });

      const narrowed = await tokenResult(await refreshRequest(app, both.refresh_token!));
      assert.equal(narrowed.status, 200, JSON.stringify(narrowed.body));
      assert.deepEqual(await profileScopes(narrowed.body.access_token!), [READ]);
      const again = await tokenResult(await refreshRequest(app, narrowed.body.refresh_token!));
      assert.deepEqual(await profileScopes(again.body.access_token!), [READ]);

      assertRefused(await tokenResult(await refreshRequest(app, writing.refresh_token!)), 'a grant with no scope left still refreshed');
      assert.equal((await profile(server, writing.access_token)).status, 401, 'the grant with no scope left is revoked');
    });

    test('through the client edit: a grant that keeps its scopes refreshes, one that loses a scope is revoked', async () => {
      const { client, app, agent } = await freshApp();
      const reading = await obtainTokens(app, agent, 'alice', { scope: READ });
      const both = await obtainTokens(app, agent);
      await takeScopes(client, READ);
      const refreshed = await tokenResult(await refreshRequest(app, reading.refresh_token!));
      assert.equal(refreshed.status, 200);
      assert.deepEqual(await profileScopes(refreshed.body.access_token!), [READ]);
      assertRefused(await tokenResult(await refreshRequest(app, both.refresh_token!)), 'a grant holding the withdrawn scope still refreshed');
    });

    test('a user disabled between issue and exchange gets invalid_grant, for codes and refresh tokens', async () => {
      const bob = await server.createUser(`bob${Date.now()}`);
      const { client } = await server.createClient({ name: 'Bob app' });
      const app = await discover(server, client.id);
      const agent = new UserAgent(server.url);
      const tokens = await obtainTokens(app, agent, bob.username);
      const outstanding = await obtainCallback(app, agent);
      await disableUser(server.app.gatehouse, bob, COMMAND_LINE);
      assertRefused(await tokenResult(await exchangeRequest(app, outstanding)), "a disabled user's code still exchanged");
      assertRefused(await tokenResult(await refreshRequest(app, tokens.refresh_token!)), "a disabled user's refresh token still refreshed");
    });
  });
}
