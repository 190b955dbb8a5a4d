/**
 * SPEC §4.15, the provider's token for an MCP server: a connection created with --keep-tokens
 * keeps the provider's tokens of each login, sealed under KEYS_SECRET, and a resource server
 * allowed for it (--token-resource) exchanges a person's Gatehouse token for the person's
 * provider token, through openid-client's generic grant call. The provider here is a second
 * Gatehouse behind https, so the token handed over is checked where it counts: at the
 * provider's own API. Attacks: a resource server not allowed, another resource server's token,
 * a revoked token, a client that is no resource server; the tokens are refreshed at the provider
 * once expired (tried again when the provider cannot be reached; a refresh token it refuses is
 * not sent again), and deleted when the person disconnects or is disabled, or the connection
 * stops keeping them. A GitHub App's expiring user tokens, through the github preset: GitHub
 * refuses a refresh token with status 200 and its own error code, and that is a refusal too.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as oidc from 'openid-client';
import { COMMAND_LINE } from '../../src/audit.ts';
import { disableUser, enableUser, findUserNamed } from '../../src/accounts/users.ts';
import { connectionNamed, createConnection, describeConnection, slugOf, updateConnectionSettings } from '../../src/accounts/connections/connections.ts';
import { findResourceNamed, removeResource } from '../../src/clients/resources.ts';
import { unlinkIdentity } from '../../src/accounts/connections/federated-login.ts';
import { ACCESS_TOKEN_URN, TOKEN_EXCHANGE_GRANT_TYPE } from '../../src/oauth/grants/types.ts';
import { revoke } from '../../src/oauth/revocation.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { discover, obtainTokens, postForm, profile, revokeToken, type App } from '../support/oauth-client.ts';
import { registerResourceServer, type ResourceServer } from '../support/resources.ts';
import { assertNoSecretsLogged, assertOAuthError } from '../support/responses.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { testCaProblem } from '../support/tls.ts';
import { startGitHubStandIn, startTlsProxy } from '../support/upstream-providers.ts';
import { UserAgent } from '../support/user-agent.ts';
import { connect, keepTokensOfGatehouse, logInThrough } from '../support/upstream-login.ts';
import { databaseUrl, gatehouse } from '../support/processes.ts';
import { scrape } from '../support/metrics.ts';
import { freePort } from '../support/ports.ts';

const MCP = 'https://mcp.example/github-tools';
const OTHER = 'https://other.example/api';
const KEYS_SECRET = 'vault-test-keys-secret-0123456789abcdef';

for (const backend of BACKENDS) {
  describe(
    `the provider's token for an MCP server (${backend.name})`,
    { ...backendOptions(backend), ...(testCaProblem() ? { skip: testCaProblem()! } : {}) },
    () => {
      let proxy: Awaited<ReturnType<typeof startTlsProxy>>;
      let upstream: TestServer;
      let server: TestServer;
      let mcp: ResourceServer;
      let other: ResourceServer;
      let app: App;
      let person: UserAgent;
      const id = slugOf('Head office');

      /** ursula logs in at Gatehouse through the connection (she logs in at the provider first). */
      async function logInThroughProvider(): Promise<void> {
        const start = await person.visit(`/login/connections/${id}`);
        const approved = await new UserAgent(proxy.origin).authorize(start.redirect!, { username: 'ursula' });
        const done = await person.visit(approved.redirect!.pathname + approved.redirect!.search);
        assert.equal(done.response.status, 200, done.html.slice(0, 300));
      }

      /** The MCP client's token for the MCP server, as ursula approves it. */
      const tokenForMcp = async () => (await obtainTokens(app, person, 'ursula', { scope: 'tools:use', resource: MCP })).access_token;

      const exchangeRaw = (rs: ResourceServer, params: Record<string, string>) =>
        postForm(server, '/api/token', {
          grant_type: TOKEN_EXCHANGE_GRANT_TYPE,
          client_id: rs.introspector.client.client_id,
          client_secret: rs.secret,
          audience: id,
          subject_token_type: ACCESS_TOKEN_URN,
          ...params,
        });

      before(async () => {
        proxy = await startTlsProxy();
        upstream = await startServer(backend, { PUBLIC_URL: proxy.origin, ACCESS_TOKEN_TTL: '600' });
        proxy.target(Number(new URL(upstream.url).port));
        server = await startServer(backend, { KEYS_SECRET });
        await upstream.createUser('ursula');
        mcp = await registerResourceServer(server, MCP, [{ name: 'tools:use', description: 'Use the tools' }], 'GitHub tools (MCP)');
        other = await registerResourceServer(server, OTHER, [{ name: 'other:use', description: 'Other' }], 'Other API');
        await keepTokensOfGatehouse(server, upstream, proxy.origin, [MCP]);
        const registered = await server.createClient({ name: 'MCP client', scope: 'tools:use other:use' });
        app = await discover(server, registered.client.id);
        person = new UserAgent(server.url);
        await logInThroughProvider();
      });
      after(async () => {
        await server?.close();
        await upstream?.close();
        await proxy?.close();
      });

      test("the MCP server exchanges the person's token for their provider token, which opens the provider's API as them", async () => {
        const config = await oidc.discovery(new URL(server.url), mcp.introspector.client.client_id, mcp.secret, undefined, {
          execute: [oidc.allowInsecureRequests],
        });
        const handed = await oidc.genericGrantRequest(config, TOKEN_EXCHANGE_GRANT_TYPE, {
          subject_token: await tokenForMcp(),
          subject_token_type: ACCESS_TOKEN_URN,
          audience: id,
        });
        assert.equal(handed.issued_token_type, ACCESS_TOKEN_URN);
        assert.equal(handed.refresh_token, undefined, "the provider's refresh token never leaves Gatehouse");
        const atProvider = await profile(upstream, handed.access_token);
        assert.equal(atProvider.status, 200);
        assert.equal(((await atProvider.json()) as { username: string }).username, 'ursula');

        const stored = await server.store.db.selectFrom('user_identities').select('provider_tokens').executeTakeFirstOrThrow();
        assert.ok(stored.provider_tokens!.split('.').length === 5, 'kept as a JWE');
        assert.ok(!stored.provider_tokens!.includes(handed.access_token));
        const audited = await server.store.db.selectFrom('audit_events').select('detail').where('type', '=', 'provider_token_issued').execute();
        assert.deepEqual(JSON.parse(audited[0]!.detail!), { connection: id, resource: MCP });
        assertNoSecretsLogged(server.logs);
        assert.ok(!server.logs.some((line) => line.includes(handed.access_token)));
      });

      test("refused: a resource server not allowed, another resource server's token, a revoked token, an unknown connection, a client that is no resource server", async () => {
        const forMcp = await tokenForMcp();
        await assertOAuthError(
          await exchangeRaw(other, { subject_token: forMcp }),
          400,
          'invalid_target',
          "this resource server may not have that connection's provider tokens: an administrator allows it with --token-resource",
        );
        const forOther = (await obtainTokens(app, person, 'ursula', { scope: 'other:use', resource: OTHER }).catch(() => null))?.access_token;
        if (forOther)
          await assertOAuthError(
            await exchangeRaw(mcp, { subject_token: forOther }),
            400,
            'invalid_request',
            'the subject_token is invalid, expired or revoked',
          );
        await assertOAuthError(
          await exchangeRaw(mcp, { subject_token: forMcp, audience: 'no-such-connection' }),
          400,
          'invalid_target',
          'no connection keeps provider tokens under that audience',
        );
        const plain = await server.createClient({ name: 'Not a resource server', confidential: true, scope: 'tools:use', tokenExchange: true });
        await assertOAuthError(
          await postForm(server, '/api/token', {
            grant_type: TOKEN_EXCHANGE_GRANT_TYPE,
            client_id: plain.client.id,
            client_secret: plain.secret!,
            audience: id,
            subject_token: forMcp,
            subject_token_type: ACCESS_TOKEN_URN,
          }),
          400,
          'unauthorized_client',
          "only a resource server's own client may exchange a person's token for their provider token",
        );
        const revoked = await obtainTokens(app, person, 'ursula', { scope: 'tools:use', resource: MCP });
        await revokeToken(app, revoked.refresh_token!);
        await assertOAuthError(
          await exchangeRaw(mcp, { subject_token: revoked.access_token }),
          400,
          'invalid_request',
          'the subject_token is invalid, expired or revoked',
        );
        assert.equal((await server.store.db.selectFrom('audit_events').select('id').where('type', '=', 'provider_token_issued').execute()).length, 1);
      });

      test('an expired provider token is refreshed at the provider, kept again, and the new one works there', async () => {
        const before = (await (await exchangeRaw(mcp, { subject_token: await tokenForMcp() })).json()) as { access_token: string; expires_in: number };
        assert.ok(before.expires_in <= 600);
        server.advance(601);
        const subject = await tokenForMcp();
        // Two at once: one refresh at the provider, both answered with its token.
        const [after, twin] = (await Promise.all([0, 1].map(async () => (await exchangeRaw(mcp, { subject_token: subject })).json()))) as Array<{
          access_token: string;
          expires_in: number;
        }>;
        assert.equal(twin!.access_token, after!.access_token);
        const refreshes = await upstream.store.db.selectFrom('audit_events').select('id').where('type', '=', 'token_refreshed').execute();
        assert.equal(refreshes.length, 1, 'the provider was asked once');
        assert.notEqual(after!.access_token, before.access_token, 'a new provider token');
        assert.ok(after!.expires_in > 500);
        assert.equal((await profile(upstream, after!.access_token)).status, 200);
        const again = (await (await exchangeRaw(mcp, { subject_token: subject })).json()) as { access_token: string };
        assert.equal(again.access_token, after!.access_token, 'kept: not refreshed again');
      });

      test('a provider that cannot be reached is asked again at the next exchange; a refresh token it refuses is forgotten, and not sent again', async () => {
        const expired = "the person's Head office token has expired and could not be renewed: they log in with Head office again";
        const vault = async () => ({
          ...(await server.store.db
            .selectFrom('user_identities')
            .select(['provider_tokens', 'provider_tokens_refreshing_until'])
            .where('connection_id', '=', id)
            .executeTakeFirstOrThrow()),
        });
        const exchangeForProvider = async () => exchangeRaw(mcp, { subject_token: await tokenForMcp() });

        // Unreachable (nothing listens where the provider's address leads): kept as they were, the lease given back.
        server.advance(601);
        const stale = await vault();
        proxy.target(await freePort());
        await assertOAuthError(await exchangeForProvider(), 400, 'invalid_grant', expired);
        assert.deepEqual(await vault(), { provider_tokens: stale.provider_tokens, provider_tokens_refreshing_until: null });
        proxy.target(Number(new URL(upstream.url).port));
        const renewed = (await (await exchangeForProvider()).json()) as { access_token: string };
        assert.equal((await profile(upstream, renewed.access_token)).status, 200, 'refreshed once the provider answers again');

        // Refused: every token of hers at the provider is revoked there, the kept refresh token with them.
        await revoke(upstream.app.gatehouse, { userId: (await findUserNamed(upstream.app.gatehouse, 'ursula'))!.id }, 'revoked');
        server.advance(601);
        const refusedThere = 'gatehouse_request_failures_total{error="invalid_grant",status="400"}';
        const before = (await scrape(upstream)).get(refusedThere) ?? 0;
        const dead = await vault();
        await assertOAuthError(await exchangeForProvider(), 400, 'invalid_grant', expired);
        const forgotten = await vault();
        assert.notEqual(forgotten.provider_tokens, dead.provider_tokens, 'kept again, without the refresh token');
        assert.equal(forgotten.provider_tokens_refreshing_until, null, 'the lease ended with that write');
        for (let i = 0; i < 2; i++) await assertOAuthError(await exchangeForProvider(), 400, 'invalid_grant', expired);
        assert.equal(((await scrape(upstream)).get(refusedThere) ?? 0) - before, 1, 'the provider was asked once');
        const [event] = await server.store.db.selectFrom('audit_events').select('detail').where('type', '=', 'provider_refresh_refused').execute();
        assert.deepEqual(JSON.parse(event!.detail!), { connection: id, error: 'invalid_grant' });

        // Her next login through the connection keeps new tokens, which work at the provider.
        await logInThroughProvider();
        const handed = (await (await exchangeForProvider()).json()) as { access_token: string };
        assert.equal((await profile(upstream, handed.access_token)).status, 200);
      });

      test('disabling the person, a connection that stops keeping them, or disconnecting deletes their provider tokens', async () => {
        const ctx = server.app.gatehouse;
        const kept = async () =>
          (await server.store.db.selectFrom('user_identities').select('provider_tokens').where('connection_id', '=', id).executeTakeFirst())?.provider_tokens ??
          null;
        const noneKept = 'no Head office token is kept for this person: they log in with Head office first';
        assert.notEqual(await kept(), null);
        await disableUser(ctx, (await findUserNamed(ctx, 'ursula'))!, COMMAND_LINE);
        assert.equal(await kept(), null);
        await enableUser(ctx, (await findUserNamed(ctx, 'ursula'))!, COMMAND_LINE);
        person = new UserAgent(server.url);
        await logInThroughProvider();
        assert.notEqual(await kept(), null, 'kept again at the next login');

        await updateConnectionSettings(ctx, id, { keepTokens: false }, COMMAND_LINE);
        assert.equal(await kept(), null);
        await assertOAuthError(
          await exchangeRaw(mcp, { subject_token: await tokenForMcp() }),
          400,
          'invalid_target',
          'no connection keeps provider tokens under that audience',
        );
        await updateConnectionSettings(ctx, id, { keepTokens: true }, COMMAND_LINE);
        await assertOAuthError(await exchangeRaw(mcp, { subject_token: await tokenForMcp() }), 400, 'invalid_grant', noneKept);
        await logInThroughProvider();
        assert.notEqual(await kept(), null);

        // Disconnected (an administrator's unlink: this connection is her only way to log in).
        const subject = await tokenForMcp();
        assert.equal(await unlinkIdentity(ctx, (await findUserNamed(ctx, 'ursula'))!, id, { actor: COMMAND_LINE, mustKeepAWay: false }), 'unlinked');
        assert.equal(await kept(), null);
        await assertOAuthError(await exchangeRaw(mcp, { subject_token: subject }), 400, 'invalid_grant', noneKept);
      });

      test('--keep-tokens needs KEYS_SECRET, and --token-resource a registered resource server, from the command line too', async () => {
        const ctx = server.app.gatehouse;
        const env = { DATABASE_URL: databaseUrl(server.config), PUBLIC_URL: server.url, KEYS_SECRET };
        const updated = await gatehouse(['connection', 'update', id, '--token-resource', MCP, '--token-resource', `${OTHER}/`, '--json'], env);
        assert.equal(updated.code, 0, updated.stderr);
        const shown = JSON.parse(updated.stdout) as { keep_tokens: boolean; token_resources: string[] };
        assert.deepEqual([shown.keep_tokens, shown.token_resources], [true, [MCP, OTHER]]);
        // A resource server deleted is off the list: another registered later at its URI is not it —
        // even where the list still names the URI (an administrator's edit of the connection that read
        // the list before the deletion and wrote it after): the list holds the one that was allowed.
        const listedBefore = (await connectionNamed(ctx, id)).token_resources;
        await removeResource(ctx, (await findResourceNamed(ctx, OTHER))!, COMMAND_LINE);
        assert.deepEqual(describeConnection(ctx, await connectionNamed(ctx, id)).token_resources, [MCP]);
        await server.store.db.updateTable('connections').set({ token_resources: listedBefore }).where('id', '=', id).execute();
        const successor = await registerResourceServer(server, OTHER, [{ name: 'other:later', description: 'Later' }], 'Registered later');
        await assertOAuthError(
          await exchangeRaw(successor, { subject_token: 'refused before the subject token is read' }),
          400,
          'invalid_target',
          "this resource server may not have that connection's provider tokens: an administrator allows it with --token-resource",
        );
        const emptied = JSON.parse((await gatehouse(['connection', 'update', id, '--token-resource', '', '--json'], env)).stdout) as typeof shown;
        assert.deepEqual(emptied.token_resources, []);
        // The cap counts resource servers, not names: one named 60 times, however written, is one.
        const spellings = [` ${MCP}`, `${MCP}/`, MCP.replace('mcp.example', 'MCP.Example')];
        const repeated = await updateConnectionSettings(ctx, id, { tokenResources: Array.from({ length: 60 }, (_, n) => spellings[n % 3]!) }, COMMAND_LINE);
        assert.deepEqual(describeConnection(ctx, repeated).token_resources, [MCP]);
        const fifty = Array.from({ length: 49 }, (_, n) => `https://rs${n}.example/mcp`);
        await assert.rejects(
          updateConnectionSettings(ctx, id, { tokenResources: [...fifty, MCP, `${MCP}/`] }, COMMAND_LINE),
          /Resource server https:\/\/rs0\.example\/mcp is not registered/,
          'fifty resource servers, one of them written twice, are within the cap: the first unknown one is refused',
        );
        await assert.rejects(
          updateConnectionSettings(ctx, id, { tokenResources: Array.from({ length: 51 }, (_, n) => `https://rs${n}.example/mcp`) }, COMMAND_LINE),
          /At most 50 resource servers may be named/,
        );
        // Without KEYS_SECRET this database does not even open (its keys are sealed): a server without one, below.
        await assert.rejects(
          updateConnectionSettings(ctx, id, { tokenResources: ['https://unknown.example/mcp'] }, COMMAND_LINE),
          /Resource server https:\/\/unknown\.example\/mcp is not registered/,
        );
        const plain = await startServer(backend);
        try {
          await assert.rejects(
            createConnection(plain.app.gatehouse, { name: 'Keeper', issuer: proxy.origin, clientId: 'x', clientSecret: 'y', keepTokens: true }, COMMAND_LINE),
            /Keeping the provider’s tokens needs KEYS_SECRET/,
          );
        } finally {
          await plain.close();
        }
      });
    },
  );
}

