/**
 * NUL in what a request carries (SPEC §5, issue 30 item 6). PostgreSQL's text type cannot
 * hold "\u0000" — node-postgres throws, and the request was a 500 — while SQLite stores it:
 * every way text gets from a request to a query must refuse NUL first, with the endpoint's
 * own 4xx, the same on both backends. One attack per way in: JSON inside a form field (a
 * passkey answer, at the login and at the second step), a path parameter, a client ID
 * metadata document fetched from its URL, a registration's JSON body, the claims of JWTs
 * (assertions at the token endpoint, client assertions), form fields and query strings,
 * cookies and the Authorization header.
 */
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { SignJWT } from 'jose';
import { COMMAND_LINE } from '../../src/audit.ts';
import { createIssuer } from '../../src/oauth/assertions/issuers.ts';
import { findClient } from '../../src/store/clients.ts';
import { serveKeys, type KeyServer } from '../support/assertion-issuers.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { jwksOf, signingKey } from '../support/jwks-server.ts';
import { authorizationUrl, discover } from '../support/oauth-client.ts';
import { documentServer } from '../support/metadata-document.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { testCaProblem } from '../support/tls.ts';
import { UserAgent, formFields } from '../support/user-agent.ts';
import { userWithStoredPasskey } from '../support/webauthn.ts';

const JWT_BEARER = 'urn:ietf:params:oauth:grant-type:jwt-bearer';
const CLIENT_ASSERTION_TYPE = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer';
const base64url = (text: string) => Buffer.from(text).toString('base64url');
const basic = (id: string, secret: string) => ({ authorization: `Basic ${Buffer.from(`${id}:${secret}`).toString('base64')}` });

/** A refusal in the endpoint's JSON format: this status and OAuth error code. */
async function assertJsonRefusal(response: Response, status: number, error: string, what: string): Promise<void> {
  const body = await response.text();
  assert.equal(response.status, status, `${what}: ${body.slice(0, 300)}`);
  assert.equal((JSON.parse(body) as { error: string }).error, error, `${what}: ${body.slice(0, 300)}`);
}

/** A refusal shown as the page's own error page: this status, HTML. */
async function assertPageRefusal(response: Response, status: number, what: string): Promise<void> {
  const body = await response.text();
  assert.equal(response.status, status, `${what}: ${body.slice(0, 300)}`);
  assert.match(response.headers.get('content-type') ?? '', /^text\/html/, what);
}

