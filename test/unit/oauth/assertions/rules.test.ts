/**
 * SPEC §4.11's profile rules, one test per rule, for identity assertions (ID-JAG,
 * src/oauth/assertions/id-jag.ts), workload identity (workload.ts) and `private_key_jwt`
 * client assertions (client-assertion.ts); the generic verifier they share is
 * test/unit/received-jwt.test.ts's. The issuers' keys are a local JWK Set (no network), the
 * clock is fixed, the database in memory; single use is shown through the token endpoint
 * (oauth/grants/index.ts requestToken), where an assertion is consumed.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { JWTPayload } from 'jose';
import { COMMAND_LINE } from '../../../../src/audit.ts';
import { disableUser } from '../../../../src/accounts/users.ts';
import { createClient } from '../../../../src/clients/clients.ts';
import { registerResource } from '../../../../src/clients/resources.ts';
import { accountUri } from '../../../../src/config.ts';
import type { AppContext } from '../../../../src/context.ts';
import { CLIENT_ASSERTION_TYPE, ClientAssertionRefused, clientAssertionCheck } from '../../../../src/oauth/assertions/client-assertion.ts';
import { verifyIdJag } from '../../../../src/oauth/assertions/id-jag.ts';
import { createIssuer } from '../../../../src/oauth/assertions/issuers.ts';
import { ID_JAG_TYPE } from '../../../../src/identity/id-jags.ts';
import { readAssertion, type VerifiedAssertion } from '../../../../src/oauth/assertions/profiles.ts';
import { verifyWorkload } from '../../../../src/oauth/assertions/workload.ts';
import { requestToken } from '../../../../src/oauth/grants/index.ts';
import { JWT_BEARER_GRANT_TYPE } from '../../../../src/oauth/grants/types.ts';
import type { Client, TrustedIssuer } from '../../../../src/store/schema.ts';
import { ADDRESS, memoryContext, person, PUBLIC_URL, type TestContext } from '../../support/context.ts';
import { sign, signingKey, withLocalKeys, type SigningKey } from '../../support/issuers.ts';

const IDP = 'https://idp.example';
const EMAIL_IDP = 'https://email-idp.example';
const NAMING_IDP = 'https://naming-idp.example';
const CI = 'https://ci.example';
const CI_SUB = 'repo:acme/app:ref:refs/heads/main';
const MCP = 'https://mcp.example/mcp';
const TOKEN_ENDPOINT = `${PUBLIC_URL}/api/token`;

/** What a refused check throws: its OAuth error and description. */
const refusal = (error: string, description: string | RegExp) => ({ error, description });