// What this tells apart is the provider's answer, not the store: the default backend is enough.
describe("a GitHub App's expiring user tokens, kept for an MCP server", testCaProblem() ? { skip: testCaProblem()! } : {}, () => {
  let github: Awaited<ReturnType<typeof startGitHubStandIn>>;
  let server: TestServer;
  let mcp: ResourceServer;
  let app: App;
  let person: UserAgent;
  let id: string;
  const mona = { id: 583231, login: 'mona', emails: [{ email: 'mona@mona.example', primary: true, verified: true }] };

  before(async () => {
    [github, server] = await Promise.all([startGitHubStandIn({ expiringUserTokens: true }), startServer(BACKENDS[0]!, { KEYS_SECRET })]);
    mcp = await registerResourceServer(server, MCP, [{ name: 'tools:use', description: 'Use the tools' }], 'GitHub tools (MCP)');
    id = (await connect(server, github, { name: 'GitHub', preset: 'github', baseUrl: github.baseUrl, keepTokens: true, tokenResources: [MCP] })).id;
    const registered = await server.createClient({ name: 'MCP client', scope: 'tools:use' });
    app = await discover(server, registered.client.id);
    person = new UserAgent(server.url);
    github.nextLogin(mona);
    await logInThrough(person, id, github.baseUrl);
  });
  after(async () => {
    await server?.close();
    await github?.close();
  });

  /** Mona's GitHub token, as the MCP server gets it for her token there. */
  async function exchangeForGitHub(): Promise<Response> {
    const subject = (await obtainTokens(app, person, 'mona', { scope: 'tools:use', resource: MCP })).access_token;
    return postForm(server, '/api/token', {
      grant_type: TOKEN_EXCHANGE_GRANT_TYPE,
      client_id: mcp.introspector.client.client_id,
      client_secret: mcp.secret,
      audience: id,
      subject_token_type: ACCESS_TOKEN_URN,
      subject_token: subject,
    });
  }
  const atGitHub = (token: string) => fetch(`${github.baseUrl}/api/v3/user`, { headers: { authorization: `Bearer ${token}`, 'user-agent': 'test' } });
  const tokenRequests = () => github.requests('/login/oauth/access_token');

  test('refreshed at GitHub once expired; a refresh token GitHub refuses (200, bad_refresh_token) is forgotten, and not sent again', async () => {
    const first = (await (await exchangeForGitHub()).json()) as { access_token: string };
    assert.match(first.access_token, /^ghu_/);
    assert.equal((await atGitHub(first.access_token)).status, 200);

    server.advance(28_801);
    const renewed = (await (await exchangeForGitHub()).json()) as { access_token: string };
    assert.notEqual(renewed.access_token, first.access_token);
    assert.equal((await atGitHub(renewed.access_token)).status, 200);
    assert.equal((await atGitHub(first.access_token)).status, 401, 'GitHub let the old one go with its refresh');

    // Mona revokes the app in her GitHub settings: its refresh token is dead there.
    github.revokeAll();
    server.advance(28_801);
    const asked = tokenRequests();
    const expired = "the person's GitHub token has expired and could not be renewed: they log in with GitHub again";
    await assertOAuthError(await exchangeForGitHub(), 400, 'invalid_grant', expired);
    const [event] = await server.store.db.selectFrom('audit_events').select('detail').where('type', '=', 'provider_refresh_refused').execute();
    assert.deepEqual(JSON.parse(event!.detail!), { connection: id, error: 'bad_refresh_token' });
    for (let i = 0; i < 2; i++) await assertOAuthError(await exchangeForGitHub(), 400, 'invalid_grant', expired);
    assert.equal(tokenRequests() - asked, 1, 'GitHub was asked once');
    assertNoSecretsLogged(server.logs);
    assert.ok(!server.logs.some((line) => /gh[ur]_/.test(line)), "no GitHub token in Gatehouse's log");

    // Her next login through GitHub keeps a new pair, which works there.
    github.nextLogin(mona);
    await logInThrough(person, id, github.baseUrl);
    const handed = (await (await exchangeForGitHub()).json()) as { access_token: string };
    assert.equal((await atGitHub(handed.access_token)).status, 200);
  });
});
