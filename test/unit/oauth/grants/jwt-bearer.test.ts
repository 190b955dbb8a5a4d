/**
 * The jwt-bearer grant's decisions (src/oauth/grants/jwt-bearer.ts, SPEC §4.11) through the
 * token endpoint's entry point (oauth/grants/index.ts requestToken), on an in-memory SQLite
 * context whose trusted issuers' keys are a local JWK Set: the scopes — the requested ∩ the
 * asserted ∩ the client's ∩ the issuer's, none left `invalid_scope`, identity scopes never
 * implied — and the audience — an ID-JAG's `resource` claim, which a `resource` parameter must
 * agree with (`invalid_target`); a workload's parameter, else its issuer's configured
 * resource; a publisher's grant token, the built-in resource only.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { decodeJwt, SignJWT } from 'jose';
import { COMMAND_LINE } from '../../../../src/audit.ts';
import { createClient } from '../../../../src/clients/clients.ts';
import { registerResource } from '../../../../src/clients/resources.ts';
import { accountUri } from '../../../../src/config.ts';
import type { AppContext } from '../../../../src/context.ts';
import { createIssuer } from '../../../../src/oauth/assertions/issuers.ts';
import { ID_JAG_TYPE } from '../../../../src/identity/id-jags.ts';
import type { TokenResponse } from '../../../../src/oauth/issue.ts';
import { requestToken } from '../../../../src/oauth/grants/index.ts';
import { JWT_BEARER_GRANT_TYPE } from '../../../../src/oauth/grants/types.ts';
import type { RawParams } from '../../../../src/protocol/params.ts';
import { ADDRESS, memoryContext, person, PUBLIC_URL, type TestContext } from '../../support/context.ts';
import { sign, signingKey, withLocalKeys, type SigningKey } from '../../support/issuers.ts';

const IDP = 'https://idp.example';
const LIMITED_IDP = 'https://limited-idp.example';
const CI = 'https://ci.example';
const MCP = 'https://mcp.example/mcp';
const DOCS = 'https://docs.example/api';
const STEP_UP = 'https://vault.example/api';

describe('the jwt-bearer grant: scopes and audience', () => {
  let t: TestContext;
  let ctx: AppContext;
  let now: number;
  let idpKey: SigningKey;
  /** The agent's Basic credentials; it may have tools:read tools:write docs:read vault:read openid profile. */
  let agent: string;
  let agentId: string;
  let deployer: string;
  let publisher: { id: string; secret: string };
  let serial = 0;

  before(async () => {
    t = await memoryContext();
    now = Math.floor(t.clock.now / 1000);
    idpKey = await signingKey('idp-1');
    ctx = withLocalKeys(t.ctx, { [IDP]: idpKey.jwks, [LIMITED_IDP]: idpKey.jwks, [CI]: idpKey.jwks });
    await person(t.ctx, 'alice', true);
    const jwt = { tokenFormat: 'jwt' };
    const scope = (name: string) => ({ name, description: name });
    await registerResource(t.ctx, { ...jwt, uri: MCP, name: 'MCP', scopes: ['tools:read', 'tools:write', 'tools:admin'].map(scope) }, COMMAND_LINE);
    await registerResource(t.ctx, { ...jwt, uri: DOCS, name: 'Docs', scopes: [scope('docs:read')] }, COMMAND_LINE);
    await registerResource(t.ctx, { ...jwt, uri: STEP_UP, name: 'Vault', scopes: [scope('vault:read')], requireSecondFactor: true }, COMMAND_LINE);
    const base = { redirectUris: ['https://app.example/cb'], trusted: false, requirePkce: true, confidential: true };
    const made = async (input: { name: string; grantType: string; scope: string; redirectUris?: string[] }) => {
      const { client, secret } = await createClient(t.ctx.db, { ...base, ...input }, t.clock.now, t.ctx.config.keys.secret);
      return { id: client.id, secret: secret! };
    };
    const agentClient = await made({ name: 'Agent', grantType: 'authorization_code', scope: 'tools:read tools:write docs:read vault:read openid profile' });
    agentId = agentClient.id;
    agent = `Basic ${btoa(`${agentClient.id}:${encodeURIComponent(agentClient.secret)}`)}`;
    deployer = (await made({ name: 'Deployer', grantType: 'client_credentials', redirectUris: [], scope: 'tools:read tools:write docs:read vault:read' })).id;
    publisher = await made({ name: 'Publisher', grantType: JWT_BEARER_GRANT_TYPE, redirectUris: [], scope: '' });
    await createIssuer(t.ctx, { issuer: IDP, profile: 'id-jag' }, COMMAND_LINE);
    await createIssuer(t.ctx, { issuer: LIMITED_IDP, profile: 'id-jag', scope: 'tools:read tools:admin openid' }, COMMAND_LINE);
    await createIssuer(t.ctx, { issuer: CI, profile: 'workload', clients: [deployer], resource: MCP, scope: 'tools:read docs:read vault:read' }, COMMAND_LINE);
  });
  after(() => t.close());

  /** An ID-JAG for alice from `iss`, for the agent, with these claims on top (undefined: left out). */
  const idJag = (claims: Record<string, unknown> = {}) =>
    sign(
      idpKey,
      { iss: IDP, sub: 'alice', aud: PUBLIC_URL, client_id: agentId, iat: now, exp: now + 300, jti: `jag-${++serial}`, resource: MCP, ...claims },
      { typ: ID_JAG_TYPE },
    );
  const workload = (claims: Record<string, unknown> = {}) =>
    sign(idpKey, { iss: CI, sub: 'repo:acme/app', aud: `${PUBLIC_URL}/api/token`, iat: now, exp: now + 600, jti: `ci-${++serial}`, ...claims });

  /** The token response for the assertion (and `scope`, `resource`), the agent authenticating for an ID-JAG. */
  async function exchange(assertion: string, params: RawParams = {}, authorization?: string): Promise<TokenResponse> {
    return requestToken({ params: { grant_type: JWT_BEARER_GRANT_TYPE, assertion, ...params }, authorization, address: ADDRESS }, ctx);
  }
  /** The audience of a JWT access token. */
  const audienceOf = (response: TokenResponse) => decodeJwt(response.access_token).aud;

  describe('scopes', () => {
    test("requested ∩ asserted ∩ client's ∩ issuer's: each one takes away what the others allow", async () => {
      // The issuer allows tools:read tools:admin openid; the client tools:read tools:write; the assertion all three tools scopes.
      const asserted = { iss: LIMITED_IDP, scope: 'tools:read tools:write tools:admin' };
      assert.equal((await exchange(await idJag(asserted), {}, agent)).scope, 'tools:read');
      assert.equal((await exchange(await idJag(asserted), { scope: 'tools:read tools:write tools:admin' }, agent)).scope, 'tools:read');
      // The requested scope narrows what the rest allow.
      const wide = await exchange(await idJag({ scope: 'tools:read tools:write' }), { scope: 'tools:write' }, agent);
      assert.equal(wide.scope, 'tools:write');
      // The assertion's own scope narrows too.
      assert.equal((await exchange(await idJag({ scope: 'tools:write' }), {}, agent)).scope, 'tools:write');
    });

    test('no issuer list, no asserted scope and no request restrict nothing: every scope the client may have on the resource', async () => {
      assert.equal((await exchange(await idJag({ scope: undefined }), {}, agent)).scope, 'tools:read tools:write');
    });

    test('none left is invalid_scope, and the assertion is not consumed', async () => {
      const none = { error: 'invalid_scope', description: "no scope is left: the requested, asserted, client's and issuer's scopes have none in common" };
      await assert.rejects(exchange(await idJag({ iss: LIMITED_IDP, scope: 'tools:write tools:admin' }), {}, agent), none);
      await assert.rejects(exchange(await idJag({ scope: 'tools:read' }), { scope: 'tools:write' }, agent), none);
      await assert.rejects(exchange(await idJag({ scope: 'tools:admin' }), {}, agent), none, 'a scope the client may not have');
      const unused = await idJag({ jti: 'kept', scope: 'tools:read' });
      await assert.rejects(exchange(unused, { scope: 'tools:write' }, agent), none);
      assert.equal((await exchange(unused, {}, agent)).scope, 'tools:read', 'the refused request consumed nothing');
    });

    test('identity scopes are never implied: only when requested (and allowed by all)', async () => {
      const asserted = { scope: 'openid profile tools:read' };
      assert.equal((await exchange(await idJag(asserted), {}, agent)).scope, 'tools:read');
      assert.equal((await exchange(await idJag(asserted), { scope: 'openid profile tools:read' }, agent)).scope, 'openid profile tools:read');
      // The limited issuer allows openid but not profile.
      assert.equal((await exchange(await idJag({ ...asserted, iss: LIMITED_IDP }), { scope: 'openid profile tools:read' }, agent)).scope, 'openid tools:read');
    });

    test("a workload's scopes: requested ∩ client's ∩ issuer's on the resource, never an identity scope", async () => {
      assert.equal((await exchange(await workload())).scope, 'tools:read', "the issuer's list leaves out tools:write");
      assert.equal((await exchange(await workload(), { resource: DOCS })).scope, 'docs:read');
      await assert.rejects(exchange(await workload(), { scope: 'tools:write' }), { error: 'invalid_scope' });
      assert.equal((await exchange(await workload(), { scope: 'openid tools:read' })).scope, 'tools:read', 'a workload names no person');
    });
  });

  describe('audience', () => {
    test("an ID-JAG's tokens are for the resource it names; a resource parameter naming another is invalid_target", async () => {
      assert.equal(audienceOf(await exchange(await idJag(), {}, agent)), MCP);
      assert.equal(audienceOf(await exchange(await idJag(), { resource: `${MCP}/` }, agent)), MCP, 'the same resource, spelt otherwise');
      const mismatch = { error: 'invalid_target', description: '"resource" is not the resource the assertion names' };
      await assert.rejects(exchange(await idJag(), { resource: DOCS }, agent), mismatch);
      await assert.rejects(exchange(await idJag(), { resource: PUBLIC_URL, scope: 'openid' }, agent), mismatch);
    });

    test('an ID-JAG naming no resource is for the resource parameter; one naming an unknown resource is invalid_target', async () => {
      assert.equal(audienceOf(await exchange(await idJag({ resource: undefined }), { resource: DOCS }, agent)), DOCS);
      assert.equal((await exchange(await idJag({ resource: undefined }), { scope: 'openid' }, agent)).scope, 'openid', 'none: the built-in resource');
      await assert.rejects(exchange(await idJag({ resource: 'https://unknown.example/api' }), {}, agent), { error: 'invalid_target' });
      await assert.rejects(exchange(await idJag({ resource: undefined }), { resource: [MCP, DOCS] }, agent), { error: 'invalid_target' });
    });

    test("a workload's tokens are for the resource parameter, else the issuer's configured resource; the client's own (sub is its client ID)", async () => {
      const configured = await exchange(await workload());
      assert.equal(audienceOf(configured), MCP);
      assert.equal(decodeJwt(configured.access_token).sub, deployer);
      assert.equal(configured.refresh_token, undefined);
      assert.equal(audienceOf(await exchange(await workload(), { resource: DOCS })), DOCS);
      await assert.rejects(exchange(await workload(), { resource: 'https://unknown.example/api' }), { error: 'invalid_target' });
    });

    test("a publisher's grant token is for the built-in resource only", async () => {
      const grantToken = (jti: string) =>
        new SignJWT({ iss: publisher.id, sub: accountUri('alice', t.ctx.config), aud: PUBLIC_URL, nbf: now, exp: now + 300, jti })
          .setProtectedHeader({ alg: 'HS256' })
          .sign(new TextEncoder().encode(publisher.secret));
      const builtIn = await exchange(await grantToken('p1'));
      assert.ok(builtIn.refresh_token, 'with a refresh token, as in h');
      assert.throws(() => decodeJwt(builtIn.access_token), 'an opaque token: the built-in resource stays opaque');
      assert.ok(await exchange(await grantToken('p2'), { resource: PUBLIC_URL }));
      await assert.rejects(exchange(await grantToken('p3'), { resource: MCP }), {
        error: 'invalid_target',
        description: "a grant token's tokens are for the built-in resource only",
      });
    });

    test("a resource server that requires a second factor gets no person's token for an assertion; a workload's, as itself, it does", async () => {
      await assert.rejects(exchange(await idJag({ resource: STEP_UP, scope: 'vault:read' }), {}, agent), {
        error: 'invalid_grant',
        description: 'the resource server requires a login with a second factor, which an assertion cannot prove',
      });
      assert.equal(audienceOf(await exchange(await workload(), { resource: STEP_UP })), STEP_UP);
    });
  });
});
