/**
 * Starving metadata-document clients (SPEC §4.8, issue 18): strangers flood the
 * authorization endpoint with metadata document URLs of their own — URLs whose host
 * accepts the connection and never answers, or URLs refused at once, by the thousand, from
 * two addresses — while a legitimate metadata-document client goes on authorizing and
 * refreshing. It must keep working: fetches are shared fairly (per host, per requesting
 * address), refusals are remembered apart from good documents, a timeout is never
 * remembered as a refusal, and at the token endpoint a client whose document cannot be
 * fetched right now keeps its last good copy.
 *
 * The legitimate client's document is served from 127.0.0.1, the attackers' from 127.0.0.2
 * (another host, both on loopback: CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES); the attackers'
 * addresses come through X-Forwarded-For from a trusted proxy. Not about storage: SQLite only.
 */
import assert from 'node:assert/strict';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { sqlite } from '../support/backends.ts';
import { authorizationUrl, discover, obtainTokens, refreshRequest, tokenResult, type App } from '../support/oauth-client.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { serverCertificate, testCaProblem } from '../support/tls.ts';
import { UserAgent } from '../support/user-agent.ts';
import { until } from '../support/waits.ts';

const ATTACKERS = ['203.0.113.1', '203.0.113.2'];
const REDIRECT_URI = 'http://127.0.0.1:51004/callback';

