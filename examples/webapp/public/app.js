// The example application's OAuth client, in the browser: a public client (no secret),
// authorization code grant with PKCE (S256), by redirect or in a popup, then refresh,
// revocation, the profile API and the real-time API. oauth4webapi does the protocol.
import * as oauth from '/oauth4webapi.js';

const config = await (await fetch('/config.json')).json();
const issuer = new URL(config.gatehouse);
const client = { client_id: config.client_id };
const clientAuth = oauth.None(); // a public client: it proves itself with PKCE instead
// oauth4webapi refuses plain http unless told: allow it only for a Gatehouse on http (local development).
const http = issuer.protocol === 'http:' ? { [oauth.allowInsecureRequests]: true } : {};
// The server's metadata (RFC 8414) names its endpoints; the library checks its issuer.
const as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...http }));

// ---- what the page shows ------------------------------------------------------------

const $ = (id) => document.getElementById(id);

function log(message) {
  const item = document.createElement('li');
  item.textContent = `${new Date().toLocaleTimeString()} ${message}`;
  $('log').append(item);
}

function say(message, { error = false } = {}) {
  $('status').textContent = message;
  $('status').className = error ? 'error' : '';
  if (error) log(message);
}

function show(signedIn) {
  $('signed-in').hidden = !signedIn;
  $('signed-out').hidden = signedIn;
}

// ---- tokens -------------------------------------------------------------------------
// Kept in sessionStorage so that the page survives the redirect flow and reloads; it is
// readable by any script on this origin, hence the strict Content-Security-Policy.

let tokens = JSON.parse(sessionStorage.getItem('tokens') ?? 'null');
let refreshes = 0;

function keep(response) {
  tokens = { access_token: response.access_token, refresh_token: response.refresh_token, expires_at: Date.now() + response.expires_in * 1000 };
  sessionStorage.setItem('tokens', JSON.stringify(tokens));
}

function forget() {
  tokens = null;
  sessionStorage.removeItem('tokens');
  closeSocket();
  show(false);
}

/** The grant is gone (the user removed access, or Gatehouse saw a refresh token used twice). */
class AccessRevoked extends Error {}

let refreshing = null;

/**
 * Trades the refresh token for a new pair (the old refresh token is then spent). One
 * refresh at a time: the socket closing and an API call may both ask at once.
 */
function refresh() {
  refreshing ??= (async () => {
    try {
      const response = await oauth.refreshTokenGrantRequest(as, client, clientAuth, tokens.refresh_token, http);
      keep(await oauth.processRefreshTokenResponse(as, client, response));
      $('refreshes').textContent = String(++refreshes);
      log('Refreshed the tokens.');
    } catch (error) {
      // Only a new sign-in helps: forget the dead tokens.
      if (error instanceof oauth.ResponseBodyError && error.error === 'invalid_grant') {
        forget();
        throw new AccessRevoked('Your access was revoked: sign in again.');
      }
      throw error;
    } finally {
      refreshing = null;
    }
  })();
  return refreshing;
}

/** An access token that has not expired yet, refreshing first when it has. */
async function accessToken() {
  if (Date.now() >= tokens.expires_at) await refresh();
  return tokens.access_token;
}

// ---- signing in ---------------------------------------------------------------------

/** A new authorization request, with its state and PKCE verifier. */
async function authorization(responseMode) {
  const state = oauth.generateRandomState();
  const verifier = oauth.generateRandomCodeVerifier();
  const url = new URL(as.authorization_endpoint);
  url.search = new URLSearchParams({
    client_id: client.client_id,
    redirect_uri: config.redirect_uri,
    response_type: 'code',
    scope: config.scope,
    state,
    code_challenge: await oauth.calculatePKCECodeChallenge(verifier),
    code_challenge_method: 'S256',
    response_mode: responseMode,
  });
  return { url, state, verifier };
}

/** Checks the authorization response (state, iss, error) and exchanges its code for tokens. */
async function finishSignIn(params, state, verifier) {
  let callback;
  try {
    callback = oauth.validateAuthResponse(as, client, params, state);
  } catch (error) {
    if (error instanceof oauth.AuthorizationResponseError && error.error === 'access_denied') return say('Sign-in canceled.');
    throw error;
  }
  const response = await oauth.authorizationCodeGrantRequest(as, client, clientAuth, callback, config.redirect_uri, verifier, http);
  keep(await oauth.processAuthorizationCodeResponse(as, client, response));
  log('Exchanged the authorization code for tokens.');
  await signedIn();
}

/** Redirect flow: off to Gatehouse; it sends the browser back to /callback. */
async function signInWithRedirect() {
  const { url, state, verifier } = await authorization('query');
  // The page is left: keep what the callback needs to check and finish the request.
  sessionStorage.setItem('pending', JSON.stringify({ state, verifier }));
  location.assign(url);
}

/** Back at /callback from the redirect flow. */
async function finishRedirect() {
  const params = new URL(location.href);
  history.replaceState(null, '', '/'); // the code leaves the address bar and the history
  const pending = JSON.parse(sessionStorage.getItem('pending') ?? 'null');
  sessionStorage.removeItem('pending');
  if (!pending) return say('This sign-in was not started here: try again.', { error: true });
  await finishSignIn(params, pending.state, pending.verifier);
}

