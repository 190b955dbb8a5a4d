/**
 * For the logout suites (SPEC §4.10): a back-channel logout receiver — a relying party's
 * endpoint on a loopback port that records every logout token POSTed to it and answers as
 * told — and a login in which the application got an ID token, with that ID token.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import * as oauth from 'oauth4webapi';
import { obtainTokens, type App } from './oauth-client.ts';
import { serverCertificate } from './tls.ts';
import type { UserAgent } from './user-agent.ts';

export interface Receiver {
  /** The back-channel logout URL. */
  url: string;
  /** The logout tokens received, in order of arrival (answered or not). */
  tokens: string[];
  /** The content type of each request. */
  contentTypes: string[];
  /** Requests held without an answer (`'hang'`), still open. */
  held: ServerResponse[];
  close(): void;
}

/**
 * Starts a receiver that answers the n-th request (from 1) with `answer(n)`: a status, or
 * `'hang'` to never answer. Over https with a test CA certificate when `tls`.
 */
export async function startReceiver(answer: (n: number) => number | 'hang' = () => 200, options: { tls?: boolean } = {}): Promise<Receiver> {
  const tokens: string[] = [];
  const contentTypes: string[] = [];
  const held: ServerResponse[] = [];
  const handle = (request: IncomingMessage, response: ServerResponse) => {
    let body = '';
    request.on('data', (chunk) => (body += chunk));
    request.on('end', () => {
      tokens.push(new URLSearchParams(body).get('logout_token') ?? '');
      contentTypes.push(request.headers['content-type'] ?? '');
      const status = answer(tokens.length);
      if (status === 'hang') held.push(response);
      else response.writeHead(status, { 'cache-control': 'no-store' }).end();
    });
  };
  const server = options.tls ? createHttpsServer(serverCertificate(['127.0.0.1']), handle) : createServer(handle);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `${options.tls ? 'https' : 'http'}://127.0.0.1:${(server.address() as AddressInfo).port}/backchannel-logout`;
  return {
    url,
    tokens,
    contentTypes,
    held,
    close() {
      server.closeAllConnections();
      server.close();
    },
  };
}

export interface OpenIdLogin {
  /** The session's `sid`, as the ID token names it. */
  sid: string;
  /** The ID token of the token response, and its access token. */
  idToken: string;
  accessToken: string;
}

/**
 * Logs `username` in at the agent and authorizes the application with `scope=openid` in a
 * real code flow (oauth4webapi checks the ID token's claims); the token response's ID token
 * and the session it names.
 */
export async function openIdLogin(app: App, agent: UserAgent, username: string): Promise<OpenIdLogin> {
  const tokens = await obtainTokens(app, agent, username, { scope: 'openid' });
  const sid = oauth.getValidatedIdTokenClaims(tokens)?.sid;
  if (!tokens.id_token || typeof sid !== 'string') throw new Error('the token response has no ID token naming the session');
  return { sid, idToken: tokens.id_token, accessToken: tokens.access_token };
}