describe('SPEC §4.11 assertion rules', () => {
  let t: TestContext;
  let ctx: AppContext;
  let now: number;
  let idpKey: SigningKey;
  let clientKey: SigningKey;
  let agent: Client;
  let agentSecret: string;
  let other: Client;
  let publicClient: Client;
  let deployer: Client;
  let keyed: Client;
  const issuers: Record<string, TrustedIssuer> = {};

  before(async () => {
    t = await memoryContext();
    now = Math.floor(t.clock.now / 1000);
    [idpKey, clientKey] = await Promise.all([signingKey('idp-1'), signingKey('client-1')]);
    ctx = withLocalKeys(t.ctx, { [IDP]: idpKey.jwks, [EMAIL_IDP]: idpKey.jwks, [NAMING_IDP]: idpKey.jwks, [CI]: idpKey.jwks });
    await person(t.ctx, 'alice', true);
    await person(t.ctx, 'bob', false);
    await disableUser(t.ctx, await person(t.ctx, 'carol', true), COMMAND_LINE);
    await registerResource(t.ctx, { uri: MCP, name: 'MCP', scopes: [{ name: 'tools:read', description: 'Use the tools' }] }, COMMAND_LINE);
    const base = { grantType: 'authorization_code', redirectUris: ['https://app.example/cb'], trusted: false, requirePkce: true, scope: 'tools:read' };
    const made = await createClient(t.ctx.db, { ...base, name: 'Agent', confidential: true }, t.clock.now);
    [agent, agentSecret] = [made.client, made.secret!];
    other = (await createClient(t.ctx.db, { ...base, name: 'Other', confidential: true }, t.clock.now)).client;
    publicClient = (await createClient(t.ctx.db, { ...base, name: 'Public', confidential: false }, t.clock.now)).client;
    const machine = { ...base, grantType: 'client_credentials', redirectUris: [], confidential: true };
    deployer = (await createClient(t.ctx.db, { ...machine, name: 'Deployer' }, t.clock.now)).client;
    keyed = (await createClient(t.ctx.db, { ...machine, name: 'Keyed', jwks: JSON.stringify(clientKey.jwks) }, t.clock.now)).client;
    const issuer = async (input: Parameters<typeof createIssuer>[1]) => (issuers[input.issuer] = await createIssuer(t.ctx, input, COMMAND_LINE));
    await issuer({ issuer: IDP, profile: 'id-jag' });
    await issuer({ issuer: EMAIL_IDP, profile: 'id-jag', subjectClaim: 'email' });
    await issuer({ issuer: NAMING_IDP, profile: 'id-jag', clients: [agent.id] });
    await issuer({ issuer: CI, profile: 'workload', clients: [deployer.id], subject: CI_SUB });
  });
  after(() => t.close());

  let serial = 0;
  const jti = () => `jti-${++serial}`;

  describe('identity assertions (ID-JAG)', () => {
    const claims = (extra: Record<string, unknown> = {}): JWTPayload => ({
      iss: IDP,
      sub: 'alice',
      aud: PUBLIC_URL,
      client_id: agent.id,
      iat: now,
      exp: now + 300,
      jti: jti(),
      resource: MCP,
      scope: 'tools:read',
      ...extra,
    });
    const idJag = (extra: Record<string, unknown> = {}, header: Record<string, unknown> = {}) => sign(idpKey, claims(extra), { typ: ID_JAG_TYPE, ...header });
    const verify = async (jws: string | Promise<string>, client: Client | null = agent, issuer = IDP): Promise<VerifiedAssertion> =>
      verifyIdJag(readAssertion(await jws), issuers[issuer]!, client, ctx);

    test('a well-formed ID-JAG is accepted: the person, the client, its jti, scope and resource', async () => {
      const verified = await verify(idJag({ jti: 'the-jti' }));
      assert.equal(verified.profile, 'id-jag');
      assert.equal(verified.user?.username, 'alice');
      assert.equal(verified.client.id, agent.id);
      assert.deepEqual([verified.jti, verified.replayId], ['the-jti', 'the-jti']);
      assert.deepEqual(verified.assertedScopes, ['tools:read']);
      assert.equal(verified.assertedResource, MCP);
    });

    test('the header typ must be oauth-id-jag+jwt', async () => {
      for (const typ of ['JWT', 'at+jwt', undefined]) {
        await assert.rejects(verify(idJag({}, { typ })), refusal('invalid_grant', `the assertion's type (typ) must be ${ID_JAG_TYPE}`));
      }
    });

    test("aud is Gatehouse's issuer exactly: not the token endpoint, not another spelling, not one of several", async () => {
      for (const aud of [TOKEN_ENDPOINT, `${PUBLIC_URL}/`, 'https://AUTH.example', [PUBLIC_URL, 'https://other.example'], 'https://other.example']) {
        await assert.rejects(verify(idJag({ aud })), refusal('invalid_grant', "the assertion's audience (aud) must be this authorization server's issuer"));
      }
      assert.ok(await verify(idJag({ aud: [PUBLIC_URL] })), 'an array of that one is it');
    });

    test('client_id equals the authenticated client', async () => {
      for (const clientId of [other.id, undefined, '']) {
        await assert.rejects(verify(idJag({ client_id: clientId })), refusal('invalid_grant', "the assertion's client_id is not the authenticated client"));
      }
      await assert.rejects(verify(idJag(), other), refusal('invalid_grant', "the assertion's client_id is not the authenticated client"));
    });

    test('the client authenticates: no client or a public one is invalid_client', async () => {
      await assert.rejects(verify(idJag(), null), { error: 'invalid_client' });
      await assert.rejects(verify(idJag({ client_id: publicClient.id }), publicClient), { error: 'invalid_client' });
    });

    test('an issuer that names clients (--client) is for those only: another confidential client is unauthorized_client', async () => {
      assert.ok(await verify(idJag({ iss: NAMING_IDP }), agent, NAMING_IDP));
      await assert.rejects(verify(idJag({ iss: NAMING_IDP, client_id: other.id }), other, NAMING_IDP), { error: 'unauthorized_client' });
      assert.ok(await verify(idJag({ client_id: other.id }), other), 'one that names none: any confidential client');
    });

    test('jti is required', async () => {
      await assert.rejects(verify(idJag({ jti: undefined })), refusal('invalid_grant', 'the assertion has no jti'));
    });

    test('the lifetime exp − iat is at most 300 s, and iat is then required', async () => {
      assert.ok(await verify(idJag({ iat: now - 10, exp: now + 290 })));
      await assert.rejects(verify(idJag({ iat: now - 10, exp: now + 291 })), refusal('invalid_grant', /lifetime \(exp - iat\) is longer than 300 seconds/));
      await assert.rejects(verify(idJag({ iat: undefined })), refusal('invalid_grant', 'the assertion has no issue time (iat)'));
      await assert.rejects(verify(idJag({ exp: undefined })), refusal('invalid_grant', 'the assertion has no expiry (exp)'));
    });

    test('sub names an existing, enabled user: by username or userid; unknown, disabled or missing is refused', async () => {
      assert.equal((await verify(idJag({ sub: accountUri('alice', t.ctx.config) }))).user?.username, 'alice');
      const notAUser = refusal('invalid_grant', "the assertion's subject is not a user of this server");
      for (const sub of ['nobody', 'carol', 'acct:alice@elsewhere.example', 'alice\u0000']) await assert.rejects(verify(idJag({ sub })), notAUser);
      await assert.rejects(verify(idJag({ sub: undefined })), refusal('invalid_grant', 'the assertion has no sub'));
    });

    test("an email subject (the issuer's subject claim) names only a user whose e-mail address is verified", async () => {
      const byEmail = (email: string | undefined) => verify(idJag({ iss: EMAIL_IDP, sub: 'idp-user-1', email }), agent, EMAIL_IDP);
      assert.equal((await byEmail('ALICE@example.com')).user?.username, 'alice');
      await assert.rejects(byEmail('bob@example.com'), refusal('invalid_grant', "the user's e-mail address is not verified"));
      await assert.rejects(byEmail('carol@example.com'), refusal('invalid_grant', "the assertion's subject is not a user of this server"));
      await assert.rejects(byEmail('nobody@example.com'), refusal('invalid_grant', "the assertion's subject is not a user of this server"));
      await assert.rejects(byEmail(undefined), refusal('invalid_grant', 'the assertion has no email'));
    });

    test('scope, when present, is a string; resource, when present, is one string (else invalid_target)', async () => {
      await assert.rejects(verify(idJag({ scope: ['tools:read'] })), refusal('invalid_grant', "the assertion's scope is not a string"));
      await assert.rejects(verify(idJag({ resource: [MCP] })), { error: 'invalid_target' });
      const bare = await verify(idJag({ scope: undefined, resource: undefined }));
      assert.deepEqual([bare.assertedScopes, bare.assertedResource], [null, null]);
    });

    test('only the issuer’s own keys, asymmetric: another key’s signature is refused', async () => {
      const stranger = await signingKey('idp-1');
      await assert.rejects(verify(sign(stranger, claims(), { typ: ID_JAG_TYPE })), refusal('invalid_grant', "the assertion's signature is invalid"));
    });

    test('an ID-JAG is single use: the same jti again at the token endpoint is invalid_grant', async () => {
      const assertion = await idJag();
      const authorization = `Basic ${btoa(`${agent.id}:${encodeURIComponent(agentSecret)}`)}`;
      const params = { grant_type: JWT_BEARER_GRANT_TYPE, assertion };
      const first = await requestToken({ params, authorization, address: ADDRESS }, ctx);
      assert.equal(first.scope, 'tools:read');
      assert.equal(first.refresh_token, undefined, 'no refresh token');
      await assert.rejects(requestToken({ params, authorization, address: ADDRESS }, ctx), refusal('invalid_grant', 'the assertion has already been used'));
    });
  });

  describe('workload identity', () => {
    const token = (extra: Record<string, unknown> = {}) => sign(idpKey, { iss: CI, sub: CI_SUB, aud: TOKEN_ENDPOINT, iat: now, exp: now + 600, ...extra });
    const verify = async (jws: string | Promise<string>) => verifyWorkload(readAssertion(await jws), issuers[CI]!, ctx);

    test("a well-formed token is accepted for the issuer's client, as itself (no person)", async () => {
      const verified = await verify(token());
      assert.equal(verified.profile, 'workload');
      assert.equal(verified.client.id, deployer.id);
      assert.equal(verified.user, null);
      assert.equal(verified.subject, CI_SUB);
    });

    test('aud is the token endpoint URL or the issuer; anything else is refused', async () => {
      assert.ok(await verify(token({ aud: PUBLIC_URL })));
      assert.ok(await verify(token({ aud: ['https://other.example', TOKEN_ENDPOINT] })));
      for (const aud of ['https://other.example', `${PUBLIC_URL}/oauth/revoke`]) {
        await assert.rejects(verify(token({ aud })), refusal('invalid_grant', "the assertion's audience (aud) must be this server's token endpoint or issuer"));
      }
    });

    test("the sub is pinned to the issuer's configured subject", async () => {
      for (const sub of ['repo:acme/app:ref:refs/heads/feature', 'repo:evil/app:ref:refs/heads/main', undefined]) {
        await assert.rejects(
          verify(token({ sub })),
          refusal('invalid_grant', "the assertion's subject (sub) is not the one this issuer's workloads must have"),
        );
      }
    });

    test('exp is required and at most an hour away (10 s leeway)', async () => {
      assert.ok(await verify(token({ exp: now + 3610 })));
      await assert.rejects(verify(token({ exp: now + 3611 })), refusal('invalid_grant', 'the assertion expires more than an hour from now'));
      await assert.rejects(verify(token({ exp: undefined })), refusal('invalid_grant', 'the assertion has no expiry (exp)'));
      await assert.rejects(verify(token({ exp: now - 11 })), refusal('invalid_grant', 'the assertion has expired'));
    });

    test('jti is optional; with one, the token is single use; without, it is not', async () => {
      const present = async (assertion: string) =>
        requestToken({ params: { grant_type: JWT_BEARER_GRANT_TYPE, assertion, resource: MCP }, address: ADDRESS }, ctx);
      const without = await token();
      assert.equal((await verify(without)).replayId, null);
      assert.ok(await present(without));
      assert.ok(await present(without), 'a platform token without jti is used until it expires');
      const once = await token({ jti: jti() });
      const first = await present(once);
      assert.equal(first.refresh_token, undefined, 'no refresh token');
      await assert.rejects(present(once), refusal('invalid_grant', 'the assertion has already been used'));
    });
  });

  describe('private_key_jwt', () => {
    const check = (path = '/api/token') => clientAssertionCheck(ctx, path, ADDRESS);
    const assertion = (extra: Record<string, unknown> = {}, key = clientKey) =>
      sign(key, { iss: keyed.id, sub: keyed.id, aud: TOKEN_ENDPOINT, iat: now, exp: now + 60, jti: jti(), ...extra });
    const refused = (pattern: RegExp) => (error: unknown) => error instanceof ClientAssertionRefused && pattern.test(error.detail);

    test("a JWS by one of the client's keys, iss and sub its client ID, aud the issuer or the endpoint's URL, is accepted", async () => {
      await check()(keyed, await assertion());
      await check()(keyed, await assertion({ aud: PUBLIC_URL }));
      await check('/oauth/revoke')(keyed, await assertion({ aud: `${PUBLIC_URL}/oauth/revoke` }));
      await check()(keyed, await assertion({ aud: ['https://other.example', TOKEN_ENDPOINT] }));
    });

    test('iss and sub are both the client ID', async () => {
      await assert.rejects(check()(keyed, await assertion({ iss: other.id })), refused(/refused \(/));
      await assert.rejects(check()(keyed, await assertion({ sub: other.id })), refused(/refused \(/));
    });

    test("aud is the issuer or the URL of the endpoint called: another endpoint's is refused", async () => {
      await assert.rejects(check()(keyed, await assertion({ aud: `${PUBLIC_URL}/oauth/revoke` })), refused(/refused \(/));
      await assert.rejects(check()(keyed, await assertion({ aud: 'https://other.example' })), refused(/refused \(/));
    });

    test('exp is required and at most 300 s away', async () => {
      await check()(keyed, await assertion({ exp: now + 310 }));
      await assert.rejects(check()(keyed, await assertion({ exp: now + 311 })), refused(/refused \(/));
      await assert.rejects(check()(keyed, await assertion({ exp: undefined })), refused(/refused \(/));
    });

    test('jti is required, and single use: a refused assertion consumes nothing', async () => {
      await assert.rejects(check()(keyed, await assertion({ jti: undefined })), refused(/refused \(/));
      const id = jti();
      await assert.rejects(check()(keyed, await assertion({ jti: id, aud: 'https://other.example' })), refused(/refused \(/));
      const good = await assertion({ jti: id });
      await check()(keyed, good);
      await assert.rejects(check()(keyed, good), refused(/jti was consumed/));
    });

    test("only the client's registered keys: another key's signature is refused, and a client without keys has none", async () => {
      const stranger = await signingKey('client-1');
      await assert.rejects(check()(keyed, await assertion({}, stranger)), refused(/refused \(/));
      await assert.rejects(check()(deployer, await assertion({ iss: deployer.id, sub: deployer.id })), refused(/no registered keys/));
    });

    test('at the token endpoint any of these is 401 invalid_client; a good one authenticates the client', async () => {
      const params = (client_assertion: string) => ({
        grant_type: 'client_credentials',
        resource: MCP,
        client_assertion_type: CLIENT_ASSERTION_TYPE,
        client_assertion,
      });
      await assert.rejects(requestToken({ params: params(await assertion({ exp: now + 3600 })), address: ADDRESS }, ctx), {
        error: 'invalid_client',
        status: 401,
      });
      const issued = await requestToken({ params: params(await assertion()), address: ADDRESS }, ctx);
      assert.equal(typeof issued.access_token, 'string');
    });
  });
});
