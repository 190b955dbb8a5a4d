/**
 * SPEC §4.15, delegation (RFC 8693): an agent — a confidential client an administrator allowed
 * with --token-exchange — exchanges the person's access token it holds for a narrower one that
 * says who acts for the person (`act`, nested when exchanged again), through openid-client's
 * generic grant call. The new token belongs to the person's grant: revoking the grant, the agent
 * or the person ends it at once, its socket included. Every attack the issue names is performed:
 * another client's token, widening scope or audience, an actor token of another client, a revoked
 * or expired subject token, and an exchange racing a revocation (nothing survives it).
 */
import assert from 'node:assert/strict';
import type { webcrypto } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { calculateJwkThumbprint, decodeJwt, exportJWK } from 'jose';
import * as oauth from 'oauth4webapi';
import * as oidc from 'openid-client';
import { COMMAND_LINE } from '../../src/audit.ts';
import { disableUser, findUserNamed } from '../../src/accounts/users.ts';
import { changeTokenSettings, findResourceNamed } from '../../src/clients/resources.ts';
import { disableClient } from '../../src/clients/clients.ts';
import { ACCESS_TOKEN_URN, TOKEN_EXCHANGE_GRANT_TYPE } from '../../src/oauth/grants/types.ts';
import { hashIfWellFormed } from '../../src/tokens.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import {
  authorizationUrl,
  clientCredentialsTokens,
  discover,
  insecure,
  obtainTokens,
  postForm,
  profile,
  revokeToken,
  type App,
} from '../support/oauth-client.ts';
import { registerResourceServer, type ResourceServer } from '../support/resources.ts';
import { assertNoSecretsLogged, assertOAuthError } from '../support/responses.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';
import { connect } from '../support/ws-client.ts';
import { databaseUrl, gatehouse } from '../support/processes.ts';

type CryptoKeyPair = webcrypto.CryptoKeyPair;
const FILES = 'https://files.example/api';
const SCOPES = 'annotation:read annotation:write files:read files:write';

/** The exchange request's own parameters, for a subject access token. */
const exchangeOf = (subject: string, more: Record<string, string> = {}) => ({ subject_token: subject, subject_token_type: ACCESS_TOKEN_URN, ...more });