/**
 * Popup flow (response_mode=web_message): Gatehouse's page in the popup posts the answer to
 * this window. Only a message from Gatehouse's origin carrying this request's state counts.
 */
async function signInWithPopup() {
  const { url, state, verifier } = await authorization('web_message');
  const popup = window.open(url, 'gatehouse', 'popup,width=480,height=640');
  if (!popup) return say('The browser blocked the popup: allow popups for this site, or sign in without one.', { error: true });
  const answer = await new Promise((resolve) => {
    const listener = (event) => {
      if (event.origin !== issuer.origin || event.data?.state !== state) return;
      stop();
      resolve(event.data);
    };
    const stop = () => {
      clearInterval(watch);
      removeEventListener('message', listener);
    };
    // Closed without answering (say, on an error page)? A message may still be on its way: wait a moment.
    const watch = setInterval(() => {
      if (!popup.closed) return;
      clearInterval(watch);
      setTimeout(() => (stop(), resolve({ type: 'authorization_canceled' })), 500);
    }, 500);
    addEventListener('message', listener);
  });
  if (answer.type === 'authorization_canceled') return say('Sign-in canceled.');
  // The message has no `iss`: the origin check above is what ties it to this issuer
  // (RFC 9207's purpose), so vouch for it before the library checks the rest.
  const params = new URLSearchParams({ iss: as.issuer, state: answer.state });
  for (const name of ['code', 'error', 'error_description']) if (answer[name] !== undefined) params.set(name, answer[name]);
  await finishSignIn(params, state, verifier);
}

/** Signing out revokes the grant: the refresh token, and with it every token issued from it. */
async function signOut() {
  const refreshToken = tokens.refresh_token;
  forget();
  try {
    await oauth.processRevocationResponse(await oauth.revocationRequest(as, client, clientAuth, refreshToken, http));
    log('Revoked the tokens.');
    say('Signed out.');
  } catch (error) {
    say(`Signed out here, but Gatehouse could not be told: ${error.message}`, { error: true });
  }
}

// ---- the API ------------------------------------------------------------------------

/** GET /api/profile; on 401 (the token expired early or was revoked) refresh once and retry. */
async function profile() {
  const url = new URL('/api/profile', issuer);
  const get = async () => fetch(url, { headers: { Authorization: `Bearer ${await accessToken()}` } });
  let response = await get();
  if (response.status === 401) {
    await refresh();
    response = await get();
  }
  if (!response.ok) throw new Error(`GET /api/profile answered ${response.status}`);
  return response.json();
}

async function signedIn() {
  const me = await profile();
  $('profile').textContent = JSON.stringify(me, null, 2);
  show(true);
  say(`Signed in as ${me.username}.`);
  await openSocket();
}

// ---- the real-time API --------------------------------------------------------------

let socket = null;

/**
 * Opens /ws with the access token. Gatehouse closes the socket with 4001 when that token
 * expires or is revoked: then refresh (unless that already happened) and reconnect.
 */
async function openSocket() {
  const token = await accessToken();
  const url = new URL('/ws', issuer);
  url.protocol = issuer.protocol === 'https:' ? 'wss:' : 'ws:';
  // Browsers cannot set headers on a WebSocket, hence the query parameter.
  url.searchParams.set('access_token', token);
  const ws = new WebSocket(url);
  socket = ws;
  ws.onopen = () => {
    $('socket').textContent = 'connected';
    log('Connected to the real-time API.');
    ws.send(JSON.stringify({ type: 'whoami', id: 1 }));
  };
  ws.onmessage = (event) => {
    const message = JSON.parse(event.data);
    if (message.type === 'whoyouare') $('whoami').textContent = message.userid;
  };
  ws.onclose = async (event) => {
    if (socket !== ws) return; // closed on purpose
    socket = null;
    $('socket').textContent = `closed (${event.code})`;
    log(`The real-time connection closed with code ${event.code}.`);
    if (event.code !== 4001 || !tokens) return;
    try {
      if (tokens.access_token === token) await refresh();
      await openSocket();
    } catch (error) {
      failed(error);
    }
  };
}

function closeSocket() {
  const ws = socket;
  socket = null;
  ws?.close(1000);
  $('socket').textContent = 'not connected';
  $('whoami').textContent = '–';
}

// ---- start --------------------------------------------------------------------------

function failed(error) {
  say(error instanceof AccessRevoked ? error.message : `Something went wrong: ${error.message}`, { error: true });
}

$('sign-in').onclick = () => signInWithRedirect().catch(failed);
$('sign-in-popup').onclick = () => signInWithPopup().catch(failed);
$('sign-out').onclick = () => signOut().catch(failed);
$('call-profile').onclick = () =>
  profile()
    .then((me) => {
      $('profile').textContent = JSON.stringify(me, null, 2);
      log('Called /api/profile.');
    })
    .catch(failed);

show(false);
say('Not signed in.');
if (location.pathname === '/callback') await finishRedirect().catch(failed);
else if (tokens) await signedIn().catch(failed);
