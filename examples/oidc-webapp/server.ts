/**
 * An example web application that uses Gatehouse as its login, with OpenID Connect: an
 * Express app and openid-client, the way most server-side Node apps do it. It is a
 * confidential client (the secret stays on the server): it signs people in with the
 * authorization code flow (PKCE, state and nonce, every check openid-client makes on the ID
 * token), shows the ID token's claims and what userinfo says, signs out through Gatehouse's
 * end-session endpoint, and ends its own sessions when Gatehouse sends a back-channel logout.
 *
 *   npm run example:oidc       (Gatehouse running at GATEHOUSE_URL, default http://localhost:5000)
 *
 * Settings: GATEHOUSE_URL; EXAMPLE_PORT (default 3001); EXAMPLE_CLIENT_ID and
 * EXAMPLE_CLIENT_SECRET to use a client registered elsewhere instead; EXAMPLE_DATA_DIR
 * (default examples/oidc-webapp/.data). On first start it registers itself through
 * Gatehouse's command line (examples/register.ts).
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import express, { type Request, type Response } from 'express';
import { createRemoteJWKSet, jwtVerify } from 'jose';
import * as oidc from 'openid-client';
import { requireGatehouse } from '../gatehouse-answers.ts';
import { registration, registrationFailed } from '../register.ts';

const HERE = fileURLToPath(new URL('.', import.meta.url));

const gatehouseUrl = new URL(process.env.GATEHOUSE_URL || 'http://localhost:5000');
const port = Number(process.env.EXAMPLE_PORT || 3001);
const dataDir = process.env.EXAMPLE_DATA_DIR || join(HERE, '.data');
const origin = `http://localhost:${port}`;
const redirectUri = `${origin}/callback`;
/** Where Gatehouse sends people back after logging out: exactly as registered. */
const postLogoutRedirectUri = `${origin}/`;
/** Gatehouse's server calls this, not a browser: no cookie is involved, so the address it reaches needs no canonical origin. */
const backchannelLogoutUri = `http://127.0.0.1:${port}/backchannel-logout`;
/** Who the person is (`openid`), their name, e-mail address and groups. */
const scope = 'openid profile email groups';

async function credentials(): Promise<{ client_id: string; client_secret?: string }> {
  if (process.env.EXAMPLE_CLIENT_ID) return { client_id: process.env.EXAMPLE_CLIENT_ID, client_secret: process.env.EXAMPLE_CLIENT_SECRET };
  // What an operator would type: a confidential client allowed the identity scopes only, with
  // its post-logout page and back-channel logout URL.
  return registration(dataDir, redirectUri, [
    ...['--name', 'Example OIDC app', '--confidential', '--require-pkce', '--scope', scope],
    ...['--redirect-uri', redirectUri, '--post-logout-redirect-uri', postLogoutRedirectUri, '--backchannel-logout-uri', backchannelLogoutUri],
  ]);
}

await requireGatehouse(gatehouseUrl);
let config: oidc.Configuration;
try {
  const { client_id, client_secret } = await credentials();
  // Discovery: /.well-known/openid-configuration. Plain http only for a Gatehouse on this machine.
  const local = gatehouseUrl.protocol === 'http:';
  config = await oidc.discovery(gatehouseUrl, client_id, client_secret, undefined, local ? { execute: [oidc.allowInsecureRequests] } : {});
} catch (error) {
  registrationFailed(error, redirectUri);
}
const issuer = config.serverMetadata();
const jwks = createRemoteJWKSet(new URL(issuer.jwks_uri!));

/** One person's visit, kept in memory under a random cookie. */
interface Session {
  /** Between /login and /callback: what the answer must match. */
  pending?: { verifier: string; state: string; nonce: string };
  signedIn?: { claims: oidc.IDToken; userinfo: oidc.UserInfoResponse; idToken: string };
}
const sessions = new Map<string, Session>();
const COOKIE = 'example_session';

function sessionOf(request: Request): { id: string; session: Session } | null {
  const id = /(?:^|;\s*)example_session=([\w-]{43})(?:;|$)/.exec(request.headers.cookie ?? '')?.[1];
  const session = id === undefined ? undefined : sessions.get(id);
  return session ? { id: id!, session } : null;
}

function startSession(response: Response, session: Session): void {
  const id = randomBytes(32).toString('base64url');
  sessions.set(id, session);
  // Lax: sent on the top-level redirect back from Gatehouse, never on cross-site subrequests.
  response.cookie(COOKIE, id, { httpOnly: true, sameSite: 'lax', secure: origin.startsWith('https:'), path: '/' });
}

