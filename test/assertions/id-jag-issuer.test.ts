/**
 * SPEC §4.15, Gatehouse as the enterprise side of MCP's enterprise-managed authorization: one
 * Gatehouse (the company's identity provider, behind https) issues ID-JAGs by token exchange
 * for the authorization servers an administrator listed for a client (--id-jag-audience); a
 * second Gatehouse, the MCP server's authorization server, trusts it (§4.11) and turns the
 * ID-JAG into an access token. The whole flow runs through the MCP TypeScript SDK's own
 * cross-app access provider (`CrossAppAccessProvider` with `discoverAndRequestJwtAuthGrant`,
 * from @modelcontextprotocol/client) against the example MCP server. Then, at the second
 * Gatehouse, the agent delegates the person's token with its own client_credentials token as
 * the actor token (RFC 8693 delegation with `actor_token`).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { decodeJwt, decodeProtectedHeader } from 'jose';
import * as oauth from 'oauth4webapi';
import { Client, CrossAppAccessProvider, StreamableHTTPClientTransport, discoverAndRequestJwtAuthGrant } from '@modelcontextprotocol/client';
import { COMMAND_LINE } from '../../src/audit.ts';
import { disableUser, findUserNamed, updateProfile } from '../../src/accounts/users.ts';
import { removeAccess } from '../../src/clients/access.ts';
import { endUserSessions } from '../../src/accounts/sessions.ts';
import { createIssuer } from '../../src/oauth/assertions/issuers.ts';
import { ACCESS_TOKEN_URN, ID_JAG_URN, ID_TOKEN_URN, TOKEN_EXCHANGE_GRANT_TYPE } from '../../src/oauth/grants/types.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { startExample, text, type Example } from '../support/mcp-host.ts';
import { postForm } from '../support/oauth-client.ts';
import { stopChild } from '../support/processes.ts';
import { assertNoSecretsLogged, assertOAuthError } from '../support/responses.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { testCaProblem } from '../support/tls.ts';
import { startTlsProxy } from '../support/upstream-providers.ts';
import { UserAgent } from '../support/user-agent.ts';

for (const backend of BACKENDS) {
  describe(
    `ID-JAGs issued by one Gatehouse, redeemed at another (${backend.name})`,
    { ...backendOptions(backend), ...(testCaProblem() ? { skip: testCaProblem()! } : {}) },
    () => {
      let proxy: Awaited<ReturnType<typeof startTlsProxy>>;
      /** The company's identity provider, at an https issuer. */
      let idp: TestServer;
      /** The MCP server's authorization server. */
      let as: TestServer;
      let example: Example;
      /** The agent at the identity provider, allowed ID-JAGs for `as`. */
      let atIdp: { id: string; secret: string };
      /** The same agent at the MCP server's authorization server. */
      let atAs: { id: string; secret: string };

      /** ursula logs in at the identity provider through the agent: its tokens there, an ID token among them. */
      async function loginAtIdp(): Promise<oauth.TokenEndpointResponse> {
        const issuer = new URL(proxy.origin);
        const server = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2' }));
        const client = { client_id: atIdp.id };
        const verifier = oauth.generateRandomCodeVerifier();
        const state = oauth.generateRandomState();
        const redirectUri = 'http://127.0.0.1:8765/callback';
        const url = new URL(server.authorization_endpoint!);
        url.search = new URLSearchParams({
          client_id: atIdp.id,
          redirect_uri: redirectUri,
          response_type: 'code',
          scope: 'openid email',
          state,
          code_challenge: await oauth.calculatePKCECodeChallenge(verifier),
          code_challenge_method: 'S256',
        }).toString();
        const outcome = await new UserAgent(proxy.origin).authorize(url, { username: 'ursula' });
        const callback = oauth.validateAuthResponse(server, client, outcome.redirect!, state);
        const auth = oauth.ClientSecretBasic(atIdp.secret);
        return oauth.processAuthorizationCodeResponse(
          server,
          client,
          await oauth.authorizationCodeGrantRequest(server, client, auth, callback, redirectUri, verifier),
        );
      }

      /** A token exchange at the identity provider, sent by hand (for the refusals). */
      const askIdp = (params: Record<string, string>, by = atIdp) =>
        fetch(`${proxy.origin}/api/token`, {
          method: 'POST',
          headers: { 'content-type': 'application/x-www-form-urlencoded' },
          body: new URLSearchParams({ grant_type: TOKEN_EXCHANGE_GRANT_TYPE, client_id: by.id, client_secret: by.secret, ...params }),
        });

      before(async () => {
        proxy = await startTlsProxy();
        idp = await startServer(backend, { PUBLIC_URL: proxy.origin });
        proxy.target(Number(new URL(idp.url).port));
        as = await startServer(backend);
        for (const server of [idp, as]) {
          await server.createUser('ursula');
          const ctx = server.app.gatehouse;
          await updateProfile(ctx, (await findUserNamed(ctx, 'ursula'))!, { emailVerified: true }, COMMAND_LINE);
        }
        example = await startExample(as);
        // At the MCP server's authorization server: the agent (its person tokens come from ID-JAGs), allowed to delegate.
        const agent = await as.createClient({
          name: 'Enterprise agent',
          grantType: 'client_credentials',
          redirectUris: [],
          confidential: true,
          scope: 'notes:read notes:write',
          tokenExchange: true,
        });
        atAs = { id: agent.client.id, secret: agent.secret! };
        // The company's IdP is trusted for ID-JAGs presented by that agent; people are known by their verified e-mail address.
        await createIssuer(
          as.app.gatehouse,
          { issuer: proxy.origin, profile: 'id-jag', allowPrivateAddress: true, clients: [atAs.id], subjectClaim: 'email' },
          COMMAND_LINE,
        );
        // At the IdP: the agent as people log in through it, allowed ID-JAGs for that server, where it is known by another ID.
        const there = await idp.createClient({
          name: 'Enterprise agent',
          confidential: true,
          redirectUris: ['http://127.0.0.1:8765/callback'],
          scope: 'openid email annotation:read',
          idJagAudiences: [{ issuer: as.url, client_id: atAs.id }],
        });
        atIdp = { id: there.client.id, secret: there.secret! };
      });
      after(async () => {
        if (example) await stopChild(example.process);
        await as?.close();
        await idp?.close();
        await proxy?.close();
      });

      test("the MCP SDK gets an ID-JAG from the IdP and an access token from the MCP server's authorization server, and calls a tool", async () => {
        const { id_token } = await loginAtIdp();
        let jag: string | undefined;
        const provider = new CrossAppAccessProvider({
          assertion: async (context) => {
            const result = await discoverAndRequestJwtAuthGrant({
              idpUrl: proxy.origin,
              audience: context.authorizationServerUrl,
              resource: context.resourceUrl,
              idToken: id_token!,
              clientId: atIdp.id,
              clientSecret: atIdp.secret,
              scope: context.scope,
              fetchFn: context.fetchFn,
            });
            jag = result.jwtAuthGrant;
            return result.jwtAuthGrant;
          },
          clientId: atAs.id,
          clientSecret: atAs.secret,
          expectedIssuer: as.url,
        });
        const client = new Client({ name: 'enterprise agent', version: '1.0.0' });
        await client.connect(new StreamableHTTPClientTransport(new URL(example.url), { authProvider: provider }));
        assert.equal(text(await client.callTool({ name: 'add_note', arguments: { text: 'from the enterprise' } })), 'Added note 1 for ursula.');
        await client.close();

        assert.ok(jag, 'the SDK asked the IdP for an ID-JAG');
        assert.equal(decodeProtectedHeader(jag).typ, 'oauth-id-jag+jwt');
        const claims = decodeJwt(jag);
        assert.equal(claims.iss, proxy.origin);
        assert.equal(claims.aud, as.url);
        assert.equal(claims.client_id, atAs.id, "the client's ID at the audience, as the administrator listed it");
        assert.equal(claims.sub, `acct:ursula@${new URL(proxy.origin).hostname}`);
        assert.equal(claims.email, 'ursula@example.com');
        assert.equal(claims.resource, example.url);
        assert.ok(typeof claims.jti === 'string' && claims.jti.length >= 43);
        assert.ok(claims.exp! - claims.iat! <= 300);
        const issued = await idp.store.db.selectFrom('audit_events').select(['user_id', 'client_id']).where('type', '=', 'id_jag_issued').execute();
        assert.equal(issued.length, 1);
        assert.equal(issued[0]!.client_id, atIdp.id);
        assertNoSecretsLogged(idp.logs);
        assert.ok(!idp.logs.some((line) => line.includes(jag!) || line.includes(id_token!)), 'neither the ID token nor the ID-JAG is logged');
      });

      test('an access token of the person may be the subject too; the answer is RFC 8693 shaped, with no refresh token', async () => {
        const { access_token } = await loginAtIdp();
        const answer = await askIdp({
          requested_token_type: ID_JAG_URN,
          audience: as.url,
          subject_token: access_token,
          subject_token_type: ACCESS_TOKEN_URN,
        });
        assert.equal(answer.status, 200);
        const body = (await answer.json()) as Record<string, unknown>;
        assert.deepEqual(Object.keys(body).sort(), ['access_token', 'expires_in', 'issued_token_type', 'token_type']);
        assert.equal(body.issued_token_type, ID_JAG_URN);
        assert.equal(body.token_type, 'N_A');
        assert.equal(answer.headers.get('cache-control'), 'no-store');
      });

      test("at the MCP server's authorization server, the agent delegates the person's token with its own client_credentials token as the actor token", async () => {
        const fresh = await loginAtIdp();
        const jag = (await (
          await askIdp({
            requested_token_type: ID_JAG_URN,
            audience: as.url,
            resource: example.url,
            scope: 'notes:read notes:write',
            subject_token: fresh.id_token!,
            subject_token_type: ID_TOKEN_URN,
          })
        ).json()) as { access_token: string };
        const basic = { authorization: `Basic ${btoa(`${atAs.id}:${atAs.secret}`)}` };
        const person = (await (
          await postForm(as, '/api/token', { grant_type: 'urn:ietf:params:oauth:grant-type:jwt-bearer', assertion: jag.access_token }, basic)
        ).json()) as { access_token: string; scope: string };
        assert.equal(person.scope, 'notes:read notes:write');
        const own = (await (
          await postForm(as, '/api/token', { grant_type: 'client_credentials', resource: example.url, scope: 'notes:read' }, basic)
        ).json()) as {
          access_token: string;
        };
        const exchanged = await postForm(
          as,
          '/api/token',
          {
            grant_type: TOKEN_EXCHANGE_GRANT_TYPE,
            subject_token: person.access_token,
            subject_token_type: ACCESS_TOKEN_URN,
            actor_token: own.access_token,
            actor_token_type: ACCESS_TOKEN_URN,
            scope: 'notes:read',
          },
          basic,
        );
        assert.equal(exchanged.status, 200);
        const narrower = (await exchanged.json()) as { access_token: string; scope: string };
        assert.equal(narrower.scope, 'notes:read');
        const described = (await (await postForm(as, '/oauth/introspect', { token: narrower.access_token }, basic)).json()) as Record<string, unknown>;
        assert.deepEqual(described.act, { sub: atAs.id });
        assert.equal(described.username, 'ursula');

        // Disabling the person at the MCP server's authorization server ends the delegated token too.
        await disableUser(as.app.gatehouse, (await findUserNamed(as.app.gatehouse, 'ursula'))!, COMMAND_LINE);
        const after = (await (await postForm(as, '/oauth/introspect', { token: narrower.access_token }, basic)).json()) as Record<string, unknown>;
        assert.equal(after.active, false);
      });

      test("refused: an audience not listed, another client's ID token, an expired or forged one, a person who revoked the client, logged out or is disabled", async () => {
        const { id_token } = await loginAtIdp();
        const ask = (more: Record<string, string>) =>
          askIdp({ requested_token_type: ID_JAG_URN, audience: as.url, subject_token: id_token!, subject_token_type: ID_TOKEN_URN, ...more });
        await assertOAuthError(
          await ask({ audience: 'https://elsewhere.example' }),
          400,
          'invalid_target',
          'this client may not get ID-JAGs for that audience: an administrator lists them with --id-jag-audience',
        );
        // Another client, listed for the same audience, with ursula's ID token of the agent: not its to present.
        const stranger = await idp.createClient({
          name: 'Stranger',
          confidential: true,
          redirectUris: ['http://127.0.0.1:8765/callback'],
          idJagAudiences: [{ issuer: as.url, client_id: null }],
        });
        await assertOAuthError(
          await askIdp(
            { requested_token_type: ID_JAG_URN, audience: as.url, subject_token: id_token!, subject_token_type: ID_TOKEN_URN },
            { id: stranger.client.id, secret: stranger.secret! },
          ),
          400,
          'invalid_request',
          'the subject_token is invalid, expired or revoked',
        );
        const [header, payload] = id_token!.split('.');
        await assertOAuthError(
          await ask({ subject_token: `${header}.${payload}.AAAA` }),
          400,
          'invalid_request',
          'the subject_token is invalid, expired or revoked',
        );
        await assertOAuthError(
          await ask({ subject_token_type: 'urn:ietf:params:oauth:token-type:saml2' }),
          400,
          'invalid_request',
          `'subject_token_type' must be ${ID_TOKEN_URN} or ${ACCESS_TOKEN_URN}`,
        );

        const fresh = await loginAtIdp();
        idp.advance(idp.config.idTokenTtl + 1);
        await assertOAuthError(await ask({ subject_token: fresh.id_token! }), 400, 'invalid_request', 'the subject_token is invalid, expired or revoked');

        // The person takes the client's access away (/account/applications): its ID token no longer gets them vouched for.
        const ctx = idp.app.gatehouse;
        const ursula = (await findUserNamed(ctx, 'ursula'))!;
        const removed = await loginAtIdp();
        assert.ok(await removeAccess(ctx, ursula.id, atIdp.id, null));
        await assertOAuthError(await ask({ subject_token: removed.id_token! }), 400, 'invalid_request', 'the subject_token is invalid, expired or revoked');

        // Logged out (here: every session of hers ended): her ID token of that login vouches no more.
        const loggedOut = await loginAtIdp();
        await endUserSessions(ctx, ursula.id, null);
        await assertOAuthError(await ask({ subject_token: loggedOut.id_token! }), 400, 'invalid_request', 'the subject_token is invalid, expired or revoked');

        const disabled = await loginAtIdp();
        await disableUser(ctx, ursula, COMMAND_LINE);
        await assertOAuthError(await ask({ subject_token: disabled.id_token! }), 400, 'invalid_request', 'the subject_token is invalid, expired or revoked');
        await assertOAuthError(
          await ask({ subject_token: disabled.access_token, subject_token_type: ACCESS_TOKEN_URN }),
          400,
          'invalid_request',
          'the subject_token is invalid, expired or revoked',
        );
        assert.equal(
          (await idp.store.db.selectFrom('audit_events').select('id').where('type', '=', 'id_jag_issued').execute()).length,
          3,
          'no refusal issued one',
        );
      });
    },
  );
}
