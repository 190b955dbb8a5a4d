/**
 * Fetching client ID metadata documents (SPEC §4.8) from a real https server on 127.0.0.1,
 * whose certificate comes from the throw-away CA that test/run.ts puts in
 * NODE_EXTRA_CA_CERTS — trusted the way a production certificate is. The server counts the
 * requests it gets, so "refused before connecting" and "served from the cache" are
 * observed, not assumed. No storage is involved, so no backends.
 */
import assert from 'node:assert/strict';
import { pbkdf2 } from 'node:crypto';
import { createSocket } from 'node:dgram';
import { promisify } from 'node:util';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { loadConfig } from '../../src/config.ts';
import { createClientMetadataResolver, type ClientMetadataOptions } from '../../src/oauth/client-metadata.ts';
import type { MetadataResolution } from '../../src/protocol/remote-documents.ts';
import { dnsHostLookup, type HostLookup } from '../../src/protocol/safe-fetch.ts';
import { serverCertificate, testCaProblem } from '../support/tls.ts';

type Handler = (req: IncomingMessage, res: ServerResponse, url: string) => void;

const document = (url: string, extra: object = {}) =>
  JSON.stringify({ client_id: url, client_name: 'Test App', redirect_uris: ['http://127.0.0.1/callback'], ...extra });
const json =
  (body: string, headers: Record<string, string> = {}): Handler =>
  (_req, res) =>
    res.writeHead(200, { 'content-type': 'application/json', ...headers }).end(body);
/** Stands in for DNS: every name resolves to the given addresses. */
const resolvesTo =
  (...addresses: string[]): HostLookup =>
  async () =>
    addresses.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));

function refusedWith(resolution: MetadataResolution, reason: RegExp): void {
  assert.equal(resolution.ok, false, 'should be refused');
  if (!resolution.ok) assert.match(resolution.reason, reason);
}

