/**
 * SPEC §4.11, trusted issuers: identity assertions (ID-JAG) from an enterprise IdP — a real
 * OAuth/OIDC server (oauth2-mock-server) over https, trusted through its discovery document —
 * presented through the MCP TypeScript SDK's token request (`fetchToken` with a provider whose
 * `prepareTokenRequest` makes the jwt-bearer request: SDK 1.32.2 has no cross-app-access
 * provider of its own), and workload identity with tokens minted with jose. Every attack is
 * performed: `alg: none`, HS256 from a trusted issuer, an HMAC keyed with the issuer's public
 * key, a key set that hangs, is huge, redirects or is on a private address, and each claim
 * wrong in turn — each answered with its documented error, nothing consumed.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { SignJWT, base64url, exportJWK, generateKeyPair } from 'jose';
import { createPrivateKeyJwtAuth } from '@modelcontextprotocol/sdk/client/auth-extensions.js';
import { discoverAuthorizationServerMetadata, fetchToken } from '@modelcontextprotocol/sdk/client/auth.js';
import type { OAuthClientProvider } from '@modelcontextprotocol/sdk/client/auth.js';
import { COMMAND_LINE } from '../../src/audit.ts';
import { changeTokenSettings, findResourceNamed } from '../../src/clients/resources.ts';
import { createIssuer } from '../../src/oauth/assertions/issuers.ts';
import { disableUser, findUserNamed, updateProfile } from '../../src/accounts/users.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { startMockIdp, serveKeys, type KeyServer, type MockIdp } from '../support/assertion-issuers.ts';
import { registerResourceServer } from '../support/resources.ts';
import { assertOAuthError } from '../support/responses.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { testCaProblem } from '../support/tls.ts';
import { JWT_BEARER_GRANT_TYPE as JWT_BEARER } from '../../src/oauth/grants/types.ts';

const MCP = 'https://mcp.example/mcp';

function basic(clientId: string, secret: string): Record<string, string> {
  return { authorization: `Basic ${btoa(`${encodeURIComponent(clientId)}:${encodeURIComponent(secret)}`)}` };
}

function tokenRequest(server: TestServer, params: Record<string, string>, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${server.url}/api/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
    body: new URLSearchParams(params),
  });
}

/** An MCP SDK client provider that obtains its token with the ID-JAG it was given (RFC 7523 jwt-bearer), authenticating with its secret. */
function idJagProvider(clientId: string, secret: string, issuer: string, assertion: string): OAuthClientProvider {
  return {
    get redirectUrl() {
      return undefined;
    },
    clientMetadata: { client_name: 'Enterprise agent', redirect_uris: [], grant_types: [JWT_BEARER], scope: 'tools:read' },
    clientInformation: () => ({ client_id: clientId, client_secret: secret, issuer }),
    tokens: () => undefined,
    saveTokens: () => {},
    redirectToAuthorization: () => {},
    saveCodeVerifier: () => {},
    codeVerifier: () => '',
    prepareTokenRequest: (scope?: string) => new URLSearchParams({ grant_type: JWT_BEARER, assertion, ...(scope ? { scope } : {}) }),
  } as OAuthClientProvider;
}

/** An unsecured JWS (RFC 7519 §6): `alg: none`, an empty signature. */
const unsecured = (header: Record<string, unknown>, claims: Record<string, unknown>) =>
  `${base64url.encode(JSON.stringify(header))}.${base64url.encode(JSON.stringify(claims))}.`;

const consumedCount = async (server: TestServer) =>
  Number(
    (
      await server.store.db
        .selectFrom('consumed_assertions')
        .select((eb) => eb.fn.countAll().as('n'))
        .executeTakeFirstOrThrow()
    ).n,
  );

