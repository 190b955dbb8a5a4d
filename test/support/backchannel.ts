/**
 * For the logout suites (SPEC §4.10): a back-channel logout receiver — a relying party's
 * endpoint on a loopback port that records every logout token POSTed to it and answers as
 * told — and a login whose grant got an ID token, with that ID token.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { sql, type Kysely } from 'kysely';
import { accountUri } from '../../src/config.ts';
import type { Database } from '../../src/store/schema.ts';
import { hashIfWellFormed } from '../../src/tokens.ts';
import { obtainTokens, type App } from './oauth-client.ts';
import type { TestServer } from './server.ts';
import { serverCertificate } from './tls.ts';
import type { UserAgent } from './user-agent.ts';

/** Waits until `condition` holds (checked every 50 ms, for at most `seconds`); throws naming `what` if it never does. */
export async function until(what: string, condition: () => boolean | Promise<boolean>, seconds = 30): Promise<void> {
  for (const deadline = Date.now() + seconds * 1000; !(await condition()); await sleep(50)) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
  }
}

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

/** Adds `openid` to the newest grant of the client in that session. */
export async function grantOpenId(db: Kysely<Database>, clientId: string, sid: string): Promise<void> {
  const grant = await db.selectFrom('grants').select(['id', 'scopes']).where('client_id', '=', clientId).where('sid', '=', sid).executeTakeFirstOrThrow();
  await sql`update grants set scopes = ${[...grant.scopes.split(' '), 'openid'].sort().join(' ')} where id = ${grant.id}`.execute(db);
}

/** The `sid` of the session the agent is logged in with (over http: the cookie has no `__Host-` prefix). */
export async function sessionSid(db: Kysely<Database>, agent: UserAgent): Promise<string> {
  const hash = hashIfWellFormed('session', agent.cookies.get('gatehouse_session') ?? '');
  const session = await db
    .selectFrom('sessions')
    .select('sid')
    .where('id_hash', '=', hash ?? '')
    .executeTakeFirstOrThrow();
  return session.sid;
}

export interface OpenIdLogin {
  /** The session's `sid`. */
  sid: string;
  /** An ID token issued to the client in that session. */
  idToken: string;
}

/**
 * Logs `username` in at the agent and authorizes the application in a real code flow; the
 * grant then holds `openid`, and an ID token for it is signed with the server's own keys.
 *
 * Stand-in, until the server mints ID tokens itself (SPEC §4.10, built separately): the flow
 * will then ask for `scope=openid` and take the `id_token` of the token response; what the
 * logout code reads — a grant holding `openid` approved in the session, and an ID token
 * signed by the server — is the same.
 */
export async function openIdLogin(server: TestServer, agent: UserAgent, app: App, username: string, alg: 'RS256' | 'ES256' = 'RS256'): Promise<OpenIdLogin> {
  await obtainTokens(app, agent, username);
  const clientId = app.client.client_id;
  const sid = await sessionSid(server.store.db, agent);
  await grantOpenId(server.store.db, clientId, sid);
  const iat = Math.floor(Date.now() / 1000);
  const claims = { iss: server.url, sub: accountUri(username, server.config), aud: clientId, azp: clientId, sid, iat, exp: iat + 300 };
  return { sid, idToken: await server.app.gatehouse.keys.signJwt(alg, { typ: 'JWT' }, claims) };
}
