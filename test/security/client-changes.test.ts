/**
 * What an administrator's change to a client, or a block, does to what the client holds and
 * may still ask for (issue 18, items 5, 6 and 9), performed as the attacks were:
 * - a code issued before "Require PKCE" was switched on, or before the redirect URLs
 *   changed, is exchanged afterwards (without a verifier);
 * - the operator switches REQUIRE_PKCE on and restarts, and an old code is exchanged;
 * - a blocked client presents a voided code: it must be refused as unknown (401
 *   invalid_client) before the code is looked at, charging nothing to its budget;
 * - a block written as a bare origin must cover that origin only, and one written with a
 *   trailing dot or a default port must still block.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Migrator } from 'kysely';
import * as oauth from 'oauth4webapi';
import { COMMAND_LINE } from '../../src/audit.ts';
import { blockClient, changeClient, unblockClient } from '../../src/clients/clients.ts';
import { parseDatabaseUrl } from '../../src/config.ts';
import { findClient, isClientBlocked, listClientBlocks } from '../../src/store/clients.ts';
import { migrate, migrations, openStore } from '../../src/store/database.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { authorizationUrl, discover, postForm, tokenResult, type App } from '../support/oauth-client.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';

/** A code obtained with no PKCE challenge, as a legacy client (h's) asks for one. */
async function codeWithoutPkce(app: App, agent: UserAgent): Promise<string> {
  const { url, state } = await authorizationUrl(app);
  url.searchParams.delete('code_challenge');
  url.searchParams.delete('code_challenge_method');
  const outcome = await agent.authorize(url);
  assert.ok(outcome.redirect, `authorization redirected back (${outcome.response.status})`);
  return oauth.validateAuthResponse(app.as, app.client, outcome.redirect, state).get('code')!;
}

function exchangeWithoutVerifier(server: TestServer, app: App, code: string) {
  return postForm(server, '/api/token', { grant_type: 'authorization_code', code, client_id: app.client.client_id, redirect_uri: app.redirectUri });
}

