/**
 * The token endpoint's per-client budget (issue 11 item 2, SPEC §1 TOKEN_REQUESTS_PER_CLIENT).
 * It used to be charged to whatever client_id a request claimed, before anything was checked:
 * TOKEN_REQUESTS_PER_CLIENT junk requests naming a client, from a few addresses, locked that
 * client out of the token endpoint. Now only requests that prove they come from the client
 * spend its budget (its secret, or a code or refresh token issued to it); the rest count
 * against their address only.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { CLIENT_CREDENTIALS_GRANT_TYPE, REFRESH_TOKEN_GRANT_TYPE } from '../../src/oauth/grants/types.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { discover, exchangeRequest, obtainCallback, postForm, tokenResult, type App } from '../support/oauth-client.ts';
import { assertOAuthError } from '../support/responses.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';
import { outlastClientCache } from '../support/waits.ts';

const PER_CLIENT = 20;
const ADDRESSES = ['203.0.113.5', '203.0.113.6', '198.51.100.7'];
/** Shaped like a code or refresh token but never issued. */
const UNKNOWN_CODE = `gac_${'A'.repeat(43)}`;
const UNKNOWN_REFRESH = `grt_${'A'.repeat(43)}`;

function basic(clientId: string, secret: string): Record<string, string> {
  return { authorization: `Basic ${btoa(`${encodeURIComponent(clientId)}:${encodeURIComponent(secret)}`)}` };
}

