/**
 * What the replay and race suites share: a server with one user and one application, and
 * checks of whether the tokens a client holds still work, asked the way the client would
 * find out (the profile for access tokens, the token endpoint for refresh tokens).
 */
import assert from 'node:assert/strict';
import type { ClientInput } from '../../src/clients/clients.ts';
import type { Backend } from './backends.ts';
import { discover, profile, refreshRequest, tokenResult, type App } from './oauth-client.ts';
import { startServer, type TestServer } from './server.ts';
import { UserAgent } from './user-agent.ts';

export interface Setup {
  server: TestServer;
  app: App;
  /** The application's client secret, when it is confidential. */
  secret: string | null;
  /** alice's browser; logged in after the first authorization, so later ones are quick. */
  agent: UserAgent;
}

export async function startWithApp(backend: Backend, env: Record<string, string> = {}, client: Partial<ClientInput> = {}): Promise<Setup> {
  const server = await startServer(backend, env);
  await server.createUser('alice');
  const registered = await server.createClient(client);
  const app = await discover(server, registered.client.id, { secret: registered.secret });
  return { server, app, secret: registered.secret, agent: new UserAgent(server.url) };
}

export interface HeldTokens {
  access_token?: string;
  refresh_token?: string;
}

/**
 * Every access token gets 401 at the profile and every refresh token `refusal` — normally
 * `invalid_grant`; `invalid_client` once the client itself is gone.
 */
export async function assertDead(
  { server, app }: Pick<Setup, 'server' | 'app'>,
  held: readonly HeldTokens[],
  refusal: readonly [number, string] = [400, 'invalid_grant'],
): Promise<void> {
  const access = new Set(held.flatMap((t) => t.access_token ?? []));
  const refresh = new Set(held.flatMap((t) => t.refresh_token ?? []));
  await Promise.all([
    ...[...access].map(async (token) => assert.equal((await profile(server, token)).status, 401, 'an access token is still accepted')),
    ...[...refresh].map(async (token) => {
      const result = await tokenResult(await refreshRequest(app, token));
      assert.deepEqual([result.status, result.body.error], refusal, 'a refresh token is still accepted');
    }),
  ]);
}

/** The pair works: the access token opens the profile, and the refresh token refreshes (which rotates it). */
export async function assertWorks({ server, app }: Pick<Setup, 'server' | 'app'>, pair: HeldTokens): Promise<void> {
  assert.equal((await profile(server, pair.access_token!)).status, 200);
  assert.equal((await tokenResult(await refreshRequest(app, pair.refresh_token!))).status, 200);
}
