/**
 * A rolling upgrade (docs/operations.md): the new release's migrations run while instances of
 * the old one still serve. A migration that adds a column must not break the old instance's
 * statements — on PostgreSQL the token paths run named statements, planned once per
 * connection, and a named statement whose result gains a column fails ("cached plan must not
 * change result type"); so they name their columns (store/schema.ts `allColumnsOf`). Both
 * backends. test/unit/prepared.test.ts checks, without a database, which statements get a name.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as oauth from 'oauth4webapi';
import { sql } from 'kysely';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { answerAtDevicePage, deviceApp, pollRequest, requestCodes } from '../support/device.ts';
import { discover, insecure, obtainTokens, profile, refresh } from '../support/oauth-client.ts';
import { registerResourceServer, type ResourceServer } from '../support/resources.ts';
import { startServer } from '../support/server.ts';
import type { Setup } from '../support/token-checks.ts';
import { UserAgent } from '../support/user-agent.ts';

/** Every table a token path reads whole. */
const TABLES = ['users', 'sessions', 'clients', 'auth_codes', 'device_codes', 'resources', 'scopes', 'grants', 'access_tokens', 'refresh_tokens'];
const FILES = 'https://files.example/api';

for (const backend of BACKENDS) {
  describe(`a column added while the server runs (${backend.name})`, backendOptions(backend), () => {
    let setup: Setup;
    let files: ResourceServer;
    before(async () => {
      const server = await startServer(backend);
      await server.createUser('alice');
      files = await registerResourceServer(server, FILES, [{ name: 'files:read', description: 'Read your files' }]);
      const { client, secret } = await server.createClient({ confidential: true, scope: 'annotation:read annotation:write files:read' });
      setup = { server, secret, app: await discover(server, client.id, { secret }), agent: new UserAgent(server.url) };
    });
    after(() => setup?.server.close());

    const isActive = async (token: string) =>
      (
        await oauth.processIntrospectionResponse(
          files.introspector.as,
          files.introspector.client,
          await oauth.introspectionRequest(files.introspector.as, files.introspector.client, files.introspector.auth, token, insecure),
        )
      ).active;

    /**
     * Each statement the token paths run, run once: the authorization request and the code
     * exchange (confidential) for the built-in API and for a resource server, a refresh, a
     * bearer call, introspection, and the device flow.
     */
    const everyTokenPath = async () => {
      const tokens = await obtainTokens(setup.app, setup.agent);
      const refreshed = await refresh(setup.app, tokens.refresh_token!);
      assert.equal((await profile(setup.server, refreshed.access_token)).status, 200);
      const forFiles = await obtainTokens(setup.app, setup.agent, 'alice', { resource: FILES, scope: 'files:read' });
      assert.equal(await isActive(forFiles.access_token), true);

      const device = await deviceApp(setup.server);
      const codes = await requestCodes(device);
      const agent = new UserAgent(setup.server.url);
      await agent.login('alice');
      assert.equal((await answerAtDevicePage(agent, codes, 'approve')).response.status, 200);
      setup.server.advance(5);
      const fromDevice = await oauth.processDeviceCodeResponse(device.as, device.client, await pollRequest(device, codes.device_code));
      assert.equal((await profile(setup.server, fromDevice.access_token)).status, 200);
    };

    test('the authorization request, the code exchange, a refresh, the API, introspection and the device flow keep working after a migration adds a column to their tables', async () => {
      await everyTokenPath(); // the statements are prepared on the connections the server holds
      for (const table of TABLES) await sql`alter table ${sql.table(table)} add column from_a_newer_release text`.execute(setup.server.store.db);
      await everyTokenPath();
      await everyTokenPath();
    });
  });
}