async function httpsServer(host: string, handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<{ server: Server; origin: string }> {
  const server = createServer(serverCertificate([host]), handler);
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  return { server, origin: `https://${host}:${(server.address() as AddressInfo).port}` };
}

describe('metadata-document clients under a flood of hostile document URLs', { skip: testCaProblem() ?? false, timeout: 90_000 }, () => {
  let server: TestServer;
  let alice: UserAgent;
  let legit: Awaited<ReturnType<typeof httpsServer>>;
  let hostile: Awaited<ReturnType<typeof httpsServer>>;
  /** The legitimate client's documents: path → whether its host answers, and how often each was asked for. */
  const silent = new Set<string>();
  const asked = new Map<string, number>();
  /** Hostile requests being held unanswered now, and the most at once. */
  let held = 0;
  let peakHeld = 0;

  before(async () => {
    legit = await httpsServer('127.0.0.1', (req, res) => {
      const path = new URL(req.url!, 'https://x').pathname;
      asked.set(path, (asked.get(path) ?? 0) + 1);
      if (silent.has(path)) return; // accepts, never answers
      const url = `${legit.origin}${path}`;
      res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'max-age=0' });
      res.end(JSON.stringify({ client_id: url, client_name: 'Notes CLI', redirect_uris: ['http://127.0.0.1/callback'] }));
    });
    hostile = await httpsServer('127.0.0.2', (req, res) => {
      if (!req.url!.startsWith('/hang/')) return void res.writeHead(404).end();
      held++;
      peakHeld = Math.max(peakHeld, held);
      req.socket.once('close', () => held--);
    });
    server = await startServer(sqlite, { CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES: 'true', TRUST_PROXY: '127.0.0.1', LOG_LEVEL: 'warn' });
    await server.createUser('alice');
    alice = new UserAgent(server.url);
    await alice.login('alice');
  });
  after(async () => {
    for (const { server: https } of [legit, hostile]) {
      https?.closeAllConnections();
      https?.close();
    }
    await server?.close();
  });

  /** An attacker's authorization request naming `clientId`, from `address`. */
  const attack = (clientId: string, address: string) =>
    fetch(`${server.url}/oauth/authorize?${new URLSearchParams({ client_id: clientId, response_type: 'code' })}`, {
      redirect: 'manual',
      headers: { 'x-forwarded-for': address },
    }).then(async (response) => (await response.arrayBuffer(), response.status));

  /** The legitimate client: authorized once (the whole flow), holding a refresh token. */
  async function legitimateClient(path: string): Promise<{ app: App; refreshToken: string }> {
    const app = await discover(server, `${legit.origin}${path}`, { redirectUri: REDIRECT_URI });
    const tokens = await obtainTokens(app, alice);
    return { app, refreshToken: tokens.refresh_token! };
  }

  /** Refreshes and returns the status; keeps the new refresh token. */
  async function refreshed(client: { app: App; refreshToken: string }): Promise<number> {
    const result = await tokenResult(await refreshRequest(client.app, client.refreshToken));
    if (result.body.refresh_token) client.refreshToken = result.body.refresh_token;
    return result.status;
  }

  /** A new authorization by alice, down to the code exchange: the status where it stopped, or 200. */
  async function authorized(client: { app: App }): Promise<number> {
    try {
      await obtainTokens(client.app, alice);
      return 200;
    } catch (error) {
      const status = /: (\d{3})$/.exec((error as Error).message)?.[1];
      if (status) return Number(status);
      throw error;
    }
  }

  test('1 100 quickly refused URLs from two addresses neither evict its document nor take its fetches', async () => {
    const client = await legitimateClient('/notes-a.json');
    assert.equal(asked.get('/notes-a.json'), 1);
    // One request at a time per address, as fast as they are answered: 550 each, within
    // TOKEN_REQUESTS_PER_ADDRESS (600 a minute), 1 100 distinct refused documents in all.
    let sent = 0;
    const flood = Promise.all(
      ATTACKERS.map(async (address, a) => {
        for (let i = 0; i < 550; i++, sent++) await attack(`${hostile.origin}/refused/${a}/${i}.json`, address);
      }),
    );
    // Once more refusals than documents fit in one cache have arrived, and while more arrive.
    while (sent < 1040) await sleep(20);
    const during: number[] = [];
    for (let i = 0; i < 5; i++) during.push(await refreshed(client));
    during.push(await authorized(client));
    await flood;
    assert.deepEqual(during, [200, 200, 200, 200, 200, 200], 'refreshes and an authorization during the flood');
    assert.equal(await refreshed(client), 200, 'a refresh after it');
    assert.equal(asked.get('/notes-a.json'), 1, 'its document stayed cached: the refusals did not push it out');
  });

  test('URLs that hang, from two addresses, hold no fetch the client needs; at most two per host', async () => {
    const client = await legitimateClient('/notes-b.json');
    server.advance(301); // its document (max-age=0: kept 5 minutes) has expired: every use fetches it again
    let stop = false;
    const requests: Promise<number>[] = [];
    const flood = (async () => {
      for (let i = 0; !stop; i++) {
        for (const address of ATTACKERS) requests.push(attack(`${hostile.origin}/hang/${address}/${i}.json`, address));
        await sleep(100);
      }
    })();
    try {
      await until('the hostile host holds its two fetches', () => held === 2);
      const before = asked.get('/notes-b.json')!;
      assert.equal(await refreshed(client), 200, 'a refresh during the flood');
      assert.equal(asked.get('/notes-b.json'), before + 1, 'its document was fetched again');
      server.advance(301);
      assert.equal(await authorized(client), 200, 'an authorization during the flood');
    } finally {
      stop = true;
      await flood;
    }
    // Every hostile request is answered (once its fetch timed out, or at once: busy).
    const statuses = await Promise.all(requests);
    assert.ok(
      statuses.every((status) => status === 503),
      `the hostile requests: ${[...new Set(statuses)].join(', ')}`,
    );
    assert.ok(peakHeld <= 2, `${peakHeld} fetches from the hostile host at once`);
  });

  test('a timeout of its own host is not a refusal: the token endpoint keeps the last good copy, and the document is fetched again', async () => {
    const client = await legitimateClient('/notes-c.json');
    server.advance(301);
    silent.add('/notes-c.json');
    const started = performance.now();
    assert.equal(await refreshed(client), 200, 'refreshed on the last good copy');
    assert.ok(performance.now() - started >= 4900, 'after the 5 s deadline');
    assert.equal(await refreshed(client), 200, 'again, at once: the timeout is remembered (apart)');
    silent.delete('/notes-c.json');
    // Remembered as a timeout, not a refusal: the authorization endpoint says "try again", not "unknown client".
    const { url } = await authorizationUrl(client.app);
    const retry = await alice.fetch(url.pathname + url.search);
    assert.equal(retry.status, 503);
    assert.ok(Number(retry.headers.get('retry-after')) > 0);
    server.advance(11);
    const asks = asked.get('/notes-c.json')!;
    assert.equal(await authorized(client), 200, 'the document answers again: authorized');
    assert.equal(asked.get('/notes-c.json'), asks + 1);
  });
});