for (const backend of BACKENDS) {
  describe(`changes and blocks reach what a client holds (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let alice: UserAgent;
    const ctx = () => server.app.gatehouse;

    before(async () => {
      server = await startServer(backend, { DYNAMIC_CLIENT_REGISTRATION: 'true', TOKEN_REQUESTS_PER_CLIENT: '3' });
      await server.createUser('alice');
      alice = new UserAgent(server.url);
      await alice.login('alice');
    });
    after(() => server?.close());

    /** A legacy public client (no PKCE required) that alice has already approved. */
    async function legacyApp(): Promise<App> {
      const { client } = await server.createClient({ name: 'Legacy', requirePkce: false });
      return discover(server, client.id);
    }

    test('a code issued before "Require PKCE" was switched on is void once it is', async () => {
      const app = await legacyApp();
      const code = await codeWithoutPkce(app, alice);
      const client = (await findClient(server.store.db, app.client.client_id))!;
      await changeClient(
        ctx(),
        client,
        { name: client.name, redirectUris: JSON.parse(client.redirect_uris), trusted: false, requirePkce: true, scope: '' },
        COMMAND_LINE,
      );
      const refused = await tokenResult(await exchangeWithoutVerifier(server, app, code));
      assert.deepEqual([refused.status, refused.body.error], [400, 'invalid_grant']);
    });

    test('a code issued before the redirect URLs changed is void once they do', async () => {
      const app = await legacyApp();
      const code = await codeWithoutPkce(app, alice);
      const client = (await findClient(server.store.db, app.client.client_id))!;
      const redirectUris = [...JSON.parse(client.redirect_uris), 'https://app.example/callback'];
      await changeClient(ctx(), client, { name: client.name, redirectUris, trusted: false, requirePkce: false, scope: '' }, COMMAND_LINE);
      const refused = await tokenResult(await exchangeWithoutVerifier(server, app, code));
      assert.deepEqual([refused.status, refused.body.error], [400, 'invalid_grant']);
    });

    test('an edit that changes neither keeps the codes', async () => {
      const app = await legacyApp();
      const code = await codeWithoutPkce(app, alice);
      const client = (await findClient(server.store.db, app.client.client_id))!;
      await changeClient(
        ctx(),
        client,
        { name: 'Legacy, renamed', redirectUris: JSON.parse(client.redirect_uris), trusted: false, requirePkce: false, scope: '' },
        COMMAND_LINE,
      );
      assert.equal((await exchangeWithoutVerifier(server, app, code)).status, 200);
    });

    test('a blocked client is unknown at the token endpoint before its code is looked at, and that charges it nothing', async () => {
      const registered = await fetch(new URL('/oauth/register', server.url), {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ client_name: 'Registered tool', redirect_uris: ['http://127.0.0.1/callback'] }),
      });
      const { client_id: clientId } = (await registered.json()) as { client_id: string };
      const app = await discover(server, clientId, { redirectUri: 'http://127.0.0.1:40000/callback' });
      const authorization = await authorizationUrl(app);
      const outcome = await alice.authorize(authorization.url);
      const code = oauth.validateAuthResponse(app.as, app.client, outcome.redirect!, authorization.state).get('code')!;
      const exchange = { grant_type: 'authorization_code', code, code_verifier: authorization.verifier, client_id: clientId, redirect_uri: app.redirectUri };

      await blockClient(ctx(), clientId, COMMAND_LINE); // voids the code too
      // More requests than the client's budget (TOKEN_REQUESTS_PER_CLIENT=3): each is refused as unknown, none is a 429.
      for (let i = 0; i < 5; i++) {
        const refused = await tokenResult(await postForm(server, '/api/token', exchange));
        assert.deepEqual([refused.status, refused.body.error], [401, 'invalid_client']);
      }
      const revocation = await postForm(server, '/oauth/revoke', { token: 'unknown', client_id: clientId });
      assert.equal(revocation.status, 401, 'unknown at every endpoint that names it');

      await unblockClient(ctx(), clientId, COMMAND_LINE);
      const voided = await tokenResult(await postForm(server, '/api/token', exchange));
      assert.deepEqual([voided.status, voided.body.error], [400, 'invalid_grant'], 'the code stayed void, and the budget was not spent');
    });

    test('blocks stored before prefixes were canonical are rewritten by the migration', async () => {
      const database = await backend.create();
      const store = openStore(parseDatabaseUrl(database.url));
      try {
        const before = Object.fromEntries(Object.entries(migrations).filter(([name]) => name < '20261126_002_canonical_client_blocks'));
        assert.ifError((await new Migrator({ db: store.db, provider: { getMigrations: async () => before } }).migrateToLatest()).error);
        const written = ['https://bare.example', 'https://dotted.example./apps/', 'https://kept.example/x/', 'https://bare.example/'];
        await store.db
          .insertInto('client_blocks')
          .values(written.map((prefix) => ({ prefix, created_at: 1 })))
          .execute();
        await migrate(store);
        const prefixes = (await listClientBlocks(store.db)).map((block) => block.prefix);
        assert.deepEqual(prefixes, ['https://bare.example/', 'https://dotted.example/apps/', 'https://kept.example/x/']);
      } finally {
        await store.close();
        await database.drop();
      }
    });

    test('a block on a bare origin covers that origin only, however it was written', async () => {
      await blockClient(ctx(), 'https://Blocked.Example.', COMMAND_LINE);
      await blockClient(ctx(), 'https://tenants.example:443/evil/', COMMAND_LINE);
      const blocked = (clientId: string) => isClientBlocked(server.store.db, clientId);
      assert.equal(await blocked('https://blocked.example/client.json'), true);
      assert.equal(await blocked('https://blocked.example.attacker.example/client.json'), false, 'a longer host name is another host');
      assert.equal(await blocked('https://blocked.example:8443/client.json'), false, 'another port is another origin');
      assert.equal(await blocked('https://tenants.example/evil/client.json'), true);
      assert.equal(await blocked('https://tenants.example/good/client.json'), false);
      // Unblocking takes the prefix however it is written too.
      assert.equal(await unblockClient(ctx(), 'https://blocked.example/', COMMAND_LINE), true);
      assert.equal(await blocked('https://blocked.example/client.json'), false);
    });
  });
}

describe('REQUIRE_PKCE switched on and the server restarted (sqlite)', () => {
  test('a code issued without a challenge before the restart is refused after it', async () => {
    const database = await BACKENDS[0]!.create();
    let server = await startServer(BACKENDS[0]!, { DATABASE_URL: database.url });
    try {
      await server.createUser('alice');
      const { client } = await server.createClient({ name: 'Legacy', requirePkce: false });
      const agent = new UserAgent(server.url);
      await agent.login('alice');
      const code = await codeWithoutPkce(await discover(server, client.id), agent);
      await server.close();
      server = await startServer(BACKENDS[0]!, { DATABASE_URL: database.url, REQUIRE_PKCE: 'true' });
      const refused = await tokenResult(await exchangeWithoutVerifier(server, await discover(server, client.id), code));
      assert.deepEqual([refused.status, refused.body.error], [400, 'invalid_grant']);
      assert.match(refused.body.error_description as string, /must use PKCE/);
    } finally {
      await server.close();
      await database.drop();
    }
  });
});
