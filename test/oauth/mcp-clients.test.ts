/**
 * The MCP clients people connect with, each on the registration shape it publishes or sends
 * today (docs/mcp.md, "Client by client", quotes these tests by name), end to end on both
 * backends: its client ID metadata document served over https by this test (a certificate
 * from the test CA; CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES=true so 127.0.0.1 may serve it), or
 * its registration request at POST /oauth/register; then the authorization request with PKCE
 * S256 and `resource` (an MCP server registered as a resource server), consent as the person,
 * the code exchange, a refresh — oauth4webapi as the client library — and introspection by the
 * MCP server showing the token is for it (`aud`). Besides: ChatGPT's private_key_jwt (its key
 * set at a `jwks_uri` this test serves), Cursor's private-use redirect, the Inspector's CORS,
 * step-up by scope union, and the registration shapes Gatehouse refuses.
 *
 * Where each shape comes from is said next to it. The documents are the published ones field
 * for field except `client_id` (a document's `client_id` is the URL it is served from, here a
 * local one) and ChatGPT's `jwks_uri` (ours, with our key).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as oauth from 'oauth4webapi';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { signingKey, startJwksServer, type JwksServer, type SigningKey } from '../support/jwks-server.ts';
import { documentServer } from '../support/metadata-document.ts';
import { discover, insecure, profile, tokenResult, type App } from '../support/oauth-client.ts';
import { registerResourceServer, type ResourceServer } from '../support/resources.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { testCaProblem } from '../support/tls.ts';
import { UserAgent, type Outcome } from '../support/user-agent.ts';

/** The MCP server the clients connect to, as `npm run example:mcp` registers it. */
const MCP_URL = 'http://127.0.0.1:4000/mcp';
const MCP_NAME = 'Example notes (MCP)';
const MCP_SCOPES = [
  { name: 'notes:read', description: 'Read your notes' },
  { name: 'notes:write', description: 'Add notes' },
];
/** What a client asks for: the MCP server's `scopes_supported` (protected resource metadata). */
const NOTES = 'notes:read notes:write';
/** Claude, Claude Code and the SDKs append offline_access when Gatehouse's metadata lists it in scopes_supported (SEP-2207). */
const NOTES_OFFLINE = `${NOTES} offline_access`;

const AUTHORIZATION_CODE_AND_REFRESH = ['authorization_code', 'refresh_token'];
const JWT_BEARER = 'urn:ietf:params:oauth:grant-type:jwt-bearer';
const DEVICE_CODE = 'urn:ietf:params:oauth:grant-type:device_code';

interface McpClient {
  /** The test's name, which docs/mcp.md quotes. */
  name: string;
  /**
   * `document`: served at `path`, these fields plus `client_id` (its URL). `dynamic`: this
   * body POSTed to /oauth/register. `jwks_uri: JWKS` stands for the key set this test serves.
   */
  registration: { document: Record<string, unknown>; path: string } | { dynamic: Record<string, unknown> };
  /** The `redirect_uri` it sends: a loopback one on a port of its own choosing, its https callback, or its app scheme. */
  redirectUri: string;
  scope: string;
  /** More authorization request parameters (the TypeScript SDK's prompt=consent with offline_access). */
  authorizationParams?: Record<string, string>;
  /** Whether it sends `resource` on a refresh too (Codex did not: openai/codex#33403). */
  resourceOnRefresh: boolean;
  /** ChatGPT authenticates at the token endpoint with a client assertion signed by its key. */
  privateKeyJwt?: boolean;
  /** The browser origin it calls Gatehouse from, for a client running in a web page (the Inspector). */
  origin?: string;
  /** What the consent page says besides the MCP server, the scopes and "no administrator has checked". */
  consent: RegExp[];
  /** What the consent page must not hold (VS Code's logo on another host: never loaded). */
  consentNot?: RegExp[];
}

/** Stands for the `jwks_uri` of the key set this test serves (ChatGPT's). */
const JWKS = Symbol('jwks_uri');

