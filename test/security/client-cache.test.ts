/**
 * The client cache (src/client-cache.ts): what it keeps and for how long, then attacked — a
 * copy of a client that is no longer true must never issue a token, and a secret must stop
 * working when it is replaced. The changes
 * come from a context of their own, as from the command line: on SQLite no message reaches
 * the server from it, so its copy stays stale for up to CLIENT_CACHE_TTL_MS, and only the
 * database's own checks stand between that copy and a token. (Across instances, where the
 * message does arrive: test/multi/instances.test.ts.)
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import * as oauth from 'oauth4webapi';
import { COMMAND_LINE } from '../../src/audit.ts';
import { CLIENT_CACHE_TTL_MS, createClientCache } from '../../src/client-cache.ts';
import { hashToken } from '../../src/tokens.ts';
import { removeClient, rotateClientSecret } from '../../src/clients/clients.ts';
import { type OpenContext } from '../../src/context.ts';
import { openContext } from '../../src/open-context.ts';
import { setClientBlocked, setClientDisabled, updateClient } from '../../src/store/clients.ts';
import { openStore, type Store } from '../../src/store/database.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import {
  authorizationUrl,
  discover,
  exchangeRequest,
  obtainCallback,
  obtainTokens,
  insecure,
  postForm,
  profile,
  refresh,
  refreshRequest,
  revokeToken,
  tokenResult,
  type App,
  type TokenResult,
} from '../support/oauth-client.ts';
import { DEVICE_CODE_GRANT_TYPE } from '../../src/oauth/grants/types.ts';
import { answerAtDevicePage, poll, pollRequest, requestCodes } from '../support/device.ts';
import { jwksOf, signingKey } from '../support/jwks-server.ts';
import { databaseUrl, gatehouse } from '../support/processes.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';
import { outlastClientCache } from '../support/waits.ts';

const basic = (clientId: string, secret: string) => ({ authorization: `Basic ${btoa(`${clientId}:${secret}`)}` });

/** Refused, never a 5xx, nothing issued. */
function assertRefused(result: TokenResult, what: string): void {
  assert.ok(result.status === 400 || result.status === 401, `${what}: ${result.status} ${JSON.stringify(result.body)}`);
  assert.equal(result.body.access_token, undefined, `${what}: a token was issued`);
}

