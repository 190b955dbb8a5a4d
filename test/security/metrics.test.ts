/**
 * `/metrics` under load and behind METRICS_TOKEN (issue 11 item 5, SPEC §1, §4.6). A scrape
 * used to count every row of ten tables: 200 concurrent scrapes of a large database stalled
 * every other request. Table sizes are now counted in the background (at start, then at most
 * once a minute), so a scrape reads only memory; and with METRICS_TOKEN set, only a scraper
 * that sends it reads anything.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ConfigError, loadConfig } from '../../src/config.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { scrape, scrapeUntil } from '../support/metrics.ts';
import { startServer, type TestServer } from '../support/server.ts';

const TOKEN = 'metrics-7Qk2-Zr9w-Lp4x-Vd8s';
const USERS = 'gatehouse_table_rows{table="users"}';
const CLIENTS = 'gatehouse_table_rows{table="clients"}';

for (const backend of BACKENDS) {
  describe(`/metrics (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    before(async () => {
      server = await startServer(backend, { METRICS_TOKEN: TOKEN });
    });
    after(() => server?.close());

    test('without the metrics token, or with another, → 401 with a Bearer challenge', async () => {
      const refusals = [
        {},
        { authorization: `Bearer ${TOKEN}x` },
        { authorization: `Bearer ${TOKEN.slice(0, -1)}` },
        { authorization: 'Bearer ' },
        { authorization: `Basic ${Buffer.from(`metrics:${TOKEN}`).toString('base64')}` },
        { authorization: TOKEN },
      ];
      for (const headers of refusals) {
        const response = await fetch(`${server.url}/metrics`, { headers });
        assert.equal(response.status, 401, JSON.stringify(headers));
        assert.match(response.headers.get('www-authenticate')!, /^Bearer realm="gatehouse", error="invalid_token"/);
        const body = await response.text();
        assert.equal((JSON.parse(body) as { error: string }).error, 'invalid_token');
        assert.ok(!body.includes('gatehouse_'), 'a refused scrape shows no metric');
        assert.ok(!body.includes(TOKEN) && !response.headers.get('www-authenticate')!.includes(TOKEN));
      }
    });

    test('with the metrics token → 200 and the metrics', async () => {
      const samples = await scrape(server, TOKEN);
      assert.ok(samples.has('process_cpu_seconds_total'));
      const lowerCase = await fetch(`${server.url}/metrics`, { headers: { authorization: `bearer ${TOKEN}` } });
      assert.equal(lowerCase.status, 200, 'the scheme is case-insensitive (RFC 7235 §2.1)');
    });

    test('many concurrent scrapes read the last background count: none of them counts rows', async () => {
      const counted = await scrapeUntil(server, (samples) => samples.has(USERS), TOKEN);
      const users = counted.get(USERS)!;
      const clients = counted.get(CLIENTS)!;
      await server.createUser('alice');
      await server.createUser('bob');
      await server.createClient({ name: 'Annotator' });
      const scrapes = await Promise.all(Array.from({ length: 50 }, () => scrape(server, TOKEN)));
      for (const samples of scrapes) {
        assert.equal(samples.get(USERS), users, 'a scrape within the minute reports the count made at start');
        assert.equal(samples.get(CLIENTS), clients);
      }
    });
  });
}

test('METRICS_TOKEN is optional, and refused when short or not sendable as a Bearer token', () => {
  assert.equal(loadConfig({}).metricsToken, null);
  assert.equal(loadConfig({ METRICS_TOKEN: TOKEN }).metricsToken, TOKEN);
  for (const bad of ['short', 'has a space in the middle', 'tab\there-0123456789', 'ünïcode-0123456789']) {
    assert.throws(
      () => loadConfig({ METRICS_TOKEN: bad }),
      (error: Error) => error instanceof ConfigError && /^METRICS_TOKEN /.test(error.message),
    );
  }
});