const CLIENTS: McpClient[] = [
  {
    // https://claude.ai/oauth/claude-code-client-metadata as fetched 2026-09-08 (quoted in full by
    // third-party client matrices; the same fields in anthropics/claude-code#37747 and #44378: no
    // port in the redirect URLs, no application_type). Claude Code listens on localhost on a port
    // of its own (ephemeral, or --callback-port) and asks for the scopes plus offline_access.
    name: 'Claude Code: its metadata document, a localhost redirect on a port of its own',
    registration: {
      path: '/oauth/claude-code-client-metadata',
      document: {
        client_name: 'Claude Code',
        client_uri: 'https://claude.ai',
        redirect_uris: ['http://localhost/callback', 'http://127.0.0.1/callback'],
        grant_types: AUTHORIZATION_CODE_AND_REFRESH,
        response_types: ['code'],
        token_endpoint_auth_method: 'none',
      },
    },
    redirectUri: 'http://localhost:54545/callback',
    scope: NOTES_OFFLINE,
    resourceOnRefresh: true,
    consent: [/It runs on this computer/, /It introduced itself through 127\.0\.0\.1/],
  },
  {
    // https://claude.ai/oauth/mcp-oauth-client-metadata, Claude's hosted surfaces (claude.ai,
    // Claude Desktop, mobile, Cowork), as retrieved 2026-08-14 and frozen in
    // cloudflare/workers-oauth-provider's tests: a public client whose grant_types list the
    // jwt-bearer grant (Enterprise Managed Auth) besides the code and refresh grants.
    name: 'Claude (claude.ai, Claude Desktop): its metadata document listing the jwt-bearer grant, its https callback',
    registration: {
      path: '/oauth/mcp-oauth-client-metadata',
      document: {
        client_name: 'Claude',
        client_uri: 'https://claude.ai',
        redirect_uris: ['https://claude.ai/api/mcp/auth_callback'],
        grant_types: [...AUTHORIZATION_CODE_AND_REFRESH, JWT_BEARER],
        response_types: ['code'],
        token_endpoint_auth_method: 'none',
      },
    },
    redirectUri: 'https://claude.ai/api/mcp/auth_callback',
    scope: NOTES_OFFLINE,
    resourceOnRefresh: true,
    consent: [/you will be sent to <strong>claude\.ai<\/strong>/],
  },
  {
    // https://vscode.dev/oauth/client-metadata.json as fetched 2026-09-08: a native client with a
    // logo on another host, the device grant listed, and 127.0.0.1:33418 — the port VS Code tries
    // first; when it is taken VS Code listens on another, and RFC 8252 §7.3 lets any port match.
    name: "VS Code: its metadata document, a loopback redirect on another port than the document's, a logo on another host",
    registration: {
      path: '/oauth/client-metadata.json',
      document: {
        client_name: 'Visual Studio Code',
        logo_uri: 'https://code.visualstudio.com/assets/branding/code-stable.png',
        grant_types: [...AUTHORIZATION_CODE_AND_REFRESH, DEVICE_CODE],
        response_types: ['code'],
        token_endpoint_auth_method: 'none',
        application_type: 'native',
        client_uri: 'https://vscode.dev/product',
        redirect_uris: ['http://127.0.0.1:33418/', 'https://vscode.dev/redirect'],
      },
    },
    redirectUri: 'http://127.0.0.1:50123/',
    scope: NOTES,
    resourceOnRefresh: true,
    consent: [/It runs on this computer/],
    consentNot: [/code\.visualstudio\.com/, /<img/],
  },
  {
    // Cursor registers dynamically (no metadata document as of 2026-09), three redirect URLs in
    // one request (Cursor staff, forum.cursor.com thread 165019; erp-mafia/accounted#2225,
    // soflyy/agent-connector-for-wp#111): its app scheme, its web agents' callback and, since
    // 3.10.17, localhost:8787. token_endpoint_auth_method none (different-ai/openwork#3059); the
    // rest is the MCP TypeScript SDK's registration, which Cursor's client is built on.
    // client_name "Cursor" is assumed (not quoted by any source found).
    name: 'Cursor: dynamic registration with its cursor:// app redirect',
    registration: {
      dynamic: {
        redirect_uris: ['cursor://anysphere.cursor-mcp/oauth/callback', 'https://www.cursor.com/agents/mcp/oauth/callback', 'http://localhost:8787/callback'],
        token_endpoint_auth_method: 'none',
        grant_types: AUTHORIZATION_CODE_AND_REFRESH,
        response_types: ['code'],
        client_name: 'Cursor',
        scope: NOTES,
      },
    },
    redirectUri: 'cursor://anysphere.cursor-mcp/oauth/callback',
    scope: NOTES,
    resourceOnRefresh: true,
    consent: [
      /the code goes to an application on your device \(the one that opens <code>cursor:<\/code> links\)/,
      /The code goes to an application on your device\./,
    ],
  },
  {
    // The same registration; releases since 3.10.17 come back to the loopback URL instead of the
    // app scheme (Cursor staff, forum.cursor.com thread 165019: many servers refuse custom schemes).
    name: 'Cursor (3.10.17 and later): the same registration, its localhost:8787 redirect',
    registration: {
      dynamic: {
        redirect_uris: ['cursor://anysphere.cursor-mcp/oauth/callback', 'https://www.cursor.com/agents/mcp/oauth/callback', 'http://localhost:8787/callback'],
        token_endpoint_auth_method: 'none',
        grant_types: AUTHORIZATION_CODE_AND_REFRESH,
        response_types: ['code'],
        client_name: 'Cursor',
        scope: NOTES,
      },
    },
    redirectUri: 'http://localhost:8787/callback',
    scope: NOTES,
    resourceOnRefresh: true,
    consent: [/It runs on this computer/, /It may send you to: <strong>this computer<\/strong>, <strong>www\.cursor\.com<\/strong>/],
  },
  {
    // Codex (openai/codex, codex-rs/rmcp-client perform_oauth_login.rs) registers through the rmcp
    // crate (modelcontextprotocol/rust-sdk, transport/auth.rs register_client): its name "Codex", one
    // redirect URL on 127.0.0.1 and the port it listens on, the scopes if any (--scopes or the
    // server's), application_type native (rmcp's default since SEP-837; older releases sent none).
    // Codex did not send `resource` on refresh (openai/codex#33403).
    name: 'Codex: dynamic registration (rmcp), a 127.0.0.1 redirect, no resource on refresh',
    registration: {
      dynamic: {
        client_name: 'Codex',
        redirect_uris: ['http://127.0.0.1:37819/callback'],
        grant_types: AUTHORIZATION_CODE_AND_REFRESH,
        token_endpoint_auth_method: 'none',
        response_types: ['code'],
        scope: NOTES,
        application_type: 'native',
      },
    },
    redirectUri: 'http://127.0.0.1:37819/callback',
    scope: NOTES,
    resourceOnRefresh: false,
    consent: [/It runs on this computer/],
  },
  {
    // https://chatgpt.com/oauth/codex/client.json, which recent Codex releases present when the
    // metadata says client_id_metadata_document_supported (--oauth-client-registration auto|cimd).
    // Its URL and loopback redirect URLs are quoted by several MCP servers' allow-lists; the other
    // fields are not confirmed and are the likeliest (a public native client).
    name: 'Codex: its metadata document (chatgpt.com/oauth/codex/client.json)',
    registration: {
      path: '/oauth/codex/client.json',
      document: {
        client_name: 'Codex',
        application_type: 'native',
        redirect_uris: ['http://127.0.0.1/callback', 'http://localhost/callback'],
        grant_types: AUTHORIZATION_CODE_AND_REFRESH,
        response_types: ['code'],
        token_endpoint_auth_method: 'none',
      },
    },
    redirectUri: 'http://127.0.0.1:41239/callback',
    scope: NOTES,
    resourceOnRefresh: true,
    consent: [/It runs on this computer/],
  },
  {
    // https://opencode.ai/oauth/opencode/client.json, as its route serves it
    // (anomalyco/opencode packages/console/app/src/routes/oauth/opencode/client.json.ts): both the
    // single method and the list of choices, portless loopback redirect URLs.
    name: 'OpenCode: its metadata document (opencode.ai/oauth/opencode/client.json)',
    registration: {
      path: '/oauth/opencode/client.json',
      document: {
        client_name: 'opencode',
        client_uri: 'https://opencode.ai',
        logo_uri: 'https://opencode.ai/web-app-manifest-512x512.png',
        application_type: 'native',
        redirect_uris: ['http://127.0.0.1/callback', 'http://localhost/callback'],
        grant_types: AUTHORIZATION_CODE_AND_REFRESH,
        response_types: ['code'],
        token_endpoint_auth_method: 'none',
        token_endpoint_auth_methods_supported: ['none'],
      },
    },
    redirectUri: 'http://127.0.0.1:51675/callback',
    scope: NOTES,
    resourceOnRefresh: true,
    consent: [/It runs on this computer/],
  },
  {
    // OpenCode before its metadata document (packages/opencode/src/mcp/oauth-provider.ts): the MCP
    // TypeScript SDK 1.x registers its clientMetadata plus the selected scope — a fixed
    // 127.0.0.1:19876 redirect, no application_type.
    name: 'OpenCode: dynamic registration (releases before its metadata document), no application_type',
    registration: {
      dynamic: {
        redirect_uris: ['http://127.0.0.1:19876/mcp/oauth/callback'],
        client_name: 'OpenCode',
        client_uri: 'https://opencode.ai',
        grant_types: AUTHORIZATION_CODE_AND_REFRESH,
        response_types: ['code'],
        token_endpoint_auth_method: 'none',
        scope: NOTES,
      },
    },
    redirectUri: 'http://127.0.0.1:19876/mcp/oauth/callback',
    scope: NOTES,
    resourceOnRefresh: true,
    consent: [/It runs on this computer/],
  },
  {
    // https://chatgpt.com/oauth/client.json as fetched 2026-09-08 (its stable callback, used with
    // an authorization server that sends `iss`): private_key_jwt preferred, none offered too, an
    // RS256 key at https://chatgpt.com/oauth/jwks.json — here at a jwks_uri of this test's.
    name: 'ChatGPT: its metadata document with private_key_jwt and a jwks_uri',
    registration: {
      path: '/oauth/client.json',
      document: {
        client_uri: 'https://chatgpt.com/',
        redirect_uris: ['https://chatgpt.com/connector_platform_oauth_redirect'],
        token_endpoint_auth_method: 'private_key_jwt',
        token_endpoint_auth_methods_supported: ['none', 'private_key_jwt'],
        grant_types: AUTHORIZATION_CODE_AND_REFRESH,
        response_types: ['code'],
        client_name: 'ChatGPT',
        logo_uri: 'https://persistent.oaistatic.com/sonic/misc/openai-logo.png',
        token_endpoint_auth_signing_alg: 'RS256',
        jwks_uri: JWKS,
      },
    },
    redirectUri: 'https://chatgpt.com/connector_platform_oauth_redirect',
    scope: NOTES,
    resourceOnRefresh: true,
    privateKeyJwt: true,
    consent: [/you will be sent to <strong>chatgpt\.com<\/strong>/],
  },
  {
    // The same document in the shape OpenID Connect RP Metadata Choices 1.0 allows and ChatGPT's
    // per-connector documents (https://chatgpt.com/oauth/<id>/client.json, redirect
    // https://chatgpt.com/connector/oauth/<id>) have been described with: only the list of
    // choices, private_key_jwt first. Gatehouse picks private_key_jwt: it is listed and there are keys.
    name: 'ChatGPT: a per-connector document offering only token_endpoint_auth_methods_supported',
    registration: {
      path: '/oauth/IbUR3zxyNQ16/client.json',
      document: {
        client_uri: 'https://chatgpt.com/',
        redirect_uris: ['https://chatgpt.com/connector/oauth/IbUR3zxyNQ16'],
        token_endpoint_auth_method: undefined,
        token_endpoint_auth_methods_supported: ['private_key_jwt', 'none'],
        grant_types: AUTHORIZATION_CODE_AND_REFRESH,
        response_types: ['code'],
        client_name: 'ChatGPT',
        token_endpoint_auth_signing_alg: 'RS256',
        jwks_uri: JWKS,
      },
    },
    redirectUri: 'https://chatgpt.com/connector/oauth/IbUR3zxyNQ16',
    scope: NOTES,
    resourceOnRefresh: true,
    privateKeyJwt: true,
    consent: [/you will be sent to <strong>chatgpt\.com<\/strong>/],
  },
  {
    // The MCP Inspector 2.x in a browser (modelcontextprotocol/inspector core/auth/providers.ts
    // clientMetadata), registered by the TypeScript SDK with the selected scope (the MCP server's
    // scopes_supported plus offline_access); its page is http://localhost:6274 and calls Gatehouse
    // from there (direct connection).
    name: 'MCP Inspector: dynamic registration from its page on localhost:6274',
    registration: {
      dynamic: {
        redirect_uris: ['http://localhost:6274/oauth/callback'],
        token_endpoint_auth_method: 'none',
        grant_types: AUTHORIZATION_CODE_AND_REFRESH,
        response_types: ['code'],
        client_name: 'MCP Inspector',
        client_uri: 'https://github.com/modelcontextprotocol/inspector',
        scope: NOTES_OFFLINE,
        application_type: 'native',
      },
    },
    redirectUri: 'http://localhost:6274/oauth/callback',
    scope: NOTES_OFFLINE,
    authorizationParams: { prompt: 'consent' },
    resourceOnRefresh: true,
    origin: 'http://localhost:6274',
    consent: [/It runs on this computer/],
  },
  {
    // The MCP TypeScript SDK's auth() for the provider of its OAuth guide
    // (examples/guides/clients/oauth.examples.ts: a name, a loopback redirect, application_type
    // native), after resolveClientMetadata's defaults (grant_types) and determineScope (the MCP
    // server's scopes_supported plus offline_access, then prompt=consent). No
    // token_endpoint_auth_method: Gatehouse registers none.
    name: "TypeScript SDK: dynamic registration of its OAuth guide's client",
    registration: {
      dynamic: {
        client_name: 'My MCP Client',
        redirect_uris: ['http://localhost:8090/callback'],
        application_type: 'native',
        grant_types: AUTHORIZATION_CODE_AND_REFRESH,
        scope: NOTES_OFFLINE,
      },
    },
    redirectUri: 'http://localhost:8090/callback',
    scope: NOTES_OFFLINE,
    authorizationParams: { prompt: 'consent' },
    resourceOnRefresh: true,
    consent: [/It runs on this computer/],
  },
  {
    // The MCP Python SDK's OAuthClientProvider for its snippet (examples/snippets/clients/oauth_client.py)
    // as OAuthClientMetadata serializes it (exclude_none: no token_endpoint_auth_method;
    // application_type native, the default since SEP-837), the scope replaced by the selected one.
    name: "Python SDK: dynamic registration of its example client's OAuthClientMetadata",
    registration: {
      dynamic: {
        redirect_uris: ['http://localhost:3000/callback'],
        response_types: ['code'],
        scope: NOTES_OFFLINE,
        client_name: 'Example MCP Client',
        grant_types: AUTHORIZATION_CODE_AND_REFRESH,
        application_type: 'native',
      },
    },
    redirectUri: 'http://localhost:3000/callback',
    scope: NOTES_OFFLINE,
    resourceOnRefresh: true,
    consent: [/It runs on this computer/],
  },
];

