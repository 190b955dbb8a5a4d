/**
 * The authorization decision (oauth/authorize.ts `authorize`) on its own, without HTTP: what
 * it says to do next for each kind of request and person — log in, ask, respond — and which
 * refusals go back to the client and which never leave the server. Real collaborators over
 * an in-memory SQLite database; no server, no network.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { PASSWORD_LOGIN_AMR, type SignedIn } from '../../src/login.ts';
import { createAccount } from '../../src/accounts/users.ts';
import { createClient } from '../../src/clients/clients.ts';
import { loadConfig } from '../../src/config.ts';
import { type OpenContext } from '../../src/context.ts';
import { openContext } from '../../src/open-context.ts';
import { authorize, type Arrival, type NextStep } from '../../src/oauth/authorize.ts';
import { OAuthError } from '../../src/protocol/errors.ts';
import { migrate, openStore, type Store } from '../../src/store/database.ts';
import type { Client } from '../../src/store/schema.ts';

const REDIRECT = 'https://app.example/callback';
const CHALLENGE = 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM';

describe('the authorization decision', () => {
  let store: Store;
  let ctx: OpenContext;
  /** Alice, signed in with her password. */
  let alice: SignedIn;
  let app: Client;
  let trusted: Client;

  before(async () => {
    const config = loadConfig({ DATABASE_URL: 'sqlite::memory:', PUBLIC_URL: 'https://auth.example' });
    store = openStore(config.database);
    await migrate(store);
    ctx = await openContext(config, store, { info() {}, warn() {}, error() {} });
    const user = await createAccount(
      ctx.db,
      { username: 'alice', email: 'alice@example.com', password: 'correct horse battery staple', isAdmin: false },
      ctx.now(),
    );
    alice = { user, login: { authTime: ctx.now(), amr: PASSWORD_LOGIN_AMR, sid: 'test-session' } };
    const base = { grantType: 'authorization_code', redirectUris: [REDIRECT], confidential: false, requirePkce: true, scope: '' };
    app = (await createClient(ctx.db, { ...base, name: 'App', trusted: false }, ctx.now())).client;
    trusted = (await createClient(ctx.db, { ...base, name: 'Trusted', trusted: true }, ctx.now())).client;
  });
  after(async () => {
    await ctx.close();
    await store.close();
  });

  /** A GET with these parameters (on top of a complete, valid request for `client`), or the consent form's answer. */
  function arrival(client: Client, params: Record<string, string> = {}, decision: Arrival['decision'] = null): Arrival {
    const all = {
      client_id: client.id,
      redirect_uri: REDIRECT,
      response_type: 'code',
      state: 's1',
      code_challenge: CHALLENGE,
      code_challenge_method: 'S256',
      ...params,
    };
    return { url: `/oauth/authorize?${new URLSearchParams(all)}`, params: all, decision };
  }

  /** The redirect's query, for a `respond` step. */
  function answered(step: NextStep): URLSearchParams {
    assert.equal(step.kind, 'respond');
    assert.equal(step.response.mode, 'query');
    const url = new URL(step.response.redirectTo);
    assert.equal(url.origin + url.pathname, REDIRECT);
    return url.searchParams;
  }

  test('nobody signed in: log in first, then come back to the same request', async () => {
    const step = await authorize(arrival(app), null, ctx, '192.0.2.1');
    assert.equal(step.kind, 'login');
    assert.match(step.next, /^\/oauth\/authorize\?client_id=/);
    assert.equal(step.switchAccount, false);
  });

  test('prompt=login asks to log in even when someone is, and is not asked again on the way back', async () => {
    const step = await authorize(arrival(app, { prompt: 'login consent' }), alice, ctx, '192.0.2.1');
    assert.equal(step.kind, 'login');
    assert.equal(step.switchAccount, true);
    assert.equal(new URL(step.next, 'https://auth.example').searchParams.get('prompt'), 'consent');
  });

  test('prompt=none with nobody signed in goes back to the client as login_required', async () => {
    const query = answered(await authorize(arrival(app, { prompt: 'none' }), null, ctx, '192.0.2.1'));
    assert.equal(query.get('error'), 'login_required');
    assert.equal(query.get('state'), 's1');
    assert.equal(query.get('iss'), 'https://auth.example');
  });

  test('a signed-in person who has not approved the client is asked; the form carries the request back', async () => {
    const step = await authorize(arrival(app), alice, ctx, '192.0.2.1');
    assert.equal(step.kind, 'consent');
    assert.deepEqual(step.request.scopes, ['annotation:read', 'annotation:write']);
    assert.ok(step.fields.some((field) => field.name === 'code_challenge' && field.value === CHALLENGE));
  });

  test('deny answers access_denied; approve answers a code, and the approval is remembered', async () => {
    assert.equal(answered(await authorize(arrival(app, {}, 'deny'), alice, ctx, '192.0.2.1')).get('error'), 'access_denied');
    assert.match(answered(await authorize(arrival(app, {}, 'approve'), alice, ctx, '192.0.2.1')).get('code') ?? '', /.+/);
    const again = answered(await authorize(arrival(app, { state: 's2' }), alice, ctx, '192.0.2.1'));
    assert.ok(again.get('code'), 'not asked again');
    assert.equal(again.get('state'), 's2');
    assert.equal((await authorize(arrival(app, { prompt: 'consent' }), alice, ctx, '192.0.2.1')).kind, 'consent', 'prompt=consent asks anyway');
  });

  test('a trusted client is never asked about', async () => {
    assert.ok(answered(await authorize(arrival(trusted), alice, ctx, '192.0.2.1')).get('code'));
  });

  test('after the client and redirect URL are verified, errors go back to the client', async () => {
    const cases: Array<[Record<string, string>, string]> = [
      [{ response_type: 'token' }, 'unsupported_response_type'],
      [{ scope: 'no-such-scope' }, 'invalid_scope'],
      [{ resource: 'https://unknown.example/api' }, 'invalid_target'],
      [{ code_challenge_method: 'plain' }, 'invalid_request'],
      [{ prompt: 'select_account' }, 'invalid_request'],
    ];
    for (const [params, error] of cases) {
      const query = answered(await authorize(arrival(app, params), alice, ctx, '192.0.2.1'));
      assert.equal(query.get('error'), error, JSON.stringify(params));
      assert.equal(query.get('code'), null);
    }
  });

  test('an unknown client or a redirect URL not its own is never redirected to: it is thrown for the error page', async () => {
    const refusals: Arrival[] = [
      arrival(app, { client_id: '00000000-0000-4000-8000-000000000000' }),
      arrival(app, { redirect_uri: 'https://evil.example/callback' }),
      arrival(app, { client_id: 'not a client' }),
    ];
    for (const refused of refusals) {
      await assert.rejects(authorize(refused, alice, ctx, '192.0.2.1'), (error: unknown) => error instanceof OAuthError && !error.redirectable);
    }
  });

  test('the popup flow answers with a message for the redirect URL origin, never one the request names', async () => {
    const step = await authorize(arrival(trusted, { response_mode: 'web_message', origin: 'https://evil.example' }), alice, ctx, '192.0.2.1');
    assert.equal(step.kind, 'respond');
    assert.equal(step.response.mode, 'web_message');
    assert.equal(step.response.post.origin, 'https://app.example');
    assert.equal(JSON.parse(step.response.post.message).type, 'authorization_response');
  });
});
