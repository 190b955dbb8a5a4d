/**
 * What an operator watches (SPEC §4.6): the Prometheus metrics at /metrics, and the JSON
 * logs — one line per request, with a request id, and never a token, code, secret,
 * password or session id, even at LOG_LEVEL=trace.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as oauth from 'oauth4webapi';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { discover, exchangeRequest, insecure, obtainCallback, obtainTokens, refresh, refreshRequest, revokeToken, type App } from '../support/oauth-client.ts';
import { databaseUrl, scrape, scrapeUntil } from '../support/metrics.ts';
import { PASSWORD, startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';

/** How much each sample grew between two scrapes. */
function growth(before: Map<string, number>, after: Map<string, number>, name: string): number {
  return (after.get(name) ?? 0) - (before.get(name) ?? 0);
}

for (const backend of BACKENDS) {
  describe(`metrics (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let app: App;
    let confidential: App;

    before(async () => {
      server = await startServer(backend);
      await server.createUser('alice');
      app = await discover(server, (await server.createClient({ name: 'Annotator' })).client.id);
      const registered = await server.createClient({ name: 'Backend', confidential: true });
      confidential = await discover(server, registered.client.id, { secret: registered.secret });
    });
    after(() => server?.close());

    test('count requests per route, tokens, detections, login failures and failures by error code', async () => {
      const start = await scrape(server);
      const agent = new UserAgent(server.url);
      await agent.login('alice', 'wrong password');
      const tokens = await obtainTokens(app, agent);
      const second = await refresh(app, tokens.refresh_token!);
      await refresh(app, second.refresh_token!);
      assert.equal((await refreshRequest(app, tokens.refresh_token!)).status, 400); // reuse
      const authorized = await obtainCallback(app, agent);
      assert.equal((await exchangeRequest(app, authorized)).status, 200);
      assert.equal((await exchangeRequest(app, authorized)).status, 400); // replay
      const other = await obtainTokens(app, agent);
      await revokeToken(app, other.access_token);
      const badSecret = { ...confidential, auth: oauth.ClientSecretBasic('gcs_wrong') };
      assert.equal((await refreshRequest(badSecret, other.refresh_token!)).status, 401);
      const end = await scrape(server);

      const grew = (name: string) => growth(start, end, name);
      assert.equal(grew('gatehouse_tokens_issued_total{grant_type="authorization_code"}'), 3);
      assert.equal(grew('gatehouse_tokens_refreshed_total'), 2);
      assert.equal(grew('gatehouse_refresh_reuse_detected_total'), 1);
      assert.equal(grew('gatehouse_code_replays_detected_total'), 1);
      assert.equal(grew('gatehouse_grants_revoked_total{reason="refresh_reuse"}'), 1);
      assert.equal(grew('gatehouse_grants_revoked_total{reason="code_replay"}'), 1);
      assert.equal(grew('gatehouse_grants_revoked_total{reason="revoked"}'), 1);
      assert.equal(grew('gatehouse_logins_total{outcome="failed"}'), 1);
      assert.equal(grew('gatehouse_logins_total{outcome="succeeded"}'), 1);
      assert.equal(grew('gatehouse_request_failures_total{error="invalid_grant",status="400"}'), 2);
      assert.equal(grew('gatehouse_request_failures_total{error="invalid_client",status="401"}'), 1);
      assert.equal(grew('gatehouse_http_requests_total{method="POST",route="/api/token",status="200"}'), 5);
      assert.equal(grew('gatehouse_http_requests_total{method="POST",route="/api/token",status="400"}'), 2);
      assert.equal(grew('gatehouse_http_request_duration_seconds_count{method="POST",route="/api/token"}'), 8);
      assert.ok(grew('gatehouse_http_request_duration_seconds_sum{method="POST",route="/api/token"}') > 0);
      assert.equal(grew('gatehouse_http_requests_total{method="GET",route="/oauth/authorize",status="302"}') >= 3, true);
      assert.ok(end.has('process_cpu_seconds_total'));
    });

    test('report table sizes, counted in the background when a server starts', async () => {
      // The rows above were written after this server's first count; another server started
      // on the same database counts them at once (and then once a minute).
      const restarted = await startServer(backend, { DATABASE_URL: databaseUrl(server) });
      try {
        const counted = await scrapeUntil(restarted, (samples) => samples.has('gatehouse_table_rows{table="users"}'));
        assert.equal(counted.get('gatehouse_table_rows{table="users"}'), 1);
        assert.equal(counted.get('gatehouse_table_rows{table="clients"}'), 2);
        assert.equal(counted.get('gatehouse_table_rows{table="grants"}'), 3);
        assert.ok(counted.get('gatehouse_table_rows{table="audit_events"}')! > 10);
      } finally {
        await restarted.close();
      }
    });

    test('count the statements sent to the database: none for a scrape, one for a bearer check', async () => {
      const tokens = await obtainTokens(app, new UserAgent(server.url));
      await scrapeUntil(server, (samples) => samples.has('gatehouse_table_rows{table="users"}')); // the count at start is over
      // The background queues (back-channel logouts, mail) look for work every 2 seconds, a
      // statement each time: of a few tries, one falls between two polls.
      const grown: Array<{ scrape: number; bearer: number }> = [];
      for (let tries = 0; tries < 5 && !grown.some((g) => g.scrape === 0 && g.bearer === 1); tries++) {
        const first = await scrape(server);
        const second = await scrape(server);
        assert.equal((await fetch(`${server.url}/api/profile`, { headers: { authorization: `Bearer ${tokens.access_token}` } })).status, 200);
        const third = await scrape(server);
        grown.push({
          scrape: growth(first, second, 'gatehouse_database_statements_total'),
          bearer: growth(second, third, 'gatehouse_database_statements_total'),
        });
      }
      assert.ok(
        grown.some((g) => g.scrape === 0 && g.bearer === 1),
        JSON.stringify(grown),
      );
    });

    test('label routes by pattern, so no code or token reaches the metrics', async () => {
      await fetch(`${server.url}/oauth/authorize?client_id=${app.client.client_id}&code=gac_${'A'.repeat(43)}`, { redirect: 'manual' });
      await fetch(`${server.url}/no/such/page?access_token=gat_${'B'.repeat(43)}`);
      const text = await (await fetch(`${server.url}/metrics`)).text();
      assert.doesNotMatch(text, /gac_|gat_|access_token=|\?/);
      assert.match(text, /gatehouse_http_requests_total\{method="GET",route="unmatched",status="404"\} \d/);
    });
  });

  describe(`the scheduled purge (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    before(async () => {
      server = await startServer(backend, { PURGE_INTERVAL_SECONDS: '1' });
    });
    after(() => server?.close());

    test('runs on its own and is counted', async () => {
      await scrapeUntil(server, (samples) => (samples.get('gatehouse_purge_runs_total{outcome="completed"}') ?? 0) >= 1);
    });
  });

  describe(`the logs (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let app: App;
    let confidential: App;
    let secret: string;

    before(async () => {
      server = await startServer(backend, { LOG_LEVEL: 'trace' });
      await server.createUser('alice');
      app = await discover(server, (await server.createClient({ name: 'Annotator' })).client.id);
      const registered = await server.createClient({ name: 'Resource server', grantType: 'client_credentials', redirectUris: [], confidential: true });
      secret = registered.secret!;
      confidential = await discover(server, registered.client.id, { secret });
    });
    after(() => server?.close());

    test('a whole flow leaves no token, code, secret, password or session id in any line', async () => {
      const agent = new UserAgent(server.url);
      const wrong = 'Wrong-Password-123';
      await agent.login('alice', wrong);
      await agent.login('alice');
      const sessionId = agent.cookies.get('gatehouse_session')!;
      const authorized = await obtainCallback(app, agent);
      const code = authorized.callback.get('code')!;
      const tokens = await oauth.processAuthorizationCodeResponse(app.as, app.client, await exchangeRequest(app, authorized));
      const rotated = await refresh(app, tokens.refresh_token!);
      const introspected = await oauth.introspectionRequest(confidential.as, confidential.client, confidential.auth, rotated.access_token, insecure);
      assert.equal(((await introspected.json()) as { active: boolean }).active, true);
      await revokeToken(app, rotated.access_token);
      const badSecret = { ...confidential, auth: oauth.ClientSecretBasic(`gcs_${'x'.repeat(43)}`) };
      assert.equal((await oauth.introspectionRequest(badSecret.as, badSecret.client, badSecret.auth, tokens.access_token, insecure)).status, 401);
      await fetch(`${server.url}/api/profile?access_token=${rotated.access_token}`, { headers: { authorization: `Bearer ${tokens.access_token}` } });
      const home = await agent.visit('/');
      await agent.submit(home.html, '/logout');

      const logs = server.logs.join('');
      const secrets = {
        code,
        sessionId,
        secret,
        wrong,
        password: PASSWORD,
        access: tokens.access_token,
        refresh: tokens.refresh_token!,
        rotatedAccess: rotated.access_token,
        rotatedRefresh: rotated.refresh_token!,
      };
      for (const [what, value] of Object.entries(secrets)) assert.ok(!logs.includes(value), `the logs contain the ${what}`);
      assert.doesNotMatch(logs, /g(at|rt|ac|ss|cs|su)_[A-Za-z0-9_-]{43}/);
      assert.equal(server.app.log.level, 'trace');
    });

    test('one JSON line per request, carrying the request id the response names', async () => {
      const before = server.logs.length;
      const response = await fetch(`${server.url}/_status`, { headers: { 'x-request-id': 'lb-7f3a.42' } });
      const generated = await fetch(`${server.url}/_status`);
      const injected = await fetch(`${server.url}/_status`, { headers: { 'x-request-id': 'x" {"level":60}' } });
      assert.equal(response.headers.get('x-request-id'), 'lb-7f3a.42');
      assert.match(generated.headers.get('x-request-id')!, /^[0-9a-f-]{36}$/);
      assert.match(injected.headers.get('x-request-id')!, /^[0-9a-f-]{36}$/, 'a request id that is not plain is replaced');
      await new Promise((resolve) => setTimeout(resolve, 50));
      const lines = server.logs.slice(before).map((line) => JSON.parse(line) as Record<string, unknown>);
      const requests = lines.filter((line) => line.msg === 'request completed');
      assert.deepEqual(
        requests.map((line) => line.reqId),
        ['lb-7f3a.42', generated.headers.get('x-request-id'), injected.headers.get('x-request-id')],
      );
      assert.deepEqual(requests[0]!.req, { method: 'GET', path: '/_status', remoteAddress: '127.0.0.1' });
      assert.deepEqual(requests[0]!.res, { statusCode: 200 });
      assert.equal(typeof requests[0]!.responseTime, 'number');
      assert.ok(!lines.some((line) => line.msg === 'incoming request'));
    });
  });
}