/** The scopes a page lists in the list with this id. */
function listedScopes(html: string, id: string): string[] {
  const list = new RegExp(`id="${id}"[\\s\\S]*?</ul>`).exec(html);
  return list ? [...list[0].matchAll(/<code>([^<]+)<\/code>/g)].map((match) => match[1]!) : [];
}

describe('MCP clients on the registration shapes they publish', { skip: testCaProblem() ?? false }, () => {
  let documents: Awaited<ReturnType<typeof documentServer>>;
  let jwks: JwksServer;
  /** ChatGPT's key (RS256, the kid form of chatgpt.com/oauth/jwks.json). */
  let chatgptKey: SigningKey;
  before(async () => {
    [documents, jwks, chatgptKey] = await Promise.all([documentServer(), startJwksServer(), signingKey('RS256', 'cimd-20260428030119')]);
    jwks.publish('chatgpt', [chatgptKey]);
  });
  after(() => {
    documents?.server.close();
    jwks?.close();
  });

  for (const backend of BACKENDS) {
    describe(`(${backend.name})`, backendOptions(backend), () => {
      let server: TestServer;
      let mcp: ResourceServer;
      /** The person, logged in once; each client asks for her consent on its own. */
      let alice: UserAgent;

      before(async () => {
        server = await startServer(backend, { CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES: 'true', DYNAMIC_CLIENT_REGISTRATION: 'true' });
        await server.createUser('alice');
        mcp = await registerResourceServer(server, MCP_URL, MCP_SCOPES, MCP_NAME);
        alice = new UserAgent(server.url);
        await alice.login('alice');
      });
      after(() => server?.close());

      const register = (body: unknown, origin?: string) =>
        fetch(new URL('/oauth/register', server.url), {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...(origin ? { origin } : {}) },
          body: JSON.stringify(body),
        });

      /** What the MCP server learns when it asks Gatehouse about the token. */
      const introspect = async (token: string) =>
        oauth.processIntrospectionResponse(
          mcp.introspector.as,
          mcp.introspector.client,
          await oauth.introspectionRequest(mcp.introspector.as, mcp.introspector.client, mcp.introspector.auth, token, insecure),
        );

      /** The client's ID: its document served (its URL), or what the registration answered. */
      async function clientIdOf(client: McpClient): Promise<string> {
        if ('document' in client.registration) {
          const fields = Object.fromEntries(
            Object.entries(client.registration.document).map(([name, value]) => [name, value === JWKS ? jwks.url('chatgpt') : value]),
          );
          return documents.serve(client.registration.path, fields);
        }
        const response = await register(client.registration.dynamic, client.origin);
        const registered = (await response.json()) as Record<string, unknown>;
        assert.equal(response.status, 201, JSON.stringify(registered));
        if (client.origin) assert.equal(response.headers.get('access-control-allow-origin'), '*');
        assert.equal(registered.token_endpoint_auth_method, 'none', 'a public client: no secret to keep');
        assert.equal(registered.client_secret, undefined);
        assert.deepEqual(registered.redirect_uris, client.registration.dynamic.redirect_uris);
        assert.deepEqual(registered.grant_types, AUTHORIZATION_CODE_AND_REFRESH);
        return registered.client_id as string;
      }

      /** The person opens the authorization URL, sees the consent page, and approves. */
      async function consent(url: URL): Promise<{ page: string; approved: Outcome }> {
        const page = await alice.visit(url.pathname + url.search);
        assert.equal(page.response.status, 200, 'the consent page');
        assert.match(page.html, /action="\/oauth\/authorize"/);
        return { page: page.html, approved: await alice.submit(page.html, '/oauth/authorize', { decision: 'approve' }) };
      }

      /**
       * The whole connection as the client makes it: registration, authorization code with PKCE and
       * `resource`, the person's consent, the code exchange, one refresh. Returns the tokens.
       */
      async function connect(client: McpClient) {
        const clientId = await clientIdOf(client);
        const app: App = await discover(server, clientId, { redirectUri: client.redirectUri });
        const signed = client.privateKeyJwt ? oauth.PrivateKeyJwt({ key: chatgptKey.privateKey, kid: chatgptKey.kid }) : oauth.None();
        const headers = client.origin ? { origin: client.origin } : undefined;

        const verifier = oauth.generateRandomCodeVerifier();
        const state = oauth.generateRandomState();
        const url = new URL(app.as.authorization_endpoint!);
        url.search = new URLSearchParams({
          response_type: 'code',
          client_id: clientId,
          redirect_uri: client.redirectUri,
          state,
          code_challenge: await oauth.calculatePKCECodeChallenge(verifier),
          code_challenge_method: 'S256',
          scope: client.scope,
          resource: MCP_URL,
          ...client.authorizationParams,
        }).toString();
        const { page, approved } = await consent(url);
        assert.match(page, /No administrator has checked this application/);
        assert.match(page, new RegExp(`on <strong class="resource">${MCP_NAME.replace(/[()]/g, '\\$&')}</strong>`));
        assert.match(page, /Read your notes/);
        assert.match(page, /Add notes/);
        for (const said of client.consent) assert.match(page, said);
        for (const unsaid of client.consentNot ?? []) assert.doesNotMatch(page, unsaid);

        // The browser is sent to the client's redirect URL: the code is in its Location.
        assert.equal(approved.response.status, 302);
        const location = approved.response.headers.get('location')!;
        assert.ok(location.startsWith(`${client.redirectUri}?`), `sent to ${location}`);
        const callback = oauth.validateAuthResponse(app.as, app.client, new URL(location), state);
        assert.equal(callback.get('iss'), server.url);

        const exchange = (auth: oauth.ClientAuth) =>
          oauth.authorizationCodeGrantRequest(app.as, app.client, auth, callback, client.redirectUri, verifier, {
            ...insecure,
            additionalParameters: { resource: MCP_URL },
            headers,
          });
        if (client.privateKeyJwt) {
          // Its document made it confidential: without its assertion it is refused, and the code is left as it was.
          const refused = await tokenResult(await exchange(oauth.None()));
          assert.deepEqual([refused.status, refused.body.error], [401, 'invalid_client']);
        }
        const response = await exchange(signed);
        if (client.origin) assert.equal(response.headers.get('access-control-allow-origin'), '*');
        const tokens = await oauth.processAuthorizationCodeResponse(app.as, app.client, response);
        assert.deepEqual(tokens.scope?.split(' ').sort(), client.scope.split(' ').sort());
        assert.ok(tokens.refresh_token, 'a refresh token, to stay connected');

        // The MCP server asks Gatehouse: a live token, for it, of this client, with these scopes.
        const described = await introspect(tokens.access_token);
        assert.equal(described.active, true);
        assert.equal(described.aud, mcp.uri);
        assert.equal(described.client_id, clientId);
        assert.equal(described.username, 'alice');
        // …and Gatehouse's own API refuses it: it is not for it.
        assert.equal((await profile(server, tokens.access_token)).status, 401);

        const refresh = (auth: oauth.ClientAuth, refreshToken: string) =>
          oauth.refreshTokenGrantRequest(app.as, app.client, auth, refreshToken, {
            ...insecure,
            ...(client.resourceOnRefresh ? { additionalParameters: { resource: MCP_URL } } : {}),
            headers,
          });
        if (client.privateKeyJwt) {
          const refused = await tokenResult(await refresh(oauth.None(), tokens.refresh_token));
          assert.deepEqual([refused.status, refused.body.error], [401, 'invalid_client']);
        }
        const refreshed = await oauth.processRefreshTokenResponse(app.as, app.client, await refresh(signed, tokens.refresh_token));
        assert.notEqual(refreshed.refresh_token, tokens.refresh_token, 'the refresh token rotates');
        const described2 = await introspect(refreshed.access_token);
        assert.equal(described2.active, true);
        assert.equal(described2.aud, mcp.uri, 'still for the MCP server, whether or not the refresh named it');
        assert.deepEqual(String(described2.scope).split(' ').sort(), client.scope.split(' ').sort());
        return { clientId, tokens, refreshed };
      }

      for (const client of CLIENTS) {
        test(client.name, async () => {
          await connect(client);
        });
      }

      test("an application's own scheme: only for a public client, and the answer always in its query (no popup message, no posted form)", async () => {
        const cursor = 'cursor://anysphere.cursor-mcp/oauth/callback';
        const registered = (await (await register({ client_name: 'Scheme test', redirect_uris: [cursor], token_endpoint_auth_method: 'none' })).json()) as {
          client_id: string;
        };
        for (const mode of ['web_message', 'form_post']) {
          const url = new URL('/oauth/authorize', server.url);
          url.search = new URLSearchParams({
            client_id: registered.client_id,
            redirect_uri: cursor,
            response_type: 'code',
            response_mode: mode,
            code_challenge: 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM',
            code_challenge_method: 'S256',
          }).toString();
          const page = await alice.visit(url.pathname + url.search);
          assert.equal(page.response.status, 400, mode);
          assert.equal(page.redirect, null, `${mode}: an error page, nothing sent to the app`);
          assert.match(page.html, /need an https or loopback redirect URL/);
        }
        // An administrator's confidential client may not register one: its code would go to whichever application claims the scheme.
        await assert.rejects(server.createClient({ name: 'Confidential app', confidential: true, redirectUris: [cursor] }), /private-use scheme/);
      });

      test('MCP Inspector: its browser preflights and the metadata with MCP-Protocol-Version are allowed (CORS)', async () => {
        const origin = 'http://localhost:6274';
        const preflight = (path: string, headers: string) =>
          fetch(new URL(path, server.url), {
            method: 'OPTIONS',
            headers: {
              origin,
              'access-control-request-method': path === '/.well-known/oauth-authorization-server' ? 'GET' : 'POST',
              'access-control-request-headers': headers,
            },
          });
        for (const [path, headers] of [
          ['/api/token', 'mcp-protocol-version, content-type'],
          ['/oauth/register', 'mcp-protocol-version, content-type'],
          ['/.well-known/oauth-authorization-server', 'mcp-protocol-version'],
        ] as const) {
          const response = await preflight(path, headers);
          assert.ok(response.status === 204 || response.status === 200, `${path}: ${response.status}`);
          assert.equal(response.headers.get('access-control-allow-origin'), '*', path);
          const allowed = (response.headers.get('access-control-allow-headers') ?? '').toLowerCase().split(/,\s*/);
          for (const header of headers.split(', ')) assert.ok(allowed.includes(header), `${path} allows ${header} (${allowed.join(', ')})`);
        }
        // The metadata itself, asked as the SDK asks (its protocol version in a header), from the page.
        const metadata = await fetch(new URL('/.well-known/oauth-authorization-server', server.url), {
          headers: { origin, 'mcp-protocol-version': '2025-11-25' },
        });
        assert.equal(metadata.status, 200);
        assert.equal(metadata.headers.get('access-control-allow-origin'), '*');
        const document = (await metadata.json()) as Record<string, unknown>;
        assert.equal(document.registration_endpoint, `${server.url}/oauth/register`);
        assert.equal(document.client_id_metadata_document_supported, true);
      });

      test('step-up by scope union: consent asks about the new scope and shows the old one apart; the token carries both', async () => {
        // The Python SDK after a 403 insufficient_scope asks for what it had plus what the
        // challenge names (SEP-2350); so do Claude and the TypeScript SDK.
        const response = await register({
          redirect_uris: ['http://localhost:3000/callback'],
          client_name: 'Stepping-up MCP Client',
          grant_types: AUTHORIZATION_CODE_AND_REFRESH,
          response_types: ['code'],
          application_type: 'native',
        });
        const { client_id: clientId } = (await response.json()) as { client_id: string };
        const app = await discover(server, clientId, { redirectUri: 'http://localhost:3000/callback' });
        const authorize = async (scope: string) => {
          const verifier = oauth.generateRandomCodeVerifier();
          const state = oauth.generateRandomState();
          const url = new URL(app.as.authorization_endpoint!);
          url.search = new URLSearchParams({
            response_type: 'code',
            client_id: clientId,
            redirect_uri: app.redirectUri,
            state,
            code_challenge: await oauth.calculatePKCECodeChallenge(verifier),
            code_challenge_method: 'S256',
            scope,
            resource: MCP_URL,
          }).toString();
          const { page, approved } = await consent(url);
          const callback = oauth.validateAuthResponse(app.as, app.client, approved.redirect!, state);
          const tokens = await oauth.processAuthorizationCodeResponse(
            app.as,
            app.client,
            await oauth.authorizationCodeGrantRequest(app.as, app.client, app.auth, callback, app.redirectUri, verifier, {
              ...insecure,
              additionalParameters: { resource: MCP_URL },
            }),
          );
          return { page, tokens };
        };

        const first = await authorize('notes:read');
        assert.deepEqual(listedScopes(first.page, 'new-scopes'), ['notes:read']);
        assert.doesNotMatch(first.page, /id="approved-before"/, 'nothing was approved before');

        const stepped = await authorize('notes:read notes:write');
        assert.deepEqual(listedScopes(stepped.page, 'new-scopes'), ['notes:write'], 'only what is new is asked about');
        assert.deepEqual(listedScopes(stepped.page, 'approved-before'), ['notes:read'], 'what was approved is shown apart');
        assert.match(stepped.page, /You allowed this before; it keeps it/);
        assert.equal(stepped.tokens.scope, 'notes:read notes:write');
        const described = await introspect(stepped.tokens.access_token);
        assert.equal(described.aud, mcp.uri);
        assert.deepEqual(String(described.scope).split(' ').sort(), ['notes:read', 'notes:write']);
      });

      test("TypeScript SDK: its simpleOAuthClient example's client_secret_post registration is refused, naming the field", async () => {
        // examples/oauth/simpleOAuthClient.ts (SDK 1.32 and main) registers for client_secret_post;
        // Gatehouse registers public clients only (SPEC §4.8): the example works once that line
        // says none (or is left out), which docs/mcp.md tells.
        const response = await register({
          client_name: 'Simple OAuth MCP Client',
          redirect_uris: ['http://localhost:8090/callback'],
          grant_types: AUTHORIZATION_CODE_AND_REFRESH,
          response_types: ['code'],
          application_type: 'native',
          token_endpoint_auth_method: 'client_secret_post',
          scope: NOTES,
        });
        assert.equal(response.status, 400);
        const body = (await response.json()) as { error: string; error_description: string };
        assert.equal(body.error, 'invalid_client_metadata');
        assert.match(body.error_description, /token_endpoint_auth_method/);
      });

      // Shapes today's clients send that Gatehouse once refused (found writing these tests).
      test("VS Code: its dynamic registration fallback (grant_types from Gatehouse's grant_types_supported, the device grant among them) registers the grants a registered client may use", async () => {
        // microsoft/vscode src/vs/base/common/oauth.ts fetchDynamicRegistration: grant_types is the
        // server's grant_types_supported filtered to the three VS Code supports.
        const metadata = (await (await fetch(new URL('/.well-known/oauth-authorization-server', server.url))).json()) as { grant_types_supported: string[] };
        const response = await register({
          client_name: 'Visual Studio Code',
          client_uri: 'https://code.visualstudio.com',
          grant_types: metadata.grant_types_supported.filter((grant) => [...AUTHORIZATION_CODE_AND_REFRESH, DEVICE_CODE].includes(grant)),
          response_types: ['code'],
          redirect_uris: ['https://insiders.vscode.dev/redirect', 'https://vscode.dev/redirect', 'http://127.0.0.1/', 'http://127.0.0.1:33418/'],
          scope: NOTES,
          token_endpoint_auth_method: 'none',
          application_type: 'native',
        });
        const body = (await response.json()) as { grant_types: string[] };
        assert.equal(response.status, 201, JSON.stringify(body));
        assert.deepEqual(body.grant_types, AUTHORIZATION_CODE_AND_REFRESH, 'the device grant is left out, as RFC 7591 §3.2.1 allows');
      });

      test('MCP Inspector: its registration when the MCP server names no scopes (scope "") registers no scope restriction', async () => {
        // core/auth/providers.ts: scope: this.scope ?? "" — sent as is when neither the 401 nor the
        // protected resource metadata names scopes (scopes_supported is optional in RFC 9728).
        const response = await register({
          redirect_uris: ['http://localhost:6274/oauth/callback'],
          token_endpoint_auth_method: 'none',
          grant_types: AUTHORIZATION_CODE_AND_REFRESH,
          response_types: ['code'],
          client_name: 'MCP Inspector',
          client_uri: 'https://github.com/modelcontextprotocol/inspector',
          scope: '',
          application_type: 'native',
        });
        const body = (await response.json()) as { scope?: string };
        assert.equal(response.status, 201, JSON.stringify(body));
        assert.equal(body.scope, undefined);
      });
    });
  }
});