for (const backend of BACKENDS) {
  describe(`NUL in a request is refused before it reaches the database (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let keys: KeyServer;
    const form = (fields: Record<string, string>) => new URLSearchParams(fields);
    const post = (path: string, body: URLSearchParams | string, headers: Record<string, string> = {}) =>
      fetch(new URL(path, server.url), { method: 'POST', body, headers, redirect: 'manual' });

    before(async () => {
      server = await startServer(
        backend,
        { KEYS_SECRET: 'k'.repeat(40), LOGIN_FAILURES_PER_ADDRESS: '0', CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES: 'true', DYNAMIC_CLIENT_REGISTRATION: 'true' },
        'localhost',
      );
      keys = await serveKeys();
    });
    after(async () => {
      keys?.close();
      await server?.close();
    });

    test('attack: a passkey answer whose credential ID holds NUL, at /login/passkey and /login/second-factor/passkey', async () => {
      const { user, credentialId } = await userWithStoredPasskey(server, 'alice');
      /** An answer naming `id`, with a challenge this browser was given, signed by no one. */
      const answer = (challenge: string, id: string) =>
        JSON.stringify({
          id,
          rawId: id,
          type: 'public-key',
          response: {
            clientDataJSON: base64url(JSON.stringify({ type: 'webauthn.get', challenge, origin: server.url, crossOrigin: false })),
            authenticatorData: base64url('not authenticator data'),
            signature: base64url('no signature'),
            userHandle: base64url(user.id),
          },
          clientExtensionResults: {},
        });
      const nulId = `${credentialId}\u0000`;

      const visitor = new UserAgent(server.url);
      const csrf = formFields((await visitor.visit('/login')).html, '/login').get('_csrf')!;
      const options = await visitor.fetch('/login/passkey/options', { method: 'POST', body: form({ _csrf: csrf }) });
      const { challenge } = (await options.json()) as { challenge: string };
      const login = await visitor.fetch('/login/passkey', { method: 'POST', body: form({ _csrf: csrf, response: answer(challenge, nulId) }) });
      await assertJsonRefusal(login, 401, 'access_denied', 'POST /login/passkey');

      // bob logged in with his password alone: his session is at a second step (step-up).
      await server.createUser('bob');
      const bob = new UserAgent(server.url);
      await bob.login('bob');
      const bobCsrf = formFields((await bob.visit('/')).html, '/logout').get('_csrf')!;
      const second = await bob.fetch('/login/second-factor/passkey', { method: 'POST', body: form({ _csrf: bobCsrf, response: answer(challenge, nulId) }) });
      await assertJsonRefusal(second, 401, 'access_denied', 'POST /login/second-factor/passkey');
      // Adding a passkey: NUL anywhere in the answer (here its transports) makes it unreadable.
      const added = await bob.fetch('/account/security/passkeys', {
        method: 'POST',
        body: form({
          _csrf: bobCsrf,
          name: 'Key',
          response: answer(challenge, credentialId).replace('"clientExtensionResults"', '"transports":["usb\\u0000"],"x"'),
        }),
      });
      assert.equal(added.status, 400, await added.text());
    });

    test('attack: a path parameter holding NUL (%00) on the admin pages', async () => {
      await server.createUser('root', { admin: true });
      const admin = new UserAgent(server.url);
      await admin.login('root');
      const csrf = formFields((await admin.visit('/admin/users')).html, '/logout').get('_csrf')!;
      for (const path of ['/admin/resources/%00', '/admin/resources/a%00b/delete', '/admin/oauthclients/%00', '/admin/users/%00']) {
        await assertPageRefusal(await admin.fetch(path), 400, `GET ${path}`);
      }
      for (const path of ['/admin/resources/%00/delete', '/admin/oauthclients/%00/secret', '/admin/users/%00/disable']) {
        await assertPageRefusal(await admin.fetch(path, { method: 'POST', body: form({ _csrf: csrf }) }), 400, `POST ${path}`);
      }
    });

    test('attack: a client ID metadata document whose URLs hold NUL is refused when fetched, never stored', { skip: testCaProblem() ?? false }, async () => {
      const documents = await documentServer('Nul CLI');
      try {
        await server.createUser('dave');
        const dave = new UserAgent(server.url);
        await dave.login('dave');
        const { publicJwk } = await signingKey('ES256', 'k1');
        for (const [path, fields] of [
          ['/apps/logout.json', { backchannel_logout_uri: 'https://127.0.0.1/logout\u0000' }],
          ['/apps/keys.json', { token_endpoint_auth_method: 'private_key_jwt', jwks_uri: 'https://127.0.0.1/keys\u0000.json' }],
          ['/apps/jwks.json', { token_endpoint_auth_method: 'private_key_jwt', jwks: { keys: [{ ...publicJwk, kid: 'k\u0000' }] } }],
          ['/apps/extra.json', { 'x\u0000': 'an unknown member' }],
        ] as const) {
          const url = documents.serve(path, fields);
          const { url: authorization } = await authorizationUrl(await discover(server, url, { redirectUri: 'http://127.0.0.1:51004/callback' }));
          // A person who approves whatever consent page is shown.
          const outcome = await dave.authorize(authorization);
          assert.equal(outcome.redirect, null, `${path}: no redirect to the client`);
          assert.equal(outcome.response.status, 400, `${path}: ${outcome.html.slice(0, 300)}`);
          assert.match(outcome.html, /metadata document was refused/);
          assert.equal(await findClient(server.store.db, url), undefined, `${path}: nothing stored`);
        }
      } finally {
        documents.server.close();
      }
    });

    test('attack: a registration (JSON body) holding NUL', async () => {
      for (const body of [
        { client_name: 'Nul\u0000 App', redirect_uris: ['http://127.0.0.1/callback'] },
        { client_name: 'Nul App', redirect_uris: ['http://127.0.0.1/call\u0000back'] },
        { client_name: 'Nul App', redirect_uris: ['http://127.0.0.1/callback'], software_id: '\u0000' },
      ]) {
        const response = await post('/oauth/register', JSON.stringify(body), { 'content-type': 'application/json' });
        await assertJsonRefusal(response, 400, 'invalid_client_metadata', JSON.stringify(body));
      }
    });

    test('attack: JWT claims holding NUL — assertions at /api/token and client assertions', async () => {
      const host = new URL(server.url).hostname;
      const now = Math.floor(Date.now() / 1000);
      const publisher = await server.createClient({ name: 'Publisher', grantType: JWT_BEARER, redirectUris: [], confidential: true });
      const grantToken = (claims: Record<string, unknown>) =>
        new SignJWT({ iss: publisher.client.id, aud: host, sub: `acct:alice@${host}`, nbf: now, exp: now + 300, ...claims })
          .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
          .sign(new TextEncoder().encode(publisher.secret!));
      const exchange = async (assertion: string, headers: Record<string, string> = {}) =>
        post('/api/token', form({ grant_type: JWT_BEARER, assertion }), headers);
      await assertJsonRefusal(await exchange(await grantToken({ sub: `acct:al\u0000ice@${host}` })), 400, 'invalid_grant', 'publisher sub');
      await assertJsonRefusal(await exchange(await grantToken({ iss: `${publisher.client.id}\u0000` })), 401, 'invalid_client', 'publisher iss');

      // An ID-JAG of a trusted issuer, validly signed, for a confidential client named by it.
      const agent = await server.createClient({ name: 'Agent', confidential: true });
      const issuer = 'https://idp.nul.example';
      await createIssuer(
        server.app.gatehouse,
        { issuer, profile: 'id-jag', jwksUri: keys.jwksUri, allowPrivateAddress: true, clients: [agent.client.id] },
        COMMAND_LINE,
      );
      const idJag = (claims: Record<string, unknown>) =>
        new SignJWT({ iss: issuer, sub: 'alice', aud: server.url, client_id: agent.client.id, jti: crypto.randomUUID(), iat: now, exp: now + 120, ...claims })
          .setProtectedHeader({ alg: 'RS256', kid: keys.kid, typ: 'oauth-id-jag+jwt' })
          .sign(keys.privateKey);
      const asAgent = basic(agent.client.id, agent.secret!);
      for (const [claims, status, error] of [
        [{ sub: 'ali\u0000ce' }, 400, 'invalid_grant'],
        [{ sub: 'acct:ali\u0000ce@localhost' }, 400, 'invalid_grant'],
        [{ iss: `${issuer}\u0000` }, 401, 'invalid_client'],
        [{ client_id: `${agent.client.id}\u0000` }, 400, 'invalid_grant'],
        [{ resource: 'https://api.example/\u0000' }, 400, 'invalid_target'],
        [{ scope: 'openid\u0000' }, 400, 'invalid_scope'],
      ] as const) {
        await assertJsonRefusal(await exchange(await idJag(claims), asAgent), status, error, `ID-JAG ${JSON.stringify(claims)}`);
      }

      // private_key_jwt: the client ID a client assertion claims (its iss and sub) holding NUL.
      const clientKey = await signingKey('ES256', 'k1');
      const keyed = await server.createClient({
        name: 'Keyed job',
        grantType: 'client_credentials',
        redirectUris: [],
        confidential: true,
        jwks: JSON.stringify(jwksOf(clientKey)),
      });
      const claimed = `${keyed.client.id}\u0000`;
      const clientAssertion = await new SignJWT({ iss: claimed, sub: claimed, aud: server.url, jti: crypto.randomUUID(), exp: now + 60 })
        .setProtectedHeader({ alg: 'ES256', kid: 'k1' })
        .sign(clientKey.privateKey);
      const token = await post(
        '/api/token',
        form({ grant_type: 'client_credentials', client_assertion_type: CLIENT_ASSERTION_TYPE, client_assertion: clientAssertion }),
      );
      await assertJsonRefusal(token, 401, 'invalid_client', 'client assertion iss and sub');
    });

    test('form fields, query strings, cookies and headers holding NUL', async () => {
      const visitor = new UserAgent(server.url);
      const login = await visitor.visit('/login');
      const submitted = await visitor.submit(login.html, '/login', { username: 'al\u0000ice', password: 'x' });
      assert.equal(submitted.response.status, 400);
      await assertJsonRefusal(await post('/api/token', form({ grant_type: 'client_credentials', client_id: '\u0000' })), 400, 'invalid_request', 'client_id');
      await assertJsonRefusal(
        await post('/api/token', form({ grant_type: 'client_credentials' }), basic('\u0000', 'secret')),
        401,
        'invalid_client',
        'Basic client ID',
      );
      await assertPageRefusal(await fetch(new URL('/login?next=%00', server.url)), 400, 'GET /login?next=%00');
      // Cookies are looked up only by their hash, or by a client ID's shape: NUL in one is no cookie.
      const cookie = ['gatehouse_session', 'gatehouse_pending', 'gatehouse_webauthn', 'gatehouse_notice', 'gatehouse_security_notice', 'gatehouse_csrf']
        .map((name) => `${name}=a%00b`)
        .join('; ');
      for (const path of ['/', '/login', '/login/second-factor', '/account/applications', '/account/security']) {
        const response = await fetch(new URL(path, server.url), { headers: { cookie }, redirect: 'manual' });
        assert.ok(response.status < 500 && response.status !== 400, `GET ${path} with NUL cookies: ${response.status}`);
      }
      // A header never holds NUL itself (Node's parser refuses the request): what the address
      // in the audit trail is read from (X-Forwarded-For, behind a proxy) is safe.
      const raw = await new Promise<string>((resolve, reject) => {
        const socket = connect(Number(new URL(server.url).port), '127.0.0.1', () =>
          socket.write('POST /login HTTP/1.1\r\nHost: localhost\r\nX-Forwarded-For: 203.0.113.9\u0000\r\nContent-Length: 0\r\nConnection: close\r\n\r\n'),
        );
        let answer = '';
        socket.on('data', (data) => (answer += String(data)));
        socket.on('end', () => resolve(answer));
        socket.on('error', reject);
      });
      assert.match(raw, /^HTTP\/1\.1 400 /);
    });
  });
}