for (const backend of BACKENDS) {
  describe(`jwt-bearer: trusted issuers (${backend.name})`, { ...backendOptions(backend), ...(testCaProblem() ? { skip: testCaProblem()! } : {}) }, () => {
    let server: TestServer;
    let idp: MockIdp;
    let emailIdp: MockIdp;
    let keys: KeyServer;
    let agent: { id: string; secret: string };
    let other: { id: string; secret: string };
    let deployer: { id: string; secret: string };
    let host: string;

    before(async () => {
      server = await startServer(backend);
      host = new URL(server.url).hostname;
      const ctx = server.app.gatehouse;
      for (const name of ['alice', 'bob', 'carol']) await server.createUser(name);
      await updateProfile(ctx, (await findUserNamed(ctx, 'alice'))!, { emailVerified: true }, COMMAND_LINE);
      await disableUser(ctx, (await findUserNamed(ctx, 'carol'))!, COMMAND_LINE);
      await registerResourceServer(server, MCP, [
        { name: 'tools:read', description: 'Use the tools' },
        { name: 'tools:write', description: 'Change the tools' },
      ]);
      const a = await server.createClient({ name: 'Enterprise agent', confidential: true, scope: 'tools:read tools:write annotation:read' });
      agent = { id: a.client.id, secret: a.secret! };
      const o = await server.createClient({ name: 'Other agent', confidential: true, scope: 'tools:read' });
      other = { id: o.client.id, secret: o.secret! };
      const d = await server.createClient({
        name: 'CI deployer',
        grantType: 'client_credentials',
        redirectUris: [],
        confidential: true,
        scope: 'tools:read tools:write',
      });
      deployer = { id: d.client.id, secret: d.secret! };
      idp = await startMockIdp();
      emailIdp = await startMockIdp();
      keys = await serveKeys();
      await createIssuer(
        ctx,
        { issuer: idp.issuer, profile: 'id-jag', allowPrivateAddress: true, clients: [agent.id], scope: 'tools:read annotation:read' },
        COMMAND_LINE,
      );
      await createIssuer(ctx, { issuer: emailIdp.issuer, profile: 'id-jag', allowPrivateAddress: true, subjectClaim: 'email' }, COMMAND_LINE);
      await createIssuer(
        ctx,
        {
          issuer: 'https://token.actions.githubusercontent.example',
          profile: 'workload',
          jwksUri: keys.jwksUri,
          allowPrivateAddress: true,
          clients: [deployer.id],
          subject: 'repo:example/app:ref:refs/heads/main',
          resource: MCP,
          scope: 'tools:read',
        },
        COMMAND_LINE,
      );
      for (const [name, path, allow] of [
        ['slow', '/slow', true],
        ['huge', '/huge', true],
        ['redirecting', '/redirect', true],
        ['private', '/jwks', false],
      ] as const) {
        await createIssuer(
          ctx,
          {
            issuer: `https://${name}.issuer.example`,
            profile: 'workload',
            jwksUri: `${keys.origin}${path}`,
            allowPrivateAddress: allow,
            clients: [deployer.id],
          },
          COMMAND_LINE,
        );
      }
    });
    after(async () => {
      await idp?.close();
      await emailIdp?.close();
      keys?.close();
      await server?.close();
    });

    const idJag = (claims: Partial<Parameters<MockIdp['requestIdJag']>[0]> = {}) =>
      idp.requestIdJag({ sub: 'alice', client_id: agent.id, aud: server.url, resource: MCP, scope: 'tools:read tools:write', ...claims });

    test('the MCP SDK exchanges an ID-JAG from the IdP for a token for the resource it names: no consent, no refresh token, scopes intersected', async () => {
      const metadata = await discoverAuthorizationServerMetadata(server.url);
      assert.deepEqual((metadata as Record<string, unknown> | undefined)?.authorization_grant_profiles_supported, [
        'urn:ietf:params:oauth:grant-profile:id-jag',
      ]);
      assert.ok(metadata?.grant_types_supported?.includes(JWT_BEARER));
      const assertion = await idJag();
      const tokens = await fetchToken(idJagProvider(agent.id, agent.secret, server.url, assertion), server.url, { metadata, resource: new URL(MCP) });
      assert.equal(tokens.refresh_token, undefined);
      // Requested tools:read (the SDK sends the client's metadata scope) ∩ asserted ∩ client's ∩ issuer's.
      assert.equal(tokens.scope, 'tools:read');
      const { introspector } = await registeredIntrospector();
      const introspection = await fetch(`${server.url}/oauth/introspect`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', ...basic(introspector.id, introspector.secret) },
        body: new URLSearchParams({ token: tokens.access_token }),
      });
      const body = (await introspection.json()) as Record<string, unknown>;
      assert.equal(body.active, true);
      assert.equal(body.sub, `acct:alice@${host}`);
      assert.equal(body.aud, MCP);
      assert.equal(body.client_id, agent.id);
      // Presented again: refused.
      const again = await tokenRequest(server, { grant_type: JWT_BEARER, assertion, resource: MCP }, basic(agent.id, agent.secret));
      await assertOAuthError(again, 400, 'invalid_grant', 'the assertion has already been used');
    });

    let introspectorCache: { id: string; secret: string } | undefined;
    async function registeredIntrospector() {
      if (!introspectorCache) {
        const row = await server.store.db.selectFrom('resources').select('client_id').where('uri', '=', MCP).executeTakeFirstOrThrow();
        // Its secret was shown once at registration: give it a new one, as an administrator would.
        const { rotateClientSecret } = await import('../../src/clients/clients.ts');
        const client = (await server.app.gatehouse.clients.findStored(row.client_id!))!;
        introspectorCache = { id: client.id, secret: await rotateClientSecret(server.app.gatehouse, client, COMMAND_LINE) };
      }
      return { introspector: introspectorCache };
    }

    test("a private_key_jwt client presents its ID-JAG through the MCP SDK's createPrivateKeyJwtAuth", async () => {
      const { publicKey, privateKey } = await generateKeyPair('ES256', { extractable: true });
      const jwks = JSON.stringify({ keys: [{ ...(await exportJWK(publicKey)), kid: 'agent-key', alg: 'ES256', use: 'sig' }] });
      const keyed = await server.createClient({ name: 'Keyed agent', confidential: true, jwks, scope: 'tools:read' });
      assert.equal(keyed.secret, null);
      // The e-mail issuer names no clients: any confidential client may present its ID-JAGs.
      const assertion = await emailIdp.requestIdJag({
        email: 'alice@example.com',
        client_id: keyed.client.id,
        aud: server.url,
        resource: MCP,
        scope: 'tools:read',
      });
      const metadata = await discoverAuthorizationServerMetadata(server.url);
      const provider = {
        ...idJagProvider(keyed.client.id, '', server.url, assertion),
        clientInformation: () => ({ client_id: keyed.client.id, issuer: server.url }),
        addClientAuthentication: createPrivateKeyJwtAuth({
          issuer: keyed.client.id,
          subject: keyed.client.id,
          privateKey: await exportJWK(privateKey),
          alg: 'ES256',
        }),
      } as OAuthClientProvider;
      const tokens = await fetchToken(provider, server.url, { metadata, resource: new URL(MCP) });
      assert.equal(tokens.scope, 'tools:read');
      assert.equal(tokens.refresh_token, undefined);
    });

    test('of 20 concurrent presentations of one ID-JAG exactly one gets a token', async () => {
      const assertion = await idJag();
      const responses = await Promise.all(
        Array.from({ length: 20 }, () => tokenRequest(server, { grant_type: JWT_BEARER, assertion }, basic(agent.id, agent.secret))),
      );
      const statuses = responses.map((r) => r.status);
      assert.equal(statuses.filter((s) => s === 200).length, 1, statuses.join(' '));
    });

    test('every refused ID-JAG gets its documented error, and nothing is consumed', async () => {
      const now = Math.floor(Date.now() / 1000);
      const good = { iss: idp.issuer, sub: 'alice', client_id: agent.id, aud: server.url, resource: MCP, scope: 'tools:read', iat: now, exp: now + 120 };
      const signed = (header: Record<string, unknown>, claims: Record<string, unknown> = {}) =>
        idp.sign({ typ: 'oauth-id-jag+jwt', ...header }, { ...good, jti: crypto.randomUUID(), ...claims });
      const publicPem = JSON.stringify(idp.publicJwk);
      const hmac = (secret: string) =>
        new SignJWT({ ...good, jti: crypto.randomUUID() }).setProtectedHeader({ alg: 'HS256', typ: 'oauth-id-jag+jwt' }).sign(new TextEncoder().encode(secret));
      const algorithms = "the assertion's algorithm must be one of RS256, PS256, ES256, EdDSA";
      const asAgent = basic(agent.id, agent.secret);
      const cases: Array<[string, () => Promise<string> | string, Record<string, string>, number, string, string]> = [
        ['alg none', () => unsecured({ alg: 'none', typ: 'oauth-id-jag+jwt' }, { ...good, jti: 'none' }), asAgent, 400, 'invalid_grant', algorithms],
        ['HS256 from a trusted issuer', () => hmac('some shared secret'), asAgent, 400, 'invalid_grant', algorithms],
        ["HS256 keyed with the issuer's RSA public key", () => hmac(publicPem), asAgent, 400, 'invalid_grant', algorithms],
        ['a forged signature', async () => `${(await signed({})).slice(0, -8)}AAAAAAAA`, asAgent, 400, 'invalid_grant', "the assertion's signature is invalid"],
        ['no client authentication', () => signed({}), {}, 401, 'invalid_client', 'this client must authenticate with its secret'],
        [
          'a client the issuer does not name',
          () => signed({}, { client_id: other.id }),
          basic(other.id, other.secret),
          400,
          'unauthorized_client',
          "this client may not present this issuer's identity assertions",
        ],
        ['typ JWT', () => signed({ typ: 'JWT' }), asAgent, 400, 'invalid_grant', "the assertion's type (typ) must be oauth-id-jag+jwt"],
        [
          'another aud',
          () => signed({}, { aud: 'https://other.example' }),
          asAgent,
          400,
          'invalid_grant',
          "the assertion's audience (aud) must be this authorization server's issuer",
        ],
        [
          'aud naming this issuer among others',
          () => signed({}, { aud: [server.url, 'https://other.example'] }),
          asAgent,
          400,
          'invalid_grant',
          "the assertion's audience (aud) must be this authorization server's issuer",
        ],
        [
          'client_id of another client',
          () => signed({}, { client_id: other.id }),
          asAgent,
          400,
          'invalid_grant',
          "the assertion's client_id is not the authenticated client",
        ],
        ['expired', () => signed({}, { iat: now - 400, exp: now - 100 }), asAgent, 400, 'invalid_grant', 'the assertion has expired'],
        [
          'a lifetime over 300 s',
          () => signed({}, { iat: now, exp: now + 301 }),
          asAgent,
          400,
          'invalid_grant',
          "the assertion's lifetime (exp - iat) is longer than 300 seconds",
        ],
        ['no jti', () => idp.sign({ typ: 'oauth-id-jag+jwt' }, good), asAgent, 400, 'invalid_grant', 'the assertion has no jti'],
        ['an unknown user', () => signed({}, { sub: 'nobody' }), asAgent, 400, 'invalid_grant', "the assertion's subject is not a user of this server"],
        ['a disabled user', () => signed({}, { sub: 'carol' }), asAgent, 400, 'invalid_grant', "the assertion's subject is not a user of this server"],
        [
          'an unknown resource',
          () => signed({}, { resource: 'https://unknown.example/mcp' }),
          asAgent,
          400,
          'invalid_target',
          'the requested resource is unknown to this authorization server',
        ],
        [
          'no scope in common',
          () => signed({}, { scope: 'tools:write' }),
          asAgent,
          400,
          'invalid_scope',
          "no scope is left: the requested, asserted, client's and issuer's scopes have none in common",
        ],
      ];
      const before = await consumedCount(server);
      for (const [name, make, headers, status, error, description] of cases) {
        const response = await tokenRequest(server, { grant_type: JWT_BEARER, assertion: await make() }, headers);
        await assertOAuthError(response, status, error, description).catch((e: Error) => {
          throw new Error(`${name}: ${e.message}`);
        });
      }
      assert.equal(await consumedCount(server), before, 'a refused assertion consumed nothing');
      // The one refused for want of client authentication is good with it.
      const assertion = await signed({});
      assert.equal((await tokenRequest(server, { grant_type: JWT_BEARER, assertion })).status, 401);
      assert.equal((await tokenRequest(server, { grant_type: JWT_BEARER, assertion }, asAgent)).status, 200);
    });

    test('an issuer whose subject claim is email: only a user whose e-mail is verified', async () => {
      const request = (email: string) =>
        emailIdp.requestIdJag({ email, sub: 'idp-user-1', client_id: other.id, aud: server.url, resource: MCP, scope: 'tools:read' });
      const ok = await tokenRequest(server, { grant_type: JWT_BEARER, assertion: await request('alice@example.com') }, basic(other.id, other.secret));
      assert.equal(ok.status, 200, await ok.clone().text());
      const refused = await tokenRequest(server, { grant_type: JWT_BEARER, assertion: await request('bob@example.com') }, basic(other.id, other.secret));
      await assertOAuthError(refused, 400, 'invalid_grant', "the user's e-mail address is not verified");
    });

    const workloadToken = (claims: Record<string, unknown> = {}, issuer = 'https://token.actions.githubusercontent.example') => {
      const now = Math.floor(Date.now() / 1000);
      return new SignJWT({
        iss: issuer,
        sub: 'repo:example/app:ref:refs/heads/main',
        aud: `${server.url}/api/token`,
        iat: now,
        exp: now + 300,
        jti: crypto.randomUUID(),
        ...claims,
      })
        .setProtectedHeader({ alg: 'RS256', kid: keys.kid, typ: 'JWT' })
        .sign(keys.privateKey);
    };

    test("a workload's own token gets its client's token for the configured resource: no client authentication, no refresh token", async () => {
      const token = await workloadToken();
      const response = await tokenRequest(server, { grant_type: JWT_BEARER, assertion: token });
      const body = (await response.json()) as Record<string, unknown>;
      assert.equal(response.status, 200, JSON.stringify(body));
      assert.deepEqual(Object.keys(body).sort(), ['access_token', 'expires_in', 'scope', 'token_type']);
      assert.equal(body.scope, 'tools:read');
      const { introspector } = await registeredIntrospector();
      const introspection = (await (
        await fetch(`${server.url}/oauth/introspect`, {
          method: 'POST',
          headers: { 'content-type': 'application/x-www-form-urlencoded', ...basic(introspector.id, introspector.secret) },
          body: new URLSearchParams({ token: body.access_token as string }),
        })
      ).json()) as Record<string, unknown>;
      assert.equal(introspection.sub, deployer.id);
      assert.equal(introspection.username, undefined);
      assert.equal(introspection.aud, MCP);
      await assertOAuthError(
        await tokenRequest(server, { grant_type: JWT_BEARER, assertion: token }),
        400,
        'invalid_grant',
        'the assertion has already been used',
      );
      // Without a jti a platform token is not single use.
      const noJti = await workloadToken({ jti: undefined });
      for (let i = 0; i < 2; i++) assert.equal((await tokenRequest(server, { grant_type: JWT_BEARER, assertion: noJti })).status, 200);
      // The aud may be the issuer too.
      assert.equal((await tokenRequest(server, { grant_type: JWT_BEARER, assertion: await workloadToken({ aud: server.url }) })).status, 200);
    });

    test("a workload's token refused: another sub, an hour and more to live, another aud, HS256; a key set that hangs, is huge, redirects or is private", async () => {
      const now = Math.floor(Date.now() / 1000);
      const keysUnavailable = "the issuer's keys could not be obtained";
      const cases: Array<[string, () => Promise<string>, string]> = [
        [
          'another sub',
          () => workloadToken({ sub: 'repo:example/app:pull_request' }),
          "the assertion's subject (sub) is not the one this issuer's workloads must have",
        ],
        ['more than an hour to live', () => workloadToken({ exp: now + 3700 }), 'the assertion expires more than an hour from now'],
        ['another aud', () => workloadToken({ aud: 'https://other.example' }), "the assertion's audience (aud) must be this server's token endpoint or issuer"],
        [
          'HS256',
          () =>
            new SignJWT({ iss: 'https://token.actions.githubusercontent.example', sub: 'repo:example/app:ref:refs/heads/main', aud: server.url, exp: now + 60 })
              .setProtectedHeader({ alg: 'HS256' })
              .sign(new TextEncoder().encode('x'.repeat(32))),
          "the assertion's algorithm must be one of RS256, PS256, ES256, EdDSA",
        ],
        ['a key set that never answers', () => workloadToken({}, 'https://slow.issuer.example'), keysUnavailable],
        ['a huge key set', () => workloadToken({}, 'https://huge.issuer.example'), keysUnavailable],
        ['a redirecting key set', () => workloadToken({}, 'https://redirecting.issuer.example'), keysUnavailable],
        ['a key set on a private address, not allowed', () => workloadToken({}, 'https://private.issuer.example'), keysUnavailable],
      ];
      const before = await consumedCount(server);
      for (const [name, make, description] of cases) {
        await assertOAuthError(await tokenRequest(server, { grant_type: JWT_BEARER, assertion: await make() }), 400, 'invalid_grant', description).catch(
          (e: Error) => {
            throw new Error(`${name}: ${e.message}`);
          },
        );
      }
      assert.equal(await consumedCount(server), before);
    });

    test('a resource server that requires a second factor gets no token for an ID-JAG (step-up); refused, audited, nothing consumed', async () => {
      const ctx = server.app.gatehouse;
      const mcp = (await findResourceNamed(ctx, MCP))!;
      await changeTokenSettings(ctx, mcp, { requireSecondFactor: true }, COMMAND_LINE);
      try {
        // Even one that claims a second factor at the IdP: its amr is the IdP's word, in its own vocabulary.
        const now = Math.floor(Date.now() / 1000);
        const claims = { iss: idp.issuer, sub: 'alice', client_id: agent.id, aud: server.url, resource: MCP, scope: 'tools:read', iat: now, exp: now + 120 };
        const assertion = await idp.sign({ typ: 'oauth-id-jag+jwt' }, { ...claims, jti: 'step-up-jti', amr: ['pwd', 'otp', 'mfa'] });
        const consumed = await consumedCount(server);
        const refused = await tokenRequest(server, { grant_type: JWT_BEARER, assertion }, basic(agent.id, agent.secret));
        await assertOAuthError(refused, 400, 'invalid_grant', 'the resource server requires a login with a second factor, which an assertion cannot prove');
        assert.equal(await consumedCount(server), consumed, 'a refused assertion consumes nothing');
        const audited = await server.store.db.selectFrom('audit_events').select(['type', 'detail']).where('type', '=', 'assertion_refused').execute();
        assert.ok(audited.some((row) => String(row.detail).includes('step-up-jti')));
      } finally {
        await changeTokenSettings(ctx, (await findResourceNamed(ctx, MCP))!, { requireSecondFactor: false }, COMMAND_LINE);
      }
      const granted = await tokenRequest(server, { grant_type: JWT_BEARER, assertion: await idJag() }, basic(agent.id, agent.secret));
      assert.equal(granted.status, 200, 'the same request once the resource server no longer requires one');
    });

    test('every accepted or refused assertion is audited by issuer, subject and jti, never the assertion', async () => {
      const assertion = await idJag({ jti: 'audited-jti' });
      await tokenRequest(server, { grant_type: JWT_BEARER, assertion }, basic(agent.id, agent.secret));
      await tokenRequest(server, { grant_type: JWT_BEARER, assertion }, basic(agent.id, agent.secret));
      const rows = (await server.store.db.selectFrom('audit_events').select(['type', 'detail']).execute()).filter((row) =>
        String(row.detail).includes('audited-jti'),
      );
      assert.deepEqual(rows.map((row) => row.type).sort(), ['assertion_refused', 'token_issued']);
      for (const row of rows) {
        const detail = JSON.parse(row.detail!) as Record<string, unknown>;
        assert.equal(detail.issuer, idp.issuer);
        assert.equal(detail.subject, 'alice');
      }
      const signature = assertion.split('.')[2]!;
      assert.ok(!server.logs.some((line) => line.includes(signature)));
      assert.ok(!(await server.store.db.selectFrom('audit_events').select('detail').execute()).some((row) => String(row.detail).includes(signature)));
    });
  });
}
