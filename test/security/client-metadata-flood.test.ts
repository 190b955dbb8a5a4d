/**
 * Flooding the authorization endpoint with client ID metadata document URLs that are all
 * different (SPEC §4.8), so that the cache never answers: each one is a fresh DNS look-up
 * and HTTPS fetch, and a hostile server that accepts the connection and never answers holds
 * each for the full 5 seconds. Unbounded, a few such requests fill libuv's thread pool with
 * look-ups (the pool password hashing runs on) and any number of them hold sockets. The
 * fetches in flight are bounded; a request beyond the bound is answered 503 with
 * Retry-After, and that refusal is not remembered, so a genuine client asking at the same
 * moment is not turned away for the next minute. Not about storage: SQLite only.
 */
import assert from 'node:assert/strict';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { METADATA_FETCHES_PER_ADDRESS, METADATA_UNANSWERED_CACHE_SECONDS } from '../../src/oauth/client-metadata.ts';
import { sqlite } from '../support/backends.ts';
import { startServer } from '../support/server.ts';
import { until } from '../support/waits.ts';
import { serverCertificate, testCaProblem } from '../support/tls.ts';

const HOSTILE_URLS = 24;

/**
 * A Gatehouse that accepts metadata documents from loopback, and an https server (the test
 * CA's certificate) answering the document requests with `handler`.
 */
async function documentsAndGatehouse(handler: (req: IncomingMessage, res: ServerResponse, base: string) => void, env: Record<string, string> = {}) {
  let base = '';
  const documents = createServer(serverCertificate(['127.0.0.1']), (req, res) => handler(req, res, base));
  await new Promise<void>((resolve) => documents.listen(0, '127.0.0.1', resolve));
  base = `https://127.0.0.1:${(documents.address() as AddressInfo).port}`;
  const server = await startServer(sqlite, { CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES: 'true', ...env });
  return {
    base,
    authorize: (clientId: string) =>
      fetch(`${server.url}/oauth/authorize?${new URLSearchParams({ client_id: clientId, response_type: 'code' })}`, { redirect: 'manual' }),
    async close() {
      documents.closeAllConnections();
      documents.close();
      await server.close();
    },
  };
}

describe('a flood of distinct metadata document URLs', { skip: testCaProblem() ?? false, timeout: 30_000 }, () => {
  let world: Awaited<ReturnType<typeof documentsAndGatehouse>>;
  let stalled = 0;
  let peakStalled = 0;

  before(async () => {
    world = await documentsAndGatehouse((req, res, base) => {
      const path = new URL(req.url!, 'https://x').pathname;
      if (path === '/genuine.json') {
        const url = `${base}/genuine.json`;
        res
          .writeHead(200, { 'content-type': 'application/json' })
          .end(JSON.stringify({ client_id: url, client_name: 'Genuine', redirect_uris: ['http://127.0.0.1/cb'] }));
        return;
      }
      // Hostile: accept, then never answer.
      stalled++;
      peakStalled = Math.max(peakStalled, stalled);
      req.socket.once('close', () => stalled--);
    });
  });
  after(() => world?.close());

  test('only a few fetches are in flight at once; the rest are 503, and a genuine client is not remembered as refused', async () => {
    const flood = Promise.all(Array.from({ length: HOSTILE_URLS }, (_, i) => world.authorize(`${world.base}/hostile/${i}`)));
    // Once the flood holds both fetches, a genuine client asks too.
    await until('the flood holds both fetches', () => stalled === 2);
    const duringFlood = await world.authorize(`${world.base}/genuine.json`);
    const answers = await flood;

    assert.ok(peakStalled <= 2, `${peakStalled} fetches were in flight at once`);
    const busy = answers.filter((response) => response.status === 503);
    assert.ok(busy.length >= HOSTILE_URLS - 2, `only ${busy.length} of ${HOSTILE_URLS} were refused as busy`);
    // Refused for want of a slot: again in a second; fetched and timed out (at most the
    // address's METADATA_FETCHES_PER_ADDRESS): once that timeout is no longer remembered.
    const retryAfter = busy.map((response) => response.headers.get('retry-after'));
    assert.ok(retryAfter.filter((seconds) => seconds === '1').length >= HOSTILE_URLS - METADATA_FETCHES_PER_ADDRESS, retryAfter.join());
    assert.ok(
      retryAfter.every((seconds) => seconds === '1' || seconds === String(METADATA_UNANSWERED_CACHE_SECONDS)),
      retryAfter.join(),
    );
    assert.equal(duringFlood.status, 503, 'the genuine client is told to try again');

    // Once the flood is over, the genuine client is fetched (the busy refusal was not cached):
    // known now, its request's own mistake (no PKCE) goes back to its redirect URL.
    const afterFlood = await world.authorize(`${world.base}/genuine.json`);
    assert.equal(afterFlood.status, 302, `the genuine client got ${afterFlood.status}`);
    assert.match(afterFlood.headers.get('location') ?? '', /^http:\/\/127\.0\.0\.1\/cb\?error=invalid_request/);
  });
});

describe('one address fetching many metadata documents', { skip: testCaProblem() ?? false, timeout: 30_000 }, () => {
  let world: Awaited<ReturnType<typeof documentsAndGatehouse>>;
  let fetched = 0;

  before(async () => {
    world = await documentsAndGatehouse(
      (req, res, base) => {
        fetched++;
        const url = `${base}${new URL(req.url!, 'https://x').pathname}`;
        res
          .writeHead(200, { 'content-type': 'application/json' })
          .end(JSON.stringify({ client_id: url, client_name: 'App', redirect_uris: ['http://127.0.0.1/cb'] }));
      },
      { TOKEN_REQUESTS_PER_ADDRESS: '5' },
    );
  });
  after(() => world?.close());

  test('fetches count against the address (TOKEN_REQUESTS_PER_ADDRESS a minute); cached documents do not', async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 8; i++) statuses.push((await world.authorize(`${world.base}/app/${i}.json`)).status);
    assert.deepEqual(statuses, [302, 302, 302, 302, 302, 429, 429, 429], 'the sixth new document was fetched all the same');
    assert.equal(fetched, 5, 'a refused request still made a fetch');
    // A document already fetched is served from the cache, budget or not.
    assert.equal((await world.authorize(`${world.base}/app/0.json`)).status, 302);
    assert.equal(fetched, 5);
  });
});
