/**
 * Small parts of the contract that the hardening review found broken (issue 11, "Also" and
 * item 14): the user id carries no port (RFC 7565, SPEC §3), an `insufficient_scope`
 * challenge names the scope that is needed (RFC 6750 §3), public clients made on the command
 * line require PKCE unless told otherwise (SPEC §2), and a mistyped command touches no
 * database.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { authorizationUrl, discover, obtainTokens, profile, type App } from '../support/oauth-client.ts';
import { databaseUrl, gatehouse } from '../support/processes.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';

describe('the command line rejects a mistyped command before opening a database', () => {
  test('"gatehouse usr list" exits with a usage error and creates no database file', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gatehouse-typo-'));
    try {
      const path = join(dir, 'data', 'gatehouse.db');
      const run = await gatehouse(['usr', 'list'], { DATABASE_URL: `sqlite:${path}` });
      assert.notEqual(run.code, 0);
      assert.match(run.stderr, /unknown command "usr list"/);
      assert.equal(existsSync(path), false, `the typo created ${path}`);
      assert.deepEqual(readdirSync(dir), [], 'nothing was created next to it either');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

for (const backend of BACKENDS) {
  describe(`identity, challenges and PKCE defaults (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let app: App;

    before(async () => {
      server = await startServer(backend);
      await server.createUser('alice');
      const { client } = await server.createClient({ name: 'Annotator' });
      app = await discover(server, client.id);
    });
    after(() => server?.close());

    test('the user id is acct:<username>@<host of PUBLIC_URL>, without the port', async () => {
      const tokens = await obtainTokens(app, new UserAgent(server.url));
      const response = await profile(server, tokens.access_token);
      assert.equal(response.status, 200);
      const { userid } = (await response.json()) as { userid: string };
      assert.notEqual(new URL(server.url).port, '', 'the test server listens on an explicit port');
      assert.equal(userid, 'acct:alice@127.0.0.1');
    });

    test('insufficient_scope names the scope that is needed', async () => {
      const tokens = await obtainTokens(app, new UserAgent(server.url), 'alice', { scope: 'annotation:write' });
      const response = await profile(server, tokens.access_token);
      assert.equal(response.status, 403);
      assert.match(response.headers.get('www-authenticate')!, /^Bearer\b.*\berror="insufficient_scope"/);
      assert.match(response.headers.get('www-authenticate')!, /\bscope="annotation:read"/);
    });

    test('a public client created on the command line requires PKCE unless --no-require-pkce', async () => {
      const env = { DATABASE_URL: databaseUrl(server.config) };
      const create = async (...extra: string[]) => {
        const run = await gatehouse(['client', 'create', '--name', 'CLI app', '--redirect-uri', 'http://127.0.0.1:8765/callback', '--json', ...extra], env);
        assert.equal(run.code, 0, run.stderr);
        return (JSON.parse(run.stdout) as { client_id: string }).client_id;
      };
      const [strict, legacy] = await Promise.all([create(), create('--no-require-pkce')]);
      const withoutPkce = async (clientId: string) => {
        const authorization = await authorizationUrl(await discover(server, clientId));
        authorization.url.searchParams.delete('code_challenge');
        authorization.url.searchParams.delete('code_challenge_method');
        const outcome = await new UserAgent(server.url).authorize(authorization.url);
        return outcome.redirect!.searchParams;
      };
      const refused = await withoutPkce(strict);
      assert.equal(refused.get('error'), 'invalid_request', 'the default public client was let through without PKCE');
      assert.match(refused.get('error_description')!, /code_challenge/);
      const allowed = await withoutPkce(legacy);
      assert.ok(allowed.get('code'), `--no-require-pkce still refused: ${allowed}`);

      const list = await gatehouse(['client', 'list', '--json'], env);
      const flags = Object.fromEntries((JSON.parse(list.stdout) as { client_id: string; require_pkce: boolean }[]).map((c) => [c.client_id, c.require_pkce]));
      assert.deepEqual([flags[strict], flags[legacy]], [true, false]);
    });
  });
}
