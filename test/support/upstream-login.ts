/**
 * A person logging in at Gatehouse through an upstream provider, without a browser: the
 * Gatehouse side is a UserAgent (its cookies, its pages), the provider side a cookie jar of
 * its own, and redirects are followed between the two until the flow ends on a Gatehouse page
 * or leaves for somewhere else (an application's redirect URL).
 */
import type { Connection } from '../../src/store/schema.ts';
import type { UpstreamClient } from './upstream-providers.ts';
import type { Outcome, UserAgent } from './user-agent.ts';
import type { TestServer } from './server.ts';
import { createConnection, callbackUrl, slugOf, type ConnectionInput } from '../../src/accounts/connections/connections.ts';
import { COMMAND_LINE } from '../../src/audit.ts';

/** Follows `outcome`'s redirect through the provider at `providerOrigin` and back, as a browser would. */
export async function throughProvider(
  agent: UserAgent,
  outcome: Outcome,
  providerOrigin: string,
  providerCookies = new Map<string, string>(),
): Promise<Outcome> {
  const gatehouse = new URL(agent.base).origin;
  for (let hops = 0; outcome.redirect !== null; hops++) {
    if (hops > 20) throw new Error('redirect loop');
    const target = outcome.redirect;
    if (target.origin === gatehouse) {
      outcome = await agent.visit(target.pathname + target.search);
      continue;
    }
    if (target.origin !== providerOrigin) return outcome;
    const headers = new Headers();
    if (providerCookies.size > 0) headers.set('cookie', [...providerCookies].map(([k, v]) => `${k}=${v}`).join('; '));
    const response = await fetch(target, { headers, redirect: 'manual' });
    for (const cookie of response.headers.getSetCookie()) {
      const [pair] = cookie.split(';');
      const at = pair!.indexOf('=');
      providerCookies.set(pair!.slice(0, at), pair!.slice(at + 1));
    }
    const location = response.headers.get('location');
    if (location === null) return { response, redirect: null, html: await response.text() };
    await response.body?.cancel();
    outcome = { response, redirect: new URL(location, target), html: '' };
  }
  return outcome;
}

/** Starts a login through the connection from Gatehouse's login link, and follows it to its end. */
export async function logInThrough(agent: UserAgent, connectionId: string, providerOrigin: string, next = '/'): Promise<Outcome> {
  const start = await agent.visit(`/login/connections/${connectionId}?${new URLSearchParams({ next })}`);
  return throughProvider(agent, start, providerOrigin);
}

/** Registers a connection to `provider` on the server (private addresses allowed: the provider is on loopback) and its callback at the provider. */
export async function connect(server: TestServer, provider: UpstreamClient, input: ConnectionInput): Promise<Connection> {
  const ctx = server.app.gatehouse;
  const connection = await createConnection(
    ctx,
    { clientId: provider.clientId, clientSecret: provider.clientSecret, allowPrivateAddress: true, ...input },
    COMMAND_LINE,
  );
  provider.allowRedirectUri(callbackUrl(ctx, connection.id));
  return connection;
}

/**
 * A connection "Head office" of `server` to another Gatehouse (`upstream`, reached at the https
 * `issuer` in front of it) that keeps the provider's tokens for the resource servers
 * `tokenResources` (SPEC §4.15; the server needs KEYS_SECRET), with its client at the upstream;
 * the connection's id.
 */
export async function keepTokensOfGatehouse(server: TestServer, upstream: TestServer, issuer: string, tokenResources: string[]): Promise<string> {
  const ctx = server.app.gatehouse;
  const name = 'Head office';
  const scope = 'openid profile email annotation:read';
  const { client, secret } = await upstream.createClient({
    name: 'Gatehouse of the branch',
    confidential: true,
    redirectUris: [callbackUrl(ctx, slugOf(name))],
    scope,
  });
  const connection = await createConnection(
    ctx,
    { name, issuer, clientId: client.id, clientSecret: secret!, allowPrivateAddress: true, scope, keepTokens: true, tokenResources },
    COMMAND_LINE,
  );
  return connection.id;
}