for (const backend of BACKENDS) {
  describe(`token endpoint throttling per client (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let agent: UserAgent;
    before(async () => {
      server = await startServer(backend, {
        TRUST_PROXY: '127.0.0.1',
        TOKEN_REQUESTS_PER_CLIENT: String(PER_CLIENT),
        TOKEN_REQUESTS_PER_ADDRESS: '1000',
        LOG_LEVEL: 'warn',
      });
      await server.createUser('alice');
      agent = new UserAgent(server.url);
    });
    after(() => server?.close());

    const tokenRequest = (form: Record<string, string>, address: string, headers: Record<string, string> = {}) =>
      postForm(server, '/api/token', form, { 'x-forwarded-for': address, ...headers });

    test('junk requests naming a client, from several addresses, do not lock it out', async () => {
      const victim = await discover(server, (await server.createClient({ name: 'Victim' })).client.id);
      const confidential = await server.createClient({ name: 'Confidential victim', confidential: true });
      const clientId = victim.client.client_id;
      // Every kind of request that names a client without proving it is that client.
      const junk: Array<{ victim: string; form: Record<string, string>; headers?: Record<string, string> }> = [
        { victim: 'public', form: { grant_type: 'authorization_code', code: UNKNOWN_CODE, client_id: clientId } },
        { victim: 'public', form: { grant_type: 'refresh_token', refresh_token: UNKNOWN_REFRESH, client_id: clientId } },
        { victim: 'public', form: { grant_type: 'authorization_code', code: 'not-a-code', client_id: clientId, redirect_uri: victim.redirectUri } },
        { victim: 'confidential', form: { grant_type: 'authorization_code', code: UNKNOWN_CODE }, headers: basic(confidential.client.id, 'a wrong secret') },
        { victim: 'confidential', form: { grant_type: 'client_credentials', client_id: confidential.client.id } },
      ];
      const statuses = new Map<number, number>();
      const naming = new Map<string, number>();
      for (let round = 0; round < PER_CLIENT; round++) {
        const batch = ADDRESSES.flatMap((address) => junk.map((request) => ({ ...request, address })));
        const answers = await Promise.all(batch.map(({ form, address, headers }) => tokenRequest(form, address, headers)));
        for (const [i, response] of answers.entries()) {
          const { victim: named } = batch[i]!;
          naming.set(named, (naming.get(named) ?? 0) + 1);
          statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1);
          await response.body?.cancel();
          if (response.status === 429) assert.fail(`the ${named} client was locked out by ${naming.get(named)} junk requests naming it`);
        }
      }
      assert.deepEqual([...statuses.keys()].sort(), [400, 401], `every junk request is refused for what it is: ${JSON.stringify([...statuses])}`);
      assert.ok(naming.get('public')! > 3 * PER_CLIENT && naming.get('confidential')! > 2 * PER_CLIENT);

      // The victims' real requests still go through.
      const exchanged = await tokenResult(await exchangeRequest(victim, await obtainCallback(victim, agent)));
      assert.equal(exchanged.status, 200, JSON.stringify(exchanged.body));
      const machine = await server.createClient({ name: 'Robot', grantType: 'client_credentials', confidential: true });
      const own = await tokenRequest(
        { grant_type: 'authorization_code', code: UNKNOWN_CODE },
        ADDRESSES[0]!,
        basic(confidential.client.id, confidential.secret!),
      );
      assert.equal(own.status, 400, 'the confidential victim, authenticated, is not throttled');
      assert.equal((await tokenRequest({ grant_type: 'client_credentials' }, ADDRESSES[0]!, basic(machine.client.id, machine.secret!))).status, 200);
    });

    test('a confidential client that really sends too many requests is throttled, from any address', async () => {
      const registered = await server.createClient({ name: 'Busy server', confidential: true });
      const credentials = basic(registered.client.id, registered.secret!);
      const form = { grant_type: 'authorization_code', code: UNKNOWN_CODE };
      for (let i = 0; i < PER_CLIENT; i++) {
        const response = await tokenRequest(form, ADDRESSES[i % ADDRESSES.length]!, credentials);
        assert.equal(response.status, 400, `request ${i + 1} is within the budget`);
      }
      const refused = await tokenRequest(form, '192.0.2.99', credentials);
      assert.equal(refused.status, 429);
      assert.ok(Number(refused.headers.get('retry-after')) > 0, 'with Retry-After');
      assert.equal(((await refused.json()) as { error: string }).error, 'temporarily_unavailable');
    });

    test('a public client proves itself with its own code: its replays spend its budget', async () => {
      const app: App = await discover(server, (await server.createClient({ name: 'Busy browser app' })).client.id);
      const authorized = await obtainCallback(app, agent);
      const first = await exchangeRequest(app, authorized);
      assert.equal(first.status, 200);
      for (let i = 1; i < PER_CLIENT; i++) {
        const replay = await exchangeRequest(app, authorized);
        assert.equal(replay.status, 400, `request ${i + 1} is within the budget`);
        await replay.body?.cancel();
      }
      const refused = await exchangeRequest(app, authorized);
      assert.equal(refused.status, 429);
      assert.ok(Number(refused.headers.get('retry-after')) > 0, 'with Retry-After');
    });

    test('a refresh by a client not registered for a grant that refreshes is refused before its budget is charged, with or without its client_id', async () => {
      const app: App = await discover(server, (await server.createClient({ name: 'Changed under its tokens' })).client.id);
      const exchanged = await tokenResult(await exchangeRequest(app, await obtainCallback(app, agent)));
      assert.equal(exchanged.status, 200);
      const refreshToken = exchanged.body.refresh_token as string;
      // No page or command changes a client's grant type once registered: only the database does.
      await server.store.db.updateTable('clients').set({ grant_type: CLIENT_CREDENTIALS_GRANT_TYPE }).where('id', '=', app.client.client_id).execute();
      await outlastClientCache();
      const description = 'this client is not registered for the refresh_token grant';
      for (let i = 0; i <= PER_CLIENT; i++) {
        const form = { grant_type: REFRESH_TOKEN_GRANT_TYPE, refresh_token: refreshToken, client_id: app.client.client_id };
        await assertOAuthError(await tokenRequest(form, ADDRESSES[i % ADDRESSES.length]!), 400, 'unauthorized_client', description);
      }
      const anonymous = await tokenRequest({ grant_type: REFRESH_TOKEN_GRANT_TYPE, refresh_token: refreshToken }, ADDRESSES[0]!);
      await assertOAuthError(anonymous, 400, 'unauthorized_client', description);
    });
  });
}