describe('fetching client ID metadata documents', { skip: testCaProblem() ?? false }, () => {
  let server: Server;
  let port: number;
  const handlers = new Map<string, Handler>();
  const requests = new Map<string, number>();
  const accepts: string[] = [];
  const count = (path: string) => requests.get(path) ?? 0;
  /** Serves `handler` at `path` and returns the document URL with host `host`. */
  const serve = (path: string, handler: (url: string) => Handler, host = '127.0.0.1') => {
    const url = `https://${host}:${port}${path}`;
    handlers.set(path, handler(url));
    return url;
  };

  let clock = Date.UTC(2026, 0, 1);
  const resolver = (env: Record<string, string> = {}, options: Partial<ClientMetadataOptions> = {}) =>
    createClientMetadataResolver(loadConfig({ CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES: 'true', ...env }).clientMetadata, { now: () => clock, ...options });

  before(async () => {
    server = createServer(serverCertificate(['localhost', '127.0.0.1', 'metadata.test']), (req, res) => {
      const path = new URL(req.url!, 'https://x').pathname;
      requests.set(path, count(path) + 1);
      accepts.push(req.headers.accept ?? '');
      const handler = handlers.get(path);
      if (handler) handler(req, res, path);
      else res.writeHead(404).end();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
  });
  after(() => {
    server.closeAllConnections();
    server.close();
  });

  test('a valid document is fetched once (GET, Accept: application/json), then served from the cache', async () => {
    const url = serve('/valid.json', (u) => json(document(u, { logo_uri: 'https://127.0.0.1/logo.png' })));
    const metadata = resolver();
    const first = await metadata.resolve(url);
    assert.ok(first.ok, JSON.stringify(first));
    assert.deepEqual(first.client, {
      id: url,
      name: 'Test App',
      redirectUris: ['http://127.0.0.1/callback'],
      clientUri: null,
      logoUri: 'https://127.0.0.1/logo.png',
      scope: null,
      postLogoutRedirectUris: [],
      backchannelLogoutUri: null,
      idTokenAlg: 'RS256',
      jwks: null,
      jwksUri: null,
      requireDpop: false,
      requirePar: false,
      fetchedAt: clock,
      expiresAt: clock + 3600_000,
    });
    assert.equal(accepts.at(-1), 'application/json');
    assert.deepEqual(await metadata.resolve(url), first);
    assert.equal(count('/valid.json'), 1);
  });

  test('concurrent requests for one URL share one fetch', async () => {
    const url = serve('/concurrent.json', (u) => (req, res) => setTimeout(() => json(document(u))(req, res, u), 100));
    const metadata = resolver();
    const answers = await Promise.all([1, 2, 3, 4].map(() => metadata.resolve(url)));
    assert.ok(answers.every((answer) => answer.ok));
    assert.equal(count('/concurrent.json'), 1);
  });

  test('an http URL is refused without a request', async () => {
    refusedWith(await resolver().resolve(`http://127.0.0.1:${port}/valid.json`), /not an https URL/);
  });

  test('a redirect is refused, and not followed', async () => {
    const target = serve('/target.json', (u) => json(document(u)));
    const url = serve('/redirect.json', () => (_req, res) => res.writeHead(302, { location: target }).end());
    refusedWith(await resolver().resolve(url), /302, a redirect/);
    assert.equal(count('/target.json'), 0);
  });

  test('a body over 5 120 bytes is refused, announced or not; 5 120 bytes are accepted', async () => {
    const padded = (u: string, bytes: number) => document(u).padEnd(bytes, ' ');
    const exact = serve('/exact.json', (u) => json(padded(u, 5120)));
    assert.ok((await resolver().resolve(exact)).ok);
    const announced = serve('/announced.json', (u) => json(padded(u, 5121)));
    refusedWith(await resolver().resolve(announced), /longer than 5120 bytes/);
    const streamed = serve('/streamed.json', (u) => (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' }); // chunked: no Content-Length to judge by
      res.write(document(u).slice(0, -1));
      const spaces = ' '.repeat(1000);
      const timer = setInterval(() => (res.destroyed ? clearInterval(timer) : res.write(spaces)), 5);
    });
    refusedWith(await resolver().resolve(streamed), /longer than 5120 bytes/);
  });

  test('a document with another client_id is refused', async () => {
    const url = serve('/mismatch.json', () => json(document(`https://127.0.0.1:${port}/other.json`)));
    refusedWith(await resolver().resolve(url), /client_id other than its own URL/);
  });

  test('a body that is not JSON is refused', async () => {
    const url = serve('/html.json', () => (_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end('<html>hi</html>'));
    refusedWith(await resolver().resolve(url), /is not JSON/);
  });

  test('an error status is refused', async () => {
    refusedWith(await resolver().resolve(`https://127.0.0.1:${port}/missing.json`), /HTTP 404/);
  });

  test('a server that never answers is given up on after 5 seconds', { timeout: 15_000 }, async () => {
    const url = serve('/silent.json', () => () => {});
    const start = performance.now();
    refusedWith(await resolver().resolve(url), /no complete answer within 5000 ms/);
    const ms = performance.now() - start;
    assert.ok(ms >= 4900 && ms < 6500, `gave up after ${Math.round(ms)} ms`);
  });

  test('loopback and private addresses are refused before connecting, unless CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES', async () => {
    const url = serve('/private.json', (u) => json(document(u)));
    const strict = resolver({ CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES: 'false' });
    refusedWith(await strict.resolve(url), /127\.0\.0\.1, which is not a public address \(loopback\)/);
    const byName = serve('/private-by-name.json', (u) => json(document(u)), 'localhost');
    refusedWith(await strict.resolve(byName), /not a public address \(loopback\)/);
    // One private address among public ones is enough to refuse.
    const mixed = resolver({ CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES: 'false' }, { lookup: resolvesTo('93.184.215.14', '10.0.0.1') });
    refusedWith(await mixed.resolve(serve('/private-mixed.json', (u) => json(document(u)), 'metadata.test')), /10\.0\.0\.1.*\(private\)/);
    assert.equal(count('/private.json') + count('/private-by-name.json') + count('/private-mixed.json'), 0);
    assert.ok((await resolver().resolve(url)).ok);
    assert.equal(count('/private.json'), 1);
  });

  test('the connection goes to the address that was checked (no second DNS look-up)', async () => {
    // metadata.test exists in no DNS: only the checked address can have been used.
    const url = serve('/pinned.json', (u) => json(document(u)), 'metadata.test');
    assert.ok((await resolver({}, { lookup: resolvesTo('127.0.0.1') }).resolve(url)).ok);
    assert.equal(count('/pinned.json'), 1);
  });

  test('a host is fetched, not reported unreachable, when the server is too busy for 400 ms to see its connection made, as under load', async () => {
    // The server listens on 127.0.0.1 only: ::1, the name's second address, refuses connections.
    const url = serve('/busy.json', (u) => json(document(u)), 'metadata.test');
    const busyAfterConnecting: HostLookup = async () => {
      // Runs once the connection to the first address is under way, and holds the event loop.
      setImmediate(() => {
        const until = performance.now() + 400;
        while (performance.now() < until);
      });
      return resolvesTo('127.0.0.1', '::1')('metadata.test', AbortSignal.timeout(1000));
    };
    const resolution = await resolver({}, { lookup: busyAfterConnecting }).resolve(url);
    assert.ok(resolution.ok, JSON.stringify(resolution));
    assert.equal(count('/busy.json'), 1);
  });

  test('the certificate is checked against the host name', async () => {
    const url = serve('/wrong-name.json', (u) => json(document(u)), 'other.test');
    refusedWith(await resolver({}, { lookup: resolvesTo('127.0.0.1') }).resolve(url), /could not fetch \(ERR_TLS_CERT_ALTNAME_INVALID\)/);
  });

  test('a host outside CLIENT_METADATA_ALLOWED_HOSTS is refused without a request; one inside is fetched', async () => {
    const outside = serve('/allow-list.json', (u) => json(document(u)));
    refusedWith(await resolver({ CLIENT_METADATA_ALLOWED_HOSTS: '*.example.com,127.0.0.2' }).resolve(outside), /outside CLIENT_METADATA_ALLOWED_HOSTS/);
    const inside = serve('/allow-list.json', (u) => json(document(u)), 'metadata.test');
    refusedWith(await resolver({ CLIENT_METADATA_ALLOWED_HOSTS: '*.metadata.test' }).resolve(inside), /outside CLIENT_METADATA_ALLOWED_HOSTS/);
    assert.equal(count('/allow-list.json'), 0);
    assert.ok((await resolver({ CLIENT_METADATA_ALLOWED_HOSTS: 'metadata.test' }, { lookup: resolvesTo('127.0.0.1') }).resolve(inside)).ok);
  });

  test('a blocked URL is refused without a request, cached or not', async () => {
    const url = serve('/blocked/client.json', (u) => json(document(u)));
    const blocked = new Set<string>();
    const metadata = resolver({}, { isBlocked: async (u) => [...blocked].some((prefix) => u.startsWith(prefix)) });
    assert.ok((await metadata.resolve(url)).ok);
    blocked.add(`https://127.0.0.1:${port}/blocked/`);
    refusedWith(await metadata.resolve(url), /blocked/);
    assert.equal(count('/blocked/client.json'), 1);
  });

  test('with CLIENT_METADATA_DOCUMENTS=false nothing is fetched', async () => {
    const url = serve('/off.json', (u) => json(document(u)));
    refusedWith(await resolver({ CLIENT_METADATA_DOCUMENTS: 'false' }).resolve(url), /turned off/);
    assert.equal(count('/off.json'), 0);
  });

  test('documents are kept for their max-age, bounded to between 5 minutes and 24 hours', async () => {
    const cases: [path: string, cacheControl: string | null, seconds: number][] = [
      ['/short.json', 'max-age=60', 300],
      ['/medium.json', 'public, max-age=1800', 1800],
      ['/long.json', 'max-age=31536000', 86_400],
      ['/default.json', null, 3600],
    ];
    for (const [path, cacheControl, seconds] of cases) {
      const url = serve(path, (u) => json(document(u), cacheControl ? { 'cache-control': cacheControl } : {}));
      const metadata = resolver();
      const start = clock;
      const first = await metadata.resolve(url);
      assert.ok(first.ok && first.client.expiresAt === start + seconds * 1000, path);
      clock = start + seconds * 1000 - 1;
      await metadata.resolve(url);
      assert.equal(count(path), 1, `${path} still cached just before ${seconds} s`);
      clock = start + seconds * 1000 + 1;
      const again = await metadata.resolve(url);
      assert.equal(count(path), 2, `${path} fetched again after ${seconds} s`);
      assert.ok(again.ok && again.client.fetchedAt === clock);
    }
  });

  test('no answer (a 503) is not a refusal: remembered apart, and the token endpoint keeps the last good copy until a refusal', async () => {
    let answer: 'document' | 'unavailable' | 'gone' = 'document';
    const url = serve('/flaky.json', (u) => (req, res) => {
      if (answer === 'document') json(document(u), { 'cache-control': 'max-age=300' })(req, res, u);
      else res.writeHead(answer === 'unavailable' ? 503 : 404).end();
    });
    const metadata = resolver();
    const start = clock;
    assert.ok((await metadata.resolve(url)).ok);
    answer = 'unavailable';
    clock = start + 301_000;
    const unavailable = await metadata.resolve(url);
    assert.ok(!unavailable.ok && unavailable.unavailable, JSON.stringify(unavailable));
    assert.match(unavailable.reason, /HTTP 503/);
    assert.equal(count('/flaky.json'), 2);
    const kept = await metadata.resolve(url, { lastGoodCopy: true });
    assert.ok(kept.ok && kept.client.fetchedAt === start, 'the last good copy, without fetching again while the failure is remembered');
    assert.equal(count('/flaky.json'), 2);
    answer = 'gone';
    clock += 11_000;
    refusedWith(await metadata.resolve(url, { lastGoodCopy: true }), /HTTP 404/);
    assert.equal(count('/flaky.json'), 3);
    clock += 61_000;
    answer = 'unavailable';
    const afterRefusal = await metadata.resolve(url, { lastGoodCopy: true });
    assert.ok(!afterRefusal.ok && afterRefusal.unavailable, 'a refusal dropped the last good copy');
  });

  test('DNS look-ups: cancelled at the deadline, off the thread pool; IP literals and localhost need none', async () => {
    const dns = createSocket('udp4'); // a DNS server that never answers
    await new Promise<void>((resolve) => dns.bind(0, '127.0.0.1', resolve));
    try {
      const lookup = dnsHostLookup({ servers: [`127.0.0.1:${dns.address().port}`] });
      const started = performance.now();
      const hanging = Array.from({ length: 8 }, (_, i) =>
        lookup(`hang-${i}.example`, AbortSignal.timeout(1000)).then(
          () => 'answered',
          (error: Error) => error.name,
        ),
      );
      // Thread-pool work (what password hashing needs) is not held up behind them: it is done
      // before the look-ups give up (with room for a loaded machine's stalls).
      await Promise.all(Array.from({ length: 4 }, () => promisify(pbkdf2)('p', 's', 1000, 32, 'sha256')));
      assert.ok(performance.now() - started < 900, `the thread pool waited ${Math.round(performance.now() - started)} ms`);
      assert.deepEqual(await Promise.all(hanging), Array(8).fill('TimeoutError'));
      const ms = performance.now() - started;
      assert.ok(ms < 3000, `given up after ${Math.round(ms)} ms`);
      const never = AbortSignal.abort();
      assert.deepEqual(await lookup('203.0.113.9', AbortSignal.timeout(1000)), [{ address: '203.0.113.9', family: 4 }]);
      assert.deepEqual(await lookup('::1', AbortSignal.timeout(1000)), [{ address: '::1', family: 6 }]);
      assert.deepEqual(
        (await lookup('app.localhost', never)).map(({ address }) => address),
        ['127.0.0.1', '::1'],
      );
    } finally {
      dns.close();
    }
  });

  test('a refusal is remembered for a minute, so a hostile URL cannot make us fetch on every request', async () => {
    const url = serve('/refused.json', () => json('not json'));
    const metadata = resolver();
    const start = clock;
    refusedWith(await metadata.resolve(url), /not JSON/);
    clock = start + 59_000;
    refusedWith(await metadata.resolve(url), /not JSON/);
    assert.equal(count('/refused.json'), 1);
    clock = start + 61_000;
    await metadata.resolve(url);
    assert.equal(count('/refused.json'), 2);
  });
});
