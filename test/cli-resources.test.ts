/**
 * `gatehouse resource …` and `gatehouse scope …` (SPEC §2), run as an operator runs them,
 * on a database a real server shares: what they print, what they refuse, and what deleting
 * takes away from tokens already issued — on the running server, at once.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as oauth from 'oauth4webapi';
import { BACKENDS, backendOptions } from './support/backends.ts';
import { discover, insecure, obtainTokens, refreshRequest, tokenResult } from './support/oauth-client.ts';
import { databaseUrl, gatehouse, type Run } from './support/processes.ts';
import { startServer, type TestServer } from './support/server.ts';
import { UserAgent } from './support/user-agent.ts';

/** Succeeded, printing one JSON document. */
function printed(run: Run): unknown {
  assert.equal(run.code, 0, `exit ${run.code}: ${run.stderr}`);
  return JSON.parse(run.stdout);
}

/** Failed with one line on stderr matching `message`, printing nothing else. */
function refused(run: Run, message: RegExp): void {
  assert.deepEqual([run.code !== 0, run.stdout, run.stderr.trimEnd().split('\n').length], [true, '', 1], run.stderr);
  assert.match(run.stderr, message);
}

for (const backend of BACKENDS) {
  describe(`gatehouse resource and scope (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    const cli = (...args: string[]) => gatehouse(args, { DATABASE_URL: databaseUrl(server.config), PUBLIC_URL: server.url });

    before(async () => {
      server = await startServer(backend);
      await server.createUser('alice');
    });
    after(() => server?.close());

    test('resource create prints the normalized URI and the introspection client, whose secret works', async () => {
      const created = printed(
        await cli(
          'resource',
          'create',
          '--uri',
          'HTTPS://Files.Example/mcp/',
          '--name',
          'Files',
          '--scope',
          'files:read=Read your files',
          '--scope',
          'files:write=Change your files',
          '--json',
        ),
      ) as {
        uri: string;
        client_id: string;
        client_secret: string;
      };
      assert.equal(created.uri, 'https://files.example/mcp');
      assert.match(created.client_secret, /^gcs_/);
      const { client } = await server.createClient({ name: 'App', scope: 'files:read' });
      const tokens = await obtainTokens(await discover(server, client.id), new UserAgent(server.url), 'alice', { resource: created.uri });
      const introspector = await discover(server, created.client_id, { secret: created.client_secret });
      const info = await oauth.processIntrospectionResponse(
        introspector.as,
        introspector.client,
        await oauth.introspectionRequest(introspector.as, introspector.client, introspector.auth, tokens.access_token, insecure),
      );
      assert.equal(info.aud, created.uri);

      const listed = printed(await cli('resource', 'list', '--json')) as Array<{ uri: string; builtin: boolean; scopes: Array<{ name: string }> }>;
      assert.deepEqual(
        listed.map((r) => [r.uri, r.builtin, r.scopes.map((s) => s.name)]),
        [
          [server.url, true, ['annotation:read', 'annotation:write']],
          [created.uri, false, ['files:read', 'files:write']],
        ],
      );
    });

    test('bad input is refused with one clear line and changes nothing', async () => {
      refused(await cli('resource', 'create', '--uri', 'http://api.example', '--name', 'X'), /^gatehouse: URI must use https/);
      refused(await cli('resource', 'create', '--uri', 'https://files.example/mcp', '--name', 'X'), /exists already/);
      refused(await cli('resource', 'create', '--uri', server.url, '--name', 'X'), /exists already/);
      refused(
        await cli('resource', 'create', '--uri', 'https://x.example', '--name', 'X', '--scope', 'annotation:read=again'),
        /annotation:read exists already/,
      );
      refused(await cli('resource', 'create', '--uri', 'https://x.example', '--name', 'X', '--scope', 'nodescription'), /name=description/);
      refused(await cli('scope', 'create', 'x:y', '--resource', 'https://unknown.example', '--description', 'd'), /no resource server with the URI/);
      refused(await cli('scope', 'delete', 'annotation:write'), /built-in scope/);
      refused(await cli('scope', 'delete', 'nothing:here'), /no scope named/);
      refused(await cli('resource', 'delete', 'https://unknown.example'), /no resource server/);
      assert.equal((printed(await cli('resource', 'list', '--json')) as unknown[]).length, 2);
    });

    test('scope create and list; scope delete and resource delete revoke what was granted, at once', async () => {
      printed(await cli('scope', 'create', 'files:share', '--resource', 'https://files.example/mcp/', '--description', 'Share your files', '--json'));
      const scopes = printed(await cli('scope', 'list', '--json')) as Array<{ name: string; resource: string; description: string }>;
      assert.deepEqual(
        scopes.find((s) => s.name === 'files:share'),
        { name: 'files:share', resource: 'https://files.example/mcp', description: 'Share your files' },
      );

      const { client } = await server.createClient({ name: 'Sharer', scope: 'files:share files:read' });
      const app = await discover(server, client.id);
      const sharing = await obtainTokens(app, new UserAgent(server.url), 'alice', { resource: 'https://files.example/mcp', scope: 'files:share' });
      const reading = await obtainTokens(app, new UserAgent(server.url), 'alice', { resource: 'https://files.example/mcp', scope: 'files:read' });
      printed(await cli('scope', 'delete', 'files:share', '--json'));
      assert.equal((await tokenResult(await refreshRequest(app, sharing.refresh_token!))).body.error, 'invalid_grant');
      assert.equal((await tokenResult(await refreshRequest(app, reading.refresh_token!))).status, 200, 'a grant without it lives on');

      const again = await obtainTokens(app, new UserAgent(server.url), 'alice', { resource: 'https://files.example/mcp' });
      printed(await cli('resource', 'delete', 'https://FILES.example/mcp', '--json'));
      assert.equal((await tokenResult(await refreshRequest(app, again.refresh_token!))).body.error, 'invalid_grant');
      assert.equal((printed(await cli('resource', 'list', '--json')) as unknown[]).length, 1);
      const audit = await cli('audit', '--json');
      const types = (printed(audit) as Array<{ type: string }>).map((e) => e.type);
      for (const type of ['resource_created', 'scope_created', 'scope_deleted', 'resource_deleted']) assert.ok(types.includes(type), type);
    });
  });
}