for (const backend of BACKENDS) {
  describe(`the client cache (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let otherStore: Store;
    let other: OpenContext;
    // Low enough for one test to spend, above what any other here spends on one of its clients.
    const PER_CLIENT = 8;

    before(async () => {
      server = await startServer(backend, {
        DYNAMIC_CLIENT_REGISTRATION: 'true',
        TOKEN_REQUESTS_PER_ADDRESS: '0',
        TOKEN_REQUESTS_PER_CLIENT: String(PER_CLIENT),
      });
      await server.createUser('alice');
      otherStore = openStore(server.config.database);
      other = await openContext(server.config, otherStore, { info() {}, warn() {}, error() {} });
    });
    after(async () => {
      await other?.close();
      await otherStore?.close();
      await server?.close();
    });

    const ctx = () => server.app.gatehouse;
    const grantsOf = async (clientId: string) =>
      Number(
        (
          await server.store.db
            .selectFrom('grants')
            .select((eb) => eb.fn.countAll<number>().as('n'))
            .where('client_id', '=', clientId)
            .executeTakeFirstOrThrow()
        ).n,
      );
    /**
     * Replaces the client's secret in the database alone, a moment after the server read the
     * client, as a change whose message is lost: the server's copy keeps the old secret for the
     * next second, on either backend. The new secret.
     */
    const replaceSecretUnheard = async (clientId: string, current: string): Promise<string> => {
      await ctx().clients.findStored(clientId);
      const replacement = randomBytes(32).toString('base64url');
      await updateClient(otherStore.db, clientId, { secret_hash: hashToken(replacement) });
      assert.equal((await ctx().clients.find(clientId))?.secret_hash, hashToken(current), 'the server no longer holds the old copy: this tests nothing');
      return replacement;
    };
    /** Gives a public client a secret in the database alone, a moment after the server read it: its copy says public for the next second. The secret. */
    const giveSecretUnheard = async (clientId: string): Promise<string> => {
      await ctx().clients.findStored(clientId);
      const secret = randomBytes(32).toString('base64url');
      await updateClient(otherStore.db, clientId, { secret_hash: hashToken(secret) });
      assert.equal((await ctx().clients.find(clientId))?.secret_hash, null, 'the server no longer holds the public copy: this tests nothing');
      return secret;
    };
    /** With `app`'s credentials, what the refused requests left alone still works: the code is exchanged, the refresh token refreshed, and the new one revoked. */
    const assertRedeemable = async (app: App, outstanding: Awaited<ReturnType<typeof obtainCallback>>, refreshToken: string) => {
      assert.equal((await exchangeRequest(app, outstanding)).status, 200, 'the code the refused request left was consumed');
      const refreshed = await refresh(app, refreshToken);
      await revokeToken(app, refreshed.refresh_token!);
      assert.equal((await profile(server, refreshed.access_token)).status, 401);
    };
    /** On SQLite, that the server still holds its copy of the client: the attack goes through the stale copy. */
    const assertStillCached = async (clientId: string) => {
      if (backend.name === 'sqlite') assert.ok(await ctx().clients.find(clientId), 'the server no longer holds a copy of the client: this tests nothing');
    };

    test('the cache keeps only clients that exist, answers from memory, and believes an entry a second at most', async () => {
      // A cache of its own on a store of its own, so that every statement counted is its doing.
      const cache = createClientCache(otherStore.db);
      const { client } = await server.createClient({ name: 'Cached' });
      const sent = otherStore.statements();
      assert.equal(await cache.find('00000000-0000-4000-8000-000000000000'), undefined);
      assert.equal(await cache.find('00000000-0000-4000-8000-000000000000'), undefined);
      assert.equal(otherStore.statements() - sent, 2, 'an unknown id was remembered');
      const [first, second] = await Promise.all([cache.find(client.id), cache.find(client.id)]);
      assert.equal(first?.name, 'Cached');
      assert.equal(second, first);
      assert.equal(otherStore.statements() - sent, 3, 'two requests at once for one client read it more than once');
      assert.equal((await cache.find(client.id))?.name, 'Cached');
      assert.equal(otherStore.statements() - sent, 3, 'a cached client was read again');

      await updateClient(server.store.db, client.id, { name: 'Renamed' }); // a change no message reports
      assert.equal((await cache.find(client.id))?.name, 'Cached');
      await outlastClientCache();
      assert.equal((await cache.find(client.id))?.name, 'Renamed');
    });

    test('a read under way when its client is forgotten is not kept: it may predate the change', async () => {
      const cache = createClientCache(otherStore.db);
      const { client } = await server.createClient({ name: 'Before' });
      const reading = cache.find(client.id);
      cache.forget([client.id]);
      assert.equal((await reading)?.name, 'Before');
      await updateClient(server.store.db, client.id, { name: 'After' });
      assert.equal((await cache.find(client.id))?.name, 'After');
    });

    test('the old secret after a rotation on this instance: refused at once', async () => {
      const { client, secret } = await server.createClient({ name: 'Rotated', confidential: true });
      const introspect = async (presented: string) =>
        (await postForm(server, '/oauth/introspect', { token: 'gat_unknown' }, basic(client.id, presented))).status;
      assert.equal(await introspect(secret!), 200); // the client is cached now
      const replacement = await rotateClientSecret(ctx(), client, COMMAND_LINE);
      assert.equal(await introspect(secret!), 401);
      assert.equal(await introspect(replacement), 200);
    });

    test('the old secret after a rotation elsewhere, the client still cached here: refused at once, no token, no introspection', async () => {
      const service = await server.createClient({ name: 'Rotated elsewhere', grantType: 'client_credentials', redirectUris: [], confidential: true });
      const credentials = async (secret: string) =>
        tokenResult(await postForm(server, '/api/token', { grant_type: 'client_credentials' }, basic(service.client.id, secret)));
      const introspect = async (secret: string) =>
        (await postForm(server, '/oauth/introspect', { token: 'gat_unknown' }, basic(service.client.id, secret))).status;
      assert.equal((await credentials(service.secret!)).status, 200); // the client is cached now
      const replacement = await rotateClientSecret(other, service.client, COMMAND_LINE);
      await assertStillCached(service.client.id);
      assertRefused(await credentials(service.secret!), 'client credentials with the old secret');
      assert.equal(await introspect(service.secret!), 401);
      assert.equal((await credentials(replacement)).status, 200);
    });

    test('the old secret after a replacement elsewhere, the client still cached here: its codes, refresh token and revocation are refused as invalid_client and change nothing; the new secret works at once', async () => {
      // A confidential client's secret is checked against the copy here, then confirmed by the
      // stored secret hash read with the code or token (src/oauth/client-auth.ts `confirmSecret`).
      const { client, secret } = await server.createClient({ name: 'Rotated under its codes', confidential: true });
      const agent = new UserAgent(server.url);
      const withOld = await discover(server, client.id, { secret: secret! });
      const exchanged = await obtainCallback(withOld, agent);
      const tokens = await oauth.processAuthorizationCodeResponse(withOld.as, withOld.client, await exchangeRequest(withOld, exchanged));
      const outstanding = await obtainCallback(withOld, agent);
      const grants = await grantsOf(client.id);
      const replacement = await replaceSecretUnheard(client.id, secret!);
      const unknownCode = { grant_type: 'authorization_code', code: 'gac_unknown', redirect_uri: withOld.redirectUri, code_verifier: outstanding.verifier };
      for (const [what, response] of [
        ['the outstanding code', await exchangeRequest(withOld, outstanding)],
        ['the code exchanged already (a replay would revoke its grant)', await exchangeRequest(withOld, exchanged)],
        ['an unknown code', await postForm(server, '/api/token', unknownCode, basic(client.id, secret!))],
        ['the refresh token', await refreshRequest(withOld, tokens.refresh_token!)],
        ['a revocation', await oauth.revocationRequest(withOld.as, withOld.client, withOld.auth, tokens.refresh_token!, insecure)],
        ['a revocation of an unknown token', await oauth.revocationRequest(withOld.as, withOld.client, withOld.auth, 'gar_unknown', insecure)],
      ] as const) {
        const body = (await response.json()) as { error?: string };
        assert.deepEqual([response.status, body.error], [401, 'invalid_client'], what);
        assert.match(response.headers.get('www-authenticate') ?? '', /^Basic /, `${what}: no Basic challenge`);
      }
      assert.equal(await grantsOf(client.id), grants, 'a grant was made with the old secret');
      assert.equal((await profile(server, tokens.access_token)).status, 200, 'the old secret revoked the grant');

      // The copy here predates the newest secret, which works anyway: the stored row decides a secret the copy refuses.
      const withNewest = await discover(server, client.id, { secret: await replaceSecretUnheard(client.id, replacement) });
      await assertRedeemable(withNewest, outstanding, tokens.refresh_token!);
    });

    test('a public client given a secret elsewhere, still cached here as public: its code, refresh token, revocation and pushed request by client_id alone are refused as invalid_client and change nothing; with the secret they work', async () => {
      const { client } = await server.createClient({ name: 'Public until now', confidential: false });
      const asPublic = await discover(server, client.id);
      const agent = new UserAgent(server.url);
      const tokens = await obtainTokens(asPublic, agent);
      const outstanding = await obtainCallback(asPublic, agent);
      const { url: pushed } = await authorizationUrl(asPublic);
      const secret = await giveSecretUnheard(client.id);
      for (const [what, response] of [
        ['the outstanding code', await exchangeRequest(asPublic, outstanding)],
        ['the refresh token', await refreshRequest(asPublic, tokens.refresh_token!)],
        ['a revocation', await oauth.revocationRequest(asPublic.as, asPublic.client, asPublic.auth, tokens.refresh_token!, insecure)],
        ['a pushed authorization request', await oauth.pushedAuthorizationRequest(asPublic.as, asPublic.client, asPublic.auth, pushed.searchParams, insecure)],
      ] as const) {
        assert.deepEqual([response.status, ((await response.json()) as { error?: string }).error], [401, 'invalid_client'], what);
      }
      assert.equal((await profile(server, tokens.access_token)).status, 200, 'the grant was revoked');
      await assertRedeemable(await discover(server, client.id, { secret }), outstanding, tokens.refresh_token!);
    });

    test('a public client given keys elsewhere, still cached here as public: its refresh token by client_id alone is refused as invalid_client', async () => {
      const { client } = await server.createClient({ name: 'Keyless until now', confidential: false });
      const asPublic = await discover(server, client.id);
      const tokens = await obtainTokens(asPublic, new UserAgent(server.url));
      await ctx().clients.findStored(client.id);
      await updateClient(otherStore.db, client.id, { jwks: JSON.stringify(jwksOf(await signingKey('ES256', 'new-key'))) });
      assert.equal((await ctx().clients.find(client.id))?.jwks, null, 'the server no longer holds the keyless copy: this tests nothing');
      const refused = await refreshRequest(asPublic, tokens.refresh_token!);
      assert.deepEqual([refused.status, ((await refused.json()) as { error?: string }).error], [401, 'invalid_client']);
      assert.equal((await profile(server, tokens.access_token)).status, 200, 'the grant was revoked');
    });

    test('a public device client given a secret elsewhere, still cached here as public: its device code polled by client_id alone is refused as invalid_client, no poll recorded; with the secret it is exchanged', async () => {
      const { client } = await server.createClient({ name: 'Public TV', grantType: DEVICE_CODE_GRANT_TYPE, redirectUris: [], confidential: false });
      const asPublic = await discover(server, client.id);
      const codes = await requestCodes(asPublic);
      const agent = new UserAgent(server.url);
      await agent.login('alice');
      await answerAtDevicePage(agent, codes, 'approve');
      server.advance(5); // the device code's interval, which applies to its first poll too
      const secret = await giveSecretUnheard(client.id);
      const refused = await pollRequest(asPublic, codes.device_code);
      assert.deepEqual([refused.status, ((await refused.json()) as { error?: string }).error], [401, 'invalid_client']);
      const exchanged = await poll(await discover(server, client.id, { secret }), codes.device_code);
      assert.equal(exchanged.status, 200, JSON.stringify(exchanged.body));
    });

    test('the old secret on a device code after a replacement elsewhere, the client still cached here: refused as invalid_client, the approval kept and nothing recorded; the new secret exchanges it', async () => {
      // The device-code load confirms the secret as the code's does (loadsClientCredentials).
      const { client, secret } = await server.createClient({ name: 'Kitchen TV', grantType: DEVICE_CODE_GRANT_TYPE, redirectUris: [], confidential: true });
      const app = await discover(server, client.id, { secret: secret! });
      const codes = await requestCodes(app);
      const agent = new UserAgent(server.url);
      await agent.login('alice');
      assert.equal((await answerAtDevicePage(agent, codes, 'approve')).response.status, 200);
      const grants = await grantsOf(client.id);
      server.advance(5); // the device code's interval, which applies to its first poll too
      const replacement = await replaceSecretUnheard(client.id, secret!);
      const refused = await pollRequest(app, codes.device_code);
      assert.deepEqual([refused.status, ((await refused.json()) as { error?: string }).error], [401, 'invalid_client']);
      assert.match(refused.headers.get('www-authenticate') ?? '', /^Basic /);
      assert.equal(await grantsOf(client.id), grants, 'a grant was made with the old secret');
      // Nothing was recorded against the code: not its use, nor a poll, which would make this one too soon.
      const withNew = await discover(server, client.id, { secret: replacement });
      const exchanged = await poll(withNew, codes.device_code);
      assert.equal(exchanged.status, 200, JSON.stringify(exchanged.body));
      assert.equal((await profile(server, exchanged.body.access_token!)).status, 200);
    });

    test("a confidential client's code exchange, refresh and revocation send as many statements as a public client's: its secret is confirmed by the read of what it redeems", async () => {
      const agent = new UserAgent(server.url);
      /** The statements each step sent, the fewest of three rounds (a background job's statement may land in one). */
      const statementsOf = async (confidential: boolean) => {
        const { client, secret } = await server.createClient({ name: `Counted (${confidential ? 'confidential' : 'public'})`, confidential });
        const app = await discover(server, client.id, { secret });
        const fewest = [Infinity, Infinity, Infinity];
        for (let round = 0; round < 3; round++) {
          const authorized = await obtainCallback(app, agent);
          await ctx().clients.find(client.id); // a copy held, as for every client in use
          const counted = async <T>(step: number, request: () => Promise<T>): Promise<T> => {
            const before = server.store.statements();
            const result = await request();
            fewest[step] = Math.min(fewest[step]!, server.store.statements() - before);
            return result;
          };
          const tokens = await counted(0, async () => oauth.processAuthorizationCodeResponse(app.as, app.client, await exchangeRequest(app, authorized)));
          const refreshed = await counted(1, () => refresh(app, tokens.refresh_token!));
          await counted(2, () => revokeToken(app, refreshed.refresh_token!));
        }
        return fewest;
      };
      assert.deepEqual(await statementsOf(true), await statementsOf(false));
    });

    test('a confidential client blocked or disabled elsewhere, still cached here: its secret is refused at once', async () => {
      for (const [name, switchOff] of [
        ['blocked', setClientBlocked],
        ['disabled', setClientDisabled],
      ] as const) {
        const service = await server.createClient({
          name: `Switched off elsewhere (${name})`,
          grantType: 'client_credentials',
          redirectUris: [],
          confidential: true,
        });
        const credentials = async () =>
          tokenResult(await postForm(server, '/api/token', { grant_type: 'client_credentials' }, basic(service.client.id, service.secret!)));
        const introspect = async () =>
          (await postForm(server, '/oauth/introspect', { token: 'gat_unknown' }, basic(service.client.id, service.secret!))).status;
        assert.equal((await credentials()).status, 200);
        await ctx().clients.findStored(service.client.id); // cached now, a moment before the change: well within the cache's second
        // The flag alone, which sends no message: the copy held here still says the client is in service.
        assert.equal(await switchOff(otherStore.db, service.client.id, true), true);
        const held = await ctx().clients.find(service.client.id);
        assert.deepEqual([held?.blocked, held?.disabled], [0, 0], 'the server no longer holds a stale copy of the client: this tests nothing');
        // Introspection writes nothing: only the check of the secret against the stored row refuses it.
        // (The write of client credentials would refuse a switched-off client by itself.)
        assert.equal(await introspect(), 401, name);
        assertRefused(await credentials(), `client credentials of the ${name} client`);
        assert.equal(await grantsOf(service.client.id), 1, `a grant was made after the client was ${name}`);
      }
    });

    test('a confidential client blocked or disabled elsewhere, still cached here: its replayed code, reused refresh token and revocation are refused as invalid_client and revoke nothing', async () => {
      for (const [name, switchOff] of [
        ['blocked', setClientBlocked],
        ['disabled', setClientDisabled],
      ] as const) {
        const { client, secret } = await server.createClient({ name: `Switched off under its grant (${name})`, confidential: true });
        const app = await discover(server, client.id, { secret: secret! });
        const exchanged = await obtainCallback(app, new UserAgent(server.url));
        const tokens = await oauth.processAuthorizationCodeResponse(app.as, app.client, await exchangeRequest(app, exchanged));
        const refreshed = await refresh(app, tokens.refresh_token!);
        await ctx().clients.findStored(client.id); // cached now, a moment before the change
        assert.equal(await switchOff(otherStore.db, client.id, true), true); // the flag alone: no message, nothing revoked
        const held = await ctx().clients.find(client.id);
        assert.deepEqual([held?.blocked, held?.disabled], [0, 0], 'the server no longer holds a stale copy of the client: this tests nothing');
        for (const [what, response] of [
          ['the code exchanged already (a replay would revoke its grant)', await exchangeRequest(app, exchanged)],
          ['the refresh token used already (a reuse would revoke its grant)', await refreshRequest(app, tokens.refresh_token!)],
          ['a revocation', await oauth.revocationRequest(app.as, app.client, app.auth, refreshed.refresh_token!, insecure)],
        ] as const) {
          const body = (await response.json()) as { error?: string };
          assert.deepEqual([response.status, body.error], [401, 'invalid_client'], `${what} (${name})`);
        }
        assert.equal(await switchOff(otherStore.db, client.id, false), true);
        await outlastClientCache();
        assert.equal((await profile(server, refreshed.access_token)).status, 200, `the grant was revoked while the client was ${name}`);
      }
    });

    test('requests with the old secret after a replacement elsewhere, the client still cached here, spend nothing of its budget', async () => {
      const { client, secret } = await server.createClient({ name: 'Budgeted', confidential: true });
      const agent = new UserAgent(server.url);
      const withOld = await discover(server, client.id, { secret: secret! });
      const outstanding = await obtainCallback(withOld, agent);
      const replacement = await replaceSecretUnheard(client.id, secret!);
      for (let sent = 0; sent < PER_CLIENT + 1; sent++) assert.equal((await exchangeRequest(withOld, outstanding)).status, 401);
      const withNew = await discover(server, client.id, { secret: replacement });
      assert.equal((await exchangeRequest(withNew, outstanding)).status, 200, 'the old secret spent the budget of the client that holds the new one');
    });

    test('a client deleted elsewhere, still cached here: its code, refresh token and client credentials yield nothing', async () => {
      const { client } = await server.createClient({ name: 'Deleted' });
      const app = await discover(server, client.id);
      const agent = new UserAgent(server.url);
      const tokens = await obtainTokens(app, agent); // the exchange caches the client
      const outstanding = await obtainCallback(app, agent);
      const service = await server.createClient({ name: 'Deleted service', grantType: 'client_credentials', redirectUris: [], confidential: true });
      const credentials = () => postForm(server, '/api/token', { grant_type: 'client_credentials' }, basic(service.client.id, service.secret!));
      assert.equal((await credentials()).status, 200); // cached too

      assert.equal(await removeClient(other, client.id, COMMAND_LINE), true);
      assert.equal(await removeClient(other, service.client.id, COMMAND_LINE), true);
      await assertStillCached(client.id);
      assertRefused(await tokenResult(await exchangeRequest(app, outstanding)), 'the outstanding code');
      assertRefused(await tokenResult(await refreshRequest(app, tokens.refresh_token!)), 'the refresh token');
      assertRefused(await tokenResult(await credentials()), 'client credentials');
      assert.equal((await profile(server, tokens.access_token)).status, 401);
      assert.equal(await grantsOf(client.id), 0);
      assert.equal(await grantsOf(service.client.id), 0);
    });

    test('a client blocked elsewhere, still cached here: its code and refresh token yield nothing', async () => {
      const registered = await postForm(
        server,
        '/oauth/register',
        JSON.stringify({ client_name: 'Blocked', redirect_uris: ['http://127.0.0.1:8765/callback'] }),
        { 'content-type': 'application/json' },
      );
      const { client_id: clientId } = (await registered.json()) as { client_id: string };
      const app = await discover(server, clientId);
      const agent = new UserAgent(server.url);
      const tokens = await obtainTokens(app, agent);
      const outstanding = await obtainCallback(app, agent);

      // The flag alone, without the revocation and voiding that `gatehouse client block` adds:
      // only the token writes' own check of the client stands between the stale copy and a token.
      assert.equal(await setClientBlocked(otherStore.db, clientId, true), true);
      await assertStillCached(clientId);
      assertRefused(await tokenResult(await exchangeRequest(app, outstanding)), 'the outstanding code');
      assertRefused(await tokenResult(await refreshRequest(app, tokens.refresh_token!)), 'the refresh token');
      assert.equal(await grantsOf(clientId), 1, 'a grant was made after the block');
    });

    test(`a client deleted by the command line while the server runs: seen within ${CLIENT_CACHE_TTL_MS} ms`, async () => {
      const { client, secret } = await server.createClient({ name: 'Deleted by the CLI', confidential: true });
      const introspect = async () => (await postForm(server, '/oauth/introspect', { token: 'gat_unknown' }, basic(client.id, secret!))).status;
      // Asked all along, so that the server's copy is never older than the cache allows.
      let asking = true;
      const statuses: number[] = [];
      const polling = (async () => {
        while (asking) {
          statuses.push(await introspect());
          await sleep(20);
        }
      })();
      try {
        const run = await gatehouse(['client', 'delete', client.id], { DATABASE_URL: databaseUrl(server.config) });
        assert.equal(run.code, 0, run.stderr);
        const deletedBy = performance.now();
        while ((await introspect()) !== 401) {
          assert.ok(performance.now() - deletedBy < CLIENT_CACHE_TTL_MS + 500, 'the deleted client still authenticates');
          await sleep(10);
        }
      } finally {
        asking = false;
        await polling;
      }
      assert.ok(statuses.length > 0 && statuses.every((status) => status === 200 || status === 401), statuses.join(' '));
    });
  });
}
