/**
 * RP-initiated logout (src/oauth/logout.ts, SPEC §4.10): reading the request — an
 * `id_token_hint` this server signed (minted here with the context's own keys), a `client_id`
 * that must agree with it, a `post_logout_redirect_uri` followed only when registered for that
 * client, `state` carried back, a blocked client never redirected to — and the decision to end
 * the session, ask first, or do nothing. Real collaborators over an in-memory SQLite database.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { SignJWT, generateKeyPair } from 'jose';
import { COMMAND_LINE } from '../../../src/audit.ts';
import { createClient } from '../../../src/clients/clients.ts';
import { accountUri } from '../../../src/config.ts';
import { mintIdToken, readIdTokenHint, ID_TOKEN_TYPE } from '../../../src/identity/id-tokens.ts';
import { revokeKey } from '../../../src/identity/key-schedule.ts';
import { PASSWORD_LOGIN_AMR, type SignedIn } from '../../../src/login.ts';
import { logoutDecision, readLogoutRequest } from '../../../src/oauth/logout.ts';
import { insertClient } from '../../../src/store/clients.ts';
import type { Client, SigningAlg, User } from '../../../src/store/schema.ts';
import { memoryContext, person, PUBLIC_URL, type TestContext } from '../support/context.ts';

const BACK = 'https://app.example/logged-out';
const OTHER_BACK = 'https://other.example/bye';

describe('RP-initiated logout', () => {
  let t: TestContext;
  let alice: User;
  let bob: User;
  let app: Client;
  let other: Client;
  let blockedId: string;

  before(async () => {
    t = await memoryContext();
    alice = await person(t.ctx, 'alice');
    bob = await person(t.ctx, 'bob');
    const base = { grantType: 'authorization_code', confidential: false, trusted: false, requirePkce: true, scope: '' };
    app = (await createClient(t.ctx.db, { ...base, name: 'App', redirectUris: ['https://app.example/cb'], postLogoutRedirectUris: [BACK] }, t.clock.now))
      .client;
    other = (
      await createClient(
        t.ctx.db,
        { ...base, name: 'Other', redirectUris: ['https://other.example/cb'], postLogoutRedirectUris: [OTHER_BACK], idTokenAlg: 'ES256' },
        t.clock.now,
      )
    ).client;
    blockedId = randomUUID();
    await insertClient(t.ctx.db, {
      id: blockedId,
      name: 'Blocked',
      kind: 'dynamic',
      blocked: 1,
      grant_type: 'authorization_code',
      redirect_uris: JSON.stringify(['https://blocked.example/cb']),
      post_logout_redirect_uris: JSON.stringify(['https://blocked.example/bye']),
      secret_hash: null,
      trusted: 0,
      require_pkce: 1,
      scopes: '',
      created_at: t.clock.now,
    });
  });
  after(() => t.close());

  /** An ID token for `user` issued to `clientId`, as the token endpoint mints it. */
  const idToken = (user: User, clientId: string, alg: SigningAlg = 'RS256') =>
    mintIdToken(
      t.ctx,
      {
        clientId,
        alg,
        identity: { sub: accountUri(user.username, t.ctx.config) },
        login: { authTime: t.clock.now, amr: PASSWORD_LOGIN_AMR, sid: 'sid-1' },
        nonce: null,
      },
      'an access token',
      t.clock.now,
    );
  const signedIn = (user: User): SignedIn => ({ user, login: { authTime: t.clock.now, amr: PASSWORD_LOGIN_AMR, sid: 'sid-1' } });

  test('a hint from this server names its person and client; the registered URL is followed with state; it ends that person’s session', async () => {
    const request = await readLogoutRequest(t.ctx, { id_token_hint: await idToken(alice, app.id), post_logout_redirect_uri: BACK, state: 'a b&c' });
    assert.deepEqual(request.hint, { sub: accountUri('alice', t.ctx.config), clientId: app.id, sid: 'sid-1' });
    assert.equal(request.clientName, 'App');
    assert.equal(request.redirectTo, `${BACK}?state=a+b%26c`);
    assert.equal(logoutDecision(request, signedIn(alice), t.ctx.config), 'end');
    assert.equal(logoutDecision(request, signedIn(bob), t.ctx.config), 'confirm', 'a hint naming someone else: ask first');
    assert.equal(logoutDecision(request, null, t.ctx.config), 'none');
  });

  test("a hint is read past its expiry, whatever key algorithm the client's ID tokens use", async () => {
    const hint = await idToken(alice, other.id, 'ES256');
    t.clock.now += (t.ctx.config.idTokenTtl + 60) * 1000;
    try {
      const request = await readLogoutRequest(t.ctx, { id_token_hint: hint });
      assert.equal(request.hint?.clientId, other.id);
      assert.equal(request.redirectTo, null, 'none asked for');
    } finally {
      t.clock.now -= (t.ctx.config.idTokenTtl + 60) * 1000;
    }
  });

  test('without a hint the person confirms first; client_id alone picks the client whose URLs may be followed', async () => {
    const request = await readLogoutRequest(t.ctx, { client_id: app.id, post_logout_redirect_uri: BACK });
    assert.equal(request.hint, null);
    assert.equal(request.redirectTo, BACK, 'no state: none appended');
    assert.equal(logoutDecision(request, signedIn(alice), t.ctx.config), 'confirm');
  });

  test('a client_id other than the hint’s audience is refused (the error page), also when both clients exist', async () => {
    await assert.rejects(readLogoutRequest(t.ctx, { id_token_hint: await idToken(alice, app.id), client_id: other.id }), {
      error: 'invalid_request',
      description: 'the "client_id" is not the client the "id_token_hint" was issued to',
    });
    const same = await readLogoutRequest(t.ctx, { id_token_hint: await idToken(alice, app.id), client_id: app.id, post_logout_redirect_uri: BACK });
    assert.equal(same.redirectTo, BACK);
  });

  test('a post_logout_redirect_uri not registered for that client is never followed: Gatehouse’s own page', async () => {
    const hint = await idToken(alice, app.id);
    for (const uri of [OTHER_BACK, `${BACK}/`, `${BACK}?x=1`, 'https://app.example/cb', 'https://evil.example/']) {
      const request = await readLogoutRequest(t.ctx, { id_token_hint: hint, post_logout_redirect_uri: uri, state: 's' });
      assert.equal(request.redirectTo, null, uri);
      assert.equal(request.clientName, 'App');
    }
    // The other client's URL with the other client named, or with no client named at all.
    assert.equal((await readLogoutRequest(t.ctx, { client_id: app.id, post_logout_redirect_uri: OTHER_BACK })).redirectTo, null);
    assert.equal((await readLogoutRequest(t.ctx, { post_logout_redirect_uri: BACK })).redirectTo, null);
  });

  test('a blocked client gets no redirect and is not named; an unknown one neither', async () => {
    const blocked = await readLogoutRequest(t.ctx, { client_id: blockedId, post_logout_redirect_uri: 'https://blocked.example/bye', state: 's' });
    assert.equal(blocked.redirectTo, null);
    assert.equal(blocked.clientName, null);
    const unknown = await readLogoutRequest(t.ctx, { client_id: randomUUID(), post_logout_redirect_uri: BACK });
    assert.deepEqual([unknown.redirectTo, unknown.clientName], [null, null]);
  });

  test('a hint this server did not issue is refused: another key, another issuer, not a JWT, another typ', async () => {
    const { privateKey } = await generateKeyPair('RS256');
    const claims = { iss: PUBLIC_URL, sub: accountUri('alice', t.ctx.config), aud: app.id, iat: 0, exp: 9_999_999_999 };
    const forged = await new SignJWT(claims)
      .setProtectedHeader({ alg: 'RS256', kid: t.ctx.keys.jwks().keys.find((k) => k.alg === 'RS256')!.kid, typ: 'JWT' })
      .sign(privateKey);
    const otherIssuer = await t.ctx.keys.signJwt('RS256', { typ: ID_TOKEN_TYPE }, { ...claims, iss: 'https://elsewhere.example' });
    const logoutToken = await t.ctx.keys.signJwt('RS256', { typ: 'logout+jwt' }, claims);
    for (const hint of [forged, otherIssuer, logoutToken, 'not.a.jwt']) {
      await assert.rejects(readLogoutRequest(t.ctx, { id_token_hint: hint, post_logout_redirect_uri: BACK }), {
        error: 'invalid_request',
        description: 'the "id_token_hint" is not an ID token this server issued',
      });
    }
    assert.ok(await readIdTokenHint(t.ctx, await t.ctx.keys.signJwt('RS256', { typ: ID_TOKEN_TYPE }, claims)), 'the same claims, signed here, are a hint');
  });

  test('a repeated parameter is refused', async () => {
    await assert.rejects(readLogoutRequest(t.ctx, { client_id: [app.id, app.id] }), { error: 'invalid_request' });
  });

  test('the fields are kept for the confirmation form, empty ones left out', async () => {
    const request = await readLogoutRequest(t.ctx, { client_id: app.id, state: 's', ui_locales: 'fr', post_logout_redirect_uri: '' });
    assert.deepEqual(request.fields, { client_id: app.id, state: 's', ui_locales: 'fr' });
  });

  test('a hint signed by a key revoked since is no longer accepted', async () => {
    const hint = await idToken(alice, app.id);
    const kid = JSON.parse(Buffer.from(hint.split('.')[0]!, 'base64url').toString()).kid as string;
    await revokeKey(t.ctx, kid, COMMAND_LINE);
    await assert.rejects(readLogoutRequest(t.ctx, { id_token_hint: hint }), { error: 'invalid_request' });
    assert.ok(await readLogoutRequest(t.ctx, { id_token_hint: await idToken(alice, app.id) }), 'the new active key signs hints that are');
  });
});
