/**
 * `gatehouse client …` and `gatehouse audit --client` with every kind of client ID (SPEC §2,
 * §4.8): a metadata document's URL and a dynamically registered client's UUID, run as an
 * operator runs them, against a database a real server shares.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { BACKENDS, backendOptions } from './support/backends.ts';
import { serveMetadataDocument, type MetadataDocument } from './support/metadata-document.ts';
import { discover, obtainTokens, type App } from './support/oauth-client.ts';
import { databaseUrl, gatehouse, type Run } from './support/processes.ts';
import { startServer, type TestServer } from './support/server.ts';
import { testCaProblem } from './support/tls.ts';
import { assertDead } from './support/token-checks.ts';
import { UserAgent } from './support/user-agent.ts';
import { outlastClientCache } from './support/waits.ts';

const REDIRECT_URI = 'http://127.0.0.1:51004/callback'; // any port of the documents' loopback redirect URL

function json(run: Run): unknown {
  assert.equal(run.code, 0, `exit ${run.code}: ${run.stderr}`);
  return JSON.parse(run.stdout);
}

describe('client IDs of every kind on the command line', { skip: testCaProblem() ?? false }, () => {
  let document: MetadataDocument;
  before(async () => {
    document = await serveMetadataDocument('Shell Notes');
  });
  after(() => document?.close());

  for (const backend of BACKENDS) {
    describe(`(${backend.name})`, backendOptions(backend), () => {
      let server: TestServer;
      let env: Record<string, string>;
      const cli = (...args: string[]) => gatehouse(args, env);
      before(async () => {
        server = await startServer(backend, { CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES: 'true', DYNAMIC_CLIENT_REGISTRATION: 'true' });
        env = { DATABASE_URL: databaseUrl(server.config), PUBLIC_URL: server.url };
        await server.createUser('alice');
      });
      after(() => server?.close());

      test('block, unblock, audit and delete take a metadata document URL and a dynamic client UUID', async () => {
        const registration = await fetch(new URL('/oauth/register', server.url), {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ client_name: 'Dynamic Shell', redirect_uris: ['http://127.0.0.1/callback'] }),
        });
        const dynamic = ((await registration.json()) as { client_id: string }).client_id;
        const agent = new UserAgent(server.url);
        const apps: Record<string, App> = {
          [document.url]: await discover(server, document.url, { redirectUri: REDIRECT_URI }),
          [dynamic]: await discover(server, dynamic, { redirectUri: REDIRECT_URI }),
        };
        for (const [clientId, app] of Object.entries(apps)) {
          const tokens = await obtainTokens(app, agent, 'alice');
          const events = json(await cli('audit', '--client', clientId, '--json')) as Array<{ type: string; client_id: string }>;
          assert.ok(
            events.some((e) => e.type === 'token_issued' && e.client_id === clientId),
            `audit --client ${clientId}`,
          );

          assert.deepEqual(json(await cli('client', 'block', clientId, '--json')), { blocked: clientId, kind: 'client' });
          await outlastClientCache(); // on SQLite no message reaches the server from the command line
          await assertDead({ server, app }, [tokens], [401, 'invalid_client']);
          assert.deepEqual(json(await cli('client', 'unblock', clientId, '--json')), { unblocked: clientId });
          assert.deepEqual(json(await cli('client', 'delete', clientId, '--json')), { client_id: clientId, deleted: true });
        }
        const listed = json(await cli('client', 'list', '--json')) as Array<{ client_id: string }>;
        assert.deepEqual(
          listed.filter((c) => c.client_id in apps),
          [],
          'deleted clients are still listed',
        );
        const unknown = await cli('client', 'delete', 'https://unknown.example/client.json');
        assert.equal(unknown.code, 2);
        assert.match(unknown.stderr, /no client with id https:\/\/unknown\.example\/client\.json/);
      });
    });
  }
});