for (const backend of BACKENDS) {
  describe(`token exchange: delegation (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let files: ResourceServer;
    /** The agent: confidential, allowed to exchange. */
    let agent: { app: App; config: oidc.Configuration; id: string; secret: string };
    /** Another confidential client allowed to exchange. */
    let other: { config: oidc.Configuration; id: string; secret: string };
    let browser: UserAgent;

    /** A client registered as the administrator would, and openid-client's configuration for it. */
    async function client(name: string, tokenExchange: boolean) {
      const { client, secret } = await server.createClient({ name, confidential: true, scope: SCOPES, tokenExchange });
      const config = await oidc.discovery(new URL(server.url), client.id, secret!, undefined, { execute: [oidc.allowInsecureRequests] });
      return { config, id: client.id, secret: secret!, app: await discover(server, client.id, { secret }) };
    }

    /** A fresh grant of alice's to the agent: its tokens, for `resource` (absent: the built-in API). */
    async function personsTokens(scope = 'annotation:read annotation:write', resource?: string) {
      return obtainTokens(agent.app, browser, 'alice', { scope, ...(resource ? { resource } : {}) });
    }

    const exchange = (config: oidc.Configuration, params: Record<string, string>) => oidc.genericGrantRequest(config, TOKEN_EXCHANGE_GRANT_TYPE, params);
    /** The same request sent by hand, for the refusals (the library throws on them). */
    const exchangeRaw = (by: { id: string; secret: string }, params: Record<string, string>) =>
      postForm(server, '/api/token', { grant_type: TOKEN_EXCHANGE_GRANT_TYPE, client_id: by.id, client_secret: by.secret, ...params });
    const introspect = async (token: string) =>
      (await postForm(server, '/oauth/introspect', { token, client_id: agent.id, client_secret: agent.secret }).then((r) => r.json())) as Record<
        string,
        unknown
      >;

    before(async () => {
      server = await startServer(backend);
      await server.createUser('alice');
      files = await registerResourceServer(server, FILES, [
        { name: 'files:read', description: 'Read files' },
        { name: 'files:write', description: 'Write files' },
      ]);
      const ctx = server.app.gatehouse;
      await changeTokenSettings(ctx, (await findResourceNamed(ctx, FILES))!, { tokenFormat: 'jwt' }, COMMAND_LINE);
      agent = await client('Agent', true);
      other = await client('Other agent', true);
      browser = new UserAgent(server.url);
    });
    after(() => server?.close());

    test('from the command line: client create and update take --token-exchange and --id-jag-audience, and refuse what cannot be', async () => {
      const env = { DATABASE_URL: databaseUrl(server.config), PUBLIC_URL: server.url };
      const cli = async (...args: string[]) => gatehouse(args, env);
      const made = await cli(
        'client',
        'create',
        '--name',
        'CLI agent',
        '--redirect-uri',
        'http://127.0.0.1:8765/cb',
        '--confidential',
        '--token-exchange',
        '--json',
      );
      assert.equal(made.code, 0, made.stderr);
      const { client_id } = JSON.parse(made.stdout) as { client_id: string };
      const update = async (...args: string[]) => cli('client', 'update', client_id, ...args, '--json');
      const listed = await update('--id-jag-audience', 'https://as.example', '--id-jag-audience', 'https://mcp-as.example/tenant=agent-7');
      assert.equal(listed.code, 0, listed.stderr);
      const described = JSON.parse(listed.stdout) as { token_exchange: boolean; id_jag_audiences: unknown };
      assert.equal(described.token_exchange, true);
      assert.deepEqual(described.id_jag_audiences, [
        { issuer: 'https://as.example', client_id: null },
        { issuer: 'https://mcp-as.example/tenant', client_id: 'agent-7' },
      ]);
      const cleared = JSON.parse((await update('--no-token-exchange', '--id-jag-audience', '')).stdout) as typeof described;
      assert.deepEqual([cleared.token_exchange, cleared.id_jag_audiences], [false, []]);

      const refused = async (run: Promise<{ code: number | null; stderr: string }>, message: RegExp) => {
        const done = await run;
        assert.equal(done.code, 2, done.stderr);
        assert.match(done.stderr, message);
      };
      await refused(update('--id-jag-audience', 'http://as.example'), /ID-JAG audience http:\/\/as\.example must use https/);
      await refused(update('--id-jag-audience', 'https://as.example?tenant=1'), /must not have a query or a fragment/);
      await refused(
        update('--id-jag-audience', 'https://as.example', '--id-jag-audience', 'https://AS.example/=x'),
        /Each ID-JAG audience must be listed once/,
      );
      await refused(
        cli('client', 'create', '--name', 'Public agent', '--redirect-uri', 'http://127.0.0.1:8765/cb', '--token-exchange'),
        /Only a confidential client may exchange tokens or get ID-JAGs/,
      );
    });

    test('the metadata lists the grant', async () => {
      const metadata = (await (await fetch(`${server.url}/.well-known/oauth-authorization-server`)).json()) as { grant_types_supported: string[] };
      assert.ok(metadata.grant_types_supported.includes(TOKEN_EXCHANGE_GRANT_TYPE));
    });

    test('a narrower token that says who acts, in introspection and the audit trail; nested when exchanged again; no refresh token', async () => {
      const person = await personsTokens();
      const narrower = await exchange(agent.config, exchangeOf(person.access_token, { scope: 'annotation:read' }));
      assert.equal(narrower.issued_token_type, ACCESS_TOKEN_URN);
      assert.equal(narrower.token_type, 'bearer');
      assert.equal(narrower.scope, 'annotation:read');
      assert.equal(narrower.refresh_token, undefined);
      assert.equal(narrower.id_token, undefined);
      assert.ok(narrower.expires_in! <= person.expires_in!, 'never outlives the subject token');
      assert.equal((await profile(server, narrower.access_token)).status, 200, 'it works at the API');

      const described = await introspect(narrower.access_token);
      assert.equal(described.active, true);
      assert.deepEqual(described.act, { sub: agent.id });
      assert.equal(described.sub, (await introspect(person.access_token)).sub, 'the person it speaks for');
      assert.equal(described.scope, 'annotation:read');
      assert.equal((await introspect(person.access_token)).act, undefined, "the person's own token names no actor");

      const again = await exchange(agent.config, exchangeOf(narrower.access_token));
      assert.equal(again.scope, 'annotation:read', 'at most the scopes of the token exchanged');
      assert.deepEqual((await introspect(again.access_token)).act, { sub: agent.id, act: { sub: agent.id } });
      // Each exchange writes the whole chain: it ends at five actors.
      let chained = again.access_token;
      for (let depth = 3; depth <= 5; depth++) chained = (await exchange(agent.config, exchangeOf(chained))).access_token;
      await assertOAuthError(
        await exchangeRaw(agent, exchangeOf(chained)),
        400,
        'invalid_request',
        'a token may be exchanged at most 5 times over: this one has been already',
      );

      const events = await server.store.db.selectFrom('audit_events').select('detail').where('type', '=', 'token_issued').execute();
      const exchanges = events.map((e) => JSON.parse(e.detail!) as Record<string, unknown>).filter((d) => d.grant_type === TOKEN_EXCHANGE_GRANT_TYPE);
      assert.equal(exchanges.length, 5);
      assert.equal(exchanges[0]!.act, JSON.stringify({ sub: agent.id }));
      assertNoSecretsLogged(server.logs);
      assert.ok(!server.logs.some((line) => line.includes(narrower.access_token) || line.includes(person.access_token)));
    });

    test("a JWT access token carries act, the subject's audience, and an expiry no later than the subject's", async () => {
      const person = await personsTokens('files:read files:write', FILES);
      const narrower = await exchange(agent.config, exchangeOf(person.access_token, { scope: 'files:read', resource: FILES }));
      const claims = decodeJwt(narrower.access_token);
      const subject = decodeJwt(person.access_token);
      assert.deepEqual(claims.act, { sub: agent.id });
      assert.equal(claims.aud, FILES);
      assert.equal(claims.scope, 'files:read');
      assert.equal(claims.client_id, agent.id);
      assert.equal(claims.sub, subject.sub);
      assert.ok(claims.exp! <= subject.exp!);
      // The resource server's own introspection sees it too.
      const seen = await oauth.processIntrospectionResponse(
        files.introspector.as,
        files.introspector.client,
        await oauth.introspectionRequest(files.introspector.as, files.introspector.client, files.introspector.auth, narrower.access_token, insecure),
      );
      assert.deepEqual(seen.act, { sub: agent.id });
    });

    test("attacks: another client's token, wider scope, another audience, an actor token of another client, a client not allowed, a public client", async () => {
      const person = await personsTokens('annotation:read');
      const before = await server.store.db
        .selectFrom('access_tokens')
        .select((eb) => eb.fn.countAll().as('n'))
        .executeTakeFirstOrThrow();

      await assertOAuthError(
        await exchangeRaw(other, exchangeOf(person.access_token)),
        400,
        'invalid_request',
        'the subject_token is invalid, expired or revoked',
      );
      await assertOAuthError(
        await exchangeRaw(agent, exchangeOf(person.access_token, { scope: 'annotation:read annotation:write' })),
        400,
        'invalid_scope',
        "an exchange cannot widen the subject_token's scopes: 'annotation:write'",
      );
      await assertOAuthError(
        await exchangeRaw(agent, exchangeOf(person.access_token, { resource: FILES })),
        400,
        'invalid_target',
        `an exchange keeps the subject_token's audience: 'resource' must be ${server.url}`,
      );
      await assertOAuthError(
        await exchangeRaw(agent, exchangeOf(person.access_token, { audience: FILES })),
        400,
        'invalid_target',
        `an exchange keeps the subject_token's audience: 'audience' must be ${server.url}`,
      );
      await assertOAuthError(
        await exchangeRaw(agent, exchangeOf(person.access_token, { resource: 'https://unknown.example/' })),
        400,
        'invalid_target',
        'the requested resource is unknown to this authorization server',
      );
      const job = await clientCredentialsTokens(server, 'annotation:read', server.url);
      await assertOAuthError(
        await exchangeRaw(agent, exchangeOf(person.access_token, { actor_token: job.tokens.access_token, actor_token_type: ACCESS_TOKEN_URN })),
        400,
        'invalid_request',
        "the actor_token must be this client's own live client_credentials access token",
      );
      await assertOAuthError(
        await exchangeRaw(agent, exchangeOf(person.access_token, { actor_token: person.access_token, actor_token_type: ACCESS_TOKEN_URN })),
        400,
        'invalid_request',
        "the actor_token must be this client's own live client_credentials access token",
      );
      await assertOAuthError(
        await exchangeRaw(agent, exchangeOf(job.tokens.access_token)),
        400,
        'invalid_request',
        'the subject_token is invalid, expired or revoked',
      );
      await assertOAuthError(
        await exchangeRaw(agent, { subject_token: person.access_token, subject_token_type: 'urn:ietf:params:oauth:token-type:refresh_token' }),
        400,
        'invalid_request',
        `'subject_token_type' must be ${ACCESS_TOKEN_URN}`,
      );
      // A NUL or bytes that are not UTF-8 in a repeatable parameter: refused like any other parameter's.
      await assertOAuthError(
        await exchangeRaw(agent, exchangeOf(person.access_token, { audience: 'x\u0000' })),
        400,
        'invalid_request',
        "the 'audience' parameter contains a NUL character",
      );
      const plain = await client('Not allowed', false);
      await assertOAuthError(
        await exchangeRaw(plain, exchangeOf(person.access_token)),
        400,
        'unauthorized_client',
        'this client may not exchange tokens: an administrator allows it with --token-exchange',
      );
      const publicApp = await server.createClient({ name: 'Public app', scope: SCOPES });
      await assertOAuthError(
        await postForm(server, '/api/token', { grant_type: TOKEN_EXCHANGE_GRANT_TYPE, client_id: publicApp.client.id, ...exchangeOf(person.access_token) }),
        400,
        'unauthorized_client',
        'this client is not registered for the token exchange grant',
      );

      const afterwards = await server.store.db
        .selectFrom('access_tokens')
        .select((eb) => eb.fn.countAll().as('n'))
        .executeTakeFirstOrThrow();
      assert.equal(Number(afterwards.n), Number(before.n) + 1, "no refusal stored a token (the one more is the job's own)");
      assert.equal((await profile(server, person.access_token)).status, 200, "the person's token still works");
    });

    // An agent's own client_credentials token, taken as the actor token: test/assertions/id-jag-issuer.test.ts.
    test('an actor token that is no live token of the agent, or a type without a token, is refused', async () => {
      const person = await personsTokens('annotation:read');
      const own = await exchangeRaw(agent, exchangeOf(person.access_token, { actor_token: 'ga_unknown', actor_token_type: ACCESS_TOKEN_URN }));
      await assertOAuthError(own, 400, 'invalid_request', "the actor_token must be this client's own live client_credentials access token");
      await assertOAuthError(
        await exchangeRaw(agent, exchangeOf(person.access_token, { actor_token_type: ACCESS_TOKEN_URN })),
        400,
        'invalid_request',
        "'actor_token_type' was sent without 'actor_token'",
      );
    });

    test('revoking the grant ends the exchanged token at once, its socket included, and a revoked subject cannot be exchanged', async () => {
      const person = await personsTokens();
      const narrower = await exchange(agent.config, exchangeOf(person.access_token, { scope: 'annotation:read' }));
      const socket = await connect(server.url, narrower.access_token);
      await revokeToken(agent.app, person.refresh_token!);
      assert.equal(await socket.closed, 4001);
      assert.equal((await profile(server, narrower.access_token)).status, 401);
      assert.equal((await introspect(narrower.access_token)).active, false);
      await assertOAuthError(
        await exchangeRaw(agent, exchangeOf(person.access_token)),
        400,
        'invalid_request',
        'the subject_token is invalid, expired or revoked',
      );
    });

    test('disabling the agent or the person ends the exchanged tokens', async () => {
      const byAgent = await client('Short-lived agent', true);
      const person = await obtainTokens(byAgent.app, browser, 'alice', { scope: 'annotation:read' });
      const narrower = await exchange(byAgent.config, exchangeOf(person.access_token));
      const socket = await connect(server.url, narrower.access_token);
      await disableClient(server.app.gatehouse, (await server.app.gatehouse.clients.find(byAgent.id))!, COMMAND_LINE);
      assert.equal(await socket.closed, 4001);
      assert.equal((await profile(server, narrower.access_token)).status, 401);

      await server.createUser('bob');
      const bobs = await obtainTokens(agent.app, new UserAgent(server.url), 'bob', { scope: 'annotation:read' });
      const forBob = await exchange(agent.config, exchangeOf(bobs.access_token));
      const bobSocket = await connect(server.url, forBob.access_token);
      await disableUser(server.app.gatehouse, (await findUserNamed(server.app.gatehouse, 'bob'))!, COMMAND_LINE);
      assert.equal(await bobSocket.closed, 4001);
      assert.equal((await profile(server, forBob.access_token)).status, 401);
    });

    test('an exchange racing a revocation: nothing survives it', async () => {
      for (let round = 0; round < 8; round++) {
        const person = await personsTokens('annotation:read');
        const [answer] = await Promise.all([
          exchangeRaw(agent, exchangeOf(person.access_token)).then((r) => r.json() as Promise<{ access_token?: string; error?: string }>),
          revokeToken(agent.app, person.refresh_token!),
        ]);
        if (answer.access_token !== undefined) assert.equal((await profile(server, answer.access_token)).status, 401, `round ${round}: a token survived`);
        else assert.equal(answer.error, 'invalid_request');
        const live = await server.store.db
          .selectFrom('access_tokens')
          .innerJoin('grants', 'grants.id', 'access_tokens.grant_id')
          .select(['access_tokens.act', 'grants.revoked_at'])
          .where('grants.id', '=', (eb) =>
            eb.selectFrom('access_tokens').select('grant_id').where('hash', '=', hashIfWellFormed('access', person.access_token)!),
          )
          .execute();
        assert.ok(
          live.every((row) => row.revoked_at !== null),
          `round ${round}: the grant was revoked with every token in it`,
        );
      }
    });

    test('step-up: a resource server that now requires a second factor refuses to exchange a grant approved without one', async () => {
      const person = await personsTokens('files:read', FILES);
      const ctx = server.app.gatehouse;
      const resource = (await findResourceNamed(ctx, FILES))!;
      await changeTokenSettings(ctx, resource, { requireSecondFactor: true }, COMMAND_LINE);
      try {
        await assertOAuthError(
          await exchangeRaw(agent, exchangeOf(person.access_token)),
          400,
          'invalid_grant',
          'the resource server requires a login with a second factor, and this grant was approved without: ask the person again',
        );
      } finally {
        await changeTokenSettings(ctx, (await findResourceNamed(ctx, FILES))!, { requireSecondFactor: false }, COMMAND_LINE);
      }
    });

    test('a DPoP-bound subject token is exchanged only with a proof of its key, and the new token is bound to the proof', async () => {
      const newKeys = () => crypto.subtle.generateKey({ name: 'ECDSA', namedCurve: 'P-256' }, false, ['sign', 'verify']) as Promise<CryptoKeyPair>;
      const [keys, thief] = await Promise.all([newKeys(), newKeys()]);
      const { app } = agent;
      const authorization = await authorizationUrl(app, { scope: 'annotation:read' });
      const callback = oauth.validateAuthResponse(app.as, app.client, (await browser.authorize(authorization.url)).redirect!, authorization.state);
      const bound = await oauth.processAuthorizationCodeResponse(
        app.as,
        app.client,
        await oauth.authorizationCodeGrantRequest(app.as, app.client, app.auth, callback, app.redirectUri, authorization.verifier, {
          ...insecure,
          DPoP: oauth.DPoP(app.client, keys),
        }),
      );
      const send = (pair: CryptoKeyPair | null) =>
        oauth.genericTokenEndpointRequest(app.as, app.client, app.auth, TOKEN_EXCHANGE_GRANT_TYPE, exchangeOf(bound.access_token), {
          ...insecure,
          DPoP: pair === null ? undefined : oauth.DPoP(app.client, pair),
        });
      await assertOAuthError(await send(null), 400, 'invalid_dpop_proof', 'the subject_token is bound to a DPoP key: prove that key');
      await assertOAuthError(await send(thief), 400, 'invalid_dpop_proof', 'the subject_token is bound to a DPoP key: prove that key');
      const exchanged = await oauth.processGenericTokenEndpointResponse(app.as, app.client, await send(keys));
      assert.equal(exchanged.token_type, 'dpop');
      const jkt = await calculateJwkThumbprint(await exportJWK(keys.publicKey));
      assert.deepEqual((await introspect(exchanged.access_token)).cnf, { jkt });
    });

    test('an expired subject token, or one with less than a second left (its exchange would be born expired), cannot be exchanged', async () => {
      const person = await personsTokens('annotation:read');
      server.advance(person.expires_in! - 0.5);
      await assertOAuthError(
        await exchangeRaw(agent, exchangeOf(person.access_token)),
        400,
        'invalid_request',
        'the subject_token is invalid, expired or revoked',
      );
      server.advance(1.5);
      await assertOAuthError(
        await exchangeRaw(agent, exchangeOf(person.access_token)),
        400,
        'invalid_request',
        'the subject_token is invalid, expired or revoked',
      );
    });
  });
}