const escapeHtml = (text: string) => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function page(response: Response, body: string, status = 200): void {
  response.status(status).type('html').send(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width"><title>Example OIDC app</title></head>
<body><h1>Example OIDC app</h1>${body}</body></html>`);
}

const app = express();
app.disable('x-powered-by');
app.use((request, response, next) => {
  response.set({
    // No script at all; forms post here, and the sign-out form's redirect goes on to Gatehouse.
    'Content-Security-Policy': `default-src 'none'; form-action 'self' ${gatehouseUrl.origin}; base-uri 'none'; frame-ancestors 'none'`,
    'Referrer-Policy': 'no-referrer', // /callback carries the code in its URL
    'Cache-Control': 'no-store',
  });
  // The session cookie belongs to one origin: send people there (Gatehouse's own calls aside).
  if (request.headers.host !== `localhost:${port}` && request.path !== '/backchannel-logout') return response.redirect(`${origin}${request.originalUrl}`);
  next();
});

app.get('/', (request, response) => {
  const signedIn = sessionOf(request)?.session.signedIn;
  if (!signedIn) return page(response, '<p role="status">Not signed in.</p><p><a href="/login">Sign in with Gatehouse</a></p>');
  const { claims, userinfo } = signedIn;
  page(
    response,
    `<p role="status">Signed in as ${escapeHtml(String(claims.preferred_username ?? claims.sub))}.</p>
<form method="post" action="/logout"><button>Sign out</button></form>
<h2>The ID token's claims</h2><pre id="claims">${escapeHtml(JSON.stringify(claims, null, 2))}</pre>
<h2>Userinfo</h2><pre id="userinfo">${escapeHtml(JSON.stringify(userinfo, null, 2))}</pre>`,
  );
});

app.get('/login', async (_request, response) => {
  const pending = { verifier: oidc.randomPKCECodeVerifier(), state: oidc.randomState(), nonce: oidc.randomNonce() };
  startSession(response, { pending });
  const url = oidc.buildAuthorizationUrl(config, {
    redirect_uri: redirectUri,
    scope,
    code_challenge: await oidc.calculatePKCECodeChallenge(pending.verifier),
    code_challenge_method: 'S256',
    state: pending.state,
    nonce: pending.nonce,
  });
  response.redirect(url.href);
});

app.get('/callback', async (request, response) => {
  const current = sessionOf(request);
  const pending = current?.session.pending;
  if (!current || !pending) return page(response, '<p role="alert">This sign-in was not started here, or has finished already.</p>', 400);
  delete current.session.pending; // one answer per request
  try {
    // Checks state, iss, the code exchange with PKCE, and the ID token: signature (from the
    // JWKS), iss, aud, exp, nonce and at_hash.
    const tokens = await oidc.authorizationCodeGrant(config, new URL(request.originalUrl, origin), {
      pkceCodeVerifier: pending.verifier,
      expectedState: pending.state,
      expectedNonce: pending.nonce,
      idTokenExpected: true,
    });
    const claims = tokens.claims()!;
    const userinfo = await oidc.fetchUserInfo(config, tokens.access_token, claims.sub);
    sessions.delete(current.id);
    startSession(response, { signedIn: { claims, userinfo, idToken: tokens.id_token! } }); // a new session id at login
    response.redirect('/');
  } catch (error) {
    const { error: code, error_description } = error as { error?: string; error_description?: string };
    page(
      response,
      `<p role="alert">Sign-in failed: ${escapeHtml(code ? `${code}: ${error_description ?? ''}` : (error as Error).message)}</p><p><a href="/">Back</a></p>`,
      400,
    );
  }
});

app.post('/logout', (request, response) => {
  const current = sessionOf(request);
  if (current) sessions.delete(current.id);
  response.clearCookie(COOKIE, { path: '/' });
  const idToken = current?.session.signedIn?.idToken;
  if (!idToken) return response.redirect(303, '/');
  // RP-initiated logout: the ID token says who and which client; Gatehouse comes back to the
  // registered post-logout URL.
  response.redirect(303, oidc.buildEndSessionUrl(config, { id_token_hint: idToken, post_logout_redirect_uri: postLogoutRedirectUri }).href);
});

// Back-channel logout (OpenID Connect Back-Channel Logout 1.0): Gatehouse posts a signed
// logout token when a login session ends there; every session of ours opened from it ends.
app.post('/backchannel-logout', express.urlencoded({ extended: false, limit: '16kb' }), async (request, response) => {
  try {
    const { payload } = await jwtVerify(String(request.body?.logout_token), jwks, {
      issuer: issuer.issuer,
      audience: config.clientMetadata().client_id,
      typ: 'logout+jwt',
      algorithms: ['RS256'], // the client's id_token_signed_response_alg, Gatehouse's default
      maxTokenAge: '2 minutes',
      requiredClaims: ['iat', 'jti', 'events'],
    });
    const events = payload.events as Record<string, unknown> | undefined;
    if (typeof events?.['http://schemas.openid.net/event/backchannel-logout'] !== 'object' || 'nonce' in payload) throw new Error('not a logout token');
    if (typeof payload.sid !== 'string' && typeof payload.sub !== 'string') throw new Error('names no session and no user');
    let ended = 0;
    for (const [id, { signedIn }] of sessions) {
      if (!signedIn) continue;
      if (payload.sid === undefined ? signedIn.claims.sub === payload.sub : signedIn.claims.sid === payload.sid) {
        sessions.delete(id);
        ended++;
      }
    }
    console.log(`Back-channel logout: ended ${ended} session(s).`);
    response.status(200).end();
  } catch (error) {
    console.log(`Refused a back-channel logout: ${(error as Error).message}`);
    response.status(400).json({ error: 'invalid_request', error_description: 'the logout token is not valid' });
  }
});

const server = app.listen(port, '127.0.0.1', () => {
  console.log(`Example OIDC app: ${origin} (signing in with Gatehouse at ${gatehouseUrl.origin})`);
});

for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => server.close(() => process.exit(0)).closeAllConnections());
