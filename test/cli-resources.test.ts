/**
 * `gatehouse resource …` and `gatehouse scope …` (SPEC §2), run as an operator runs them,
 * on a database a real server shares: what they print, what they refuse, and what deleting
 * takes away from tokens already issued — on the running server, at once.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as oauth from 'oauth4webapi';
import { BACKENDS, backendOptions } from './support/backends.ts';
import { authorizationUrl, discover, insecure, obtainTokens, refreshRequest, tokenResult } from './support/oauth-client.ts';
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

    test('token settings: create and update with every flag, shown by list (text and --json), audited', async () => {
      const settings = (list: unknown, uri: string) => {
        const r = (list as Array<Record<string, unknown>>).find((r) => r.uri === uri)!;
        return [r.token_format, r.signing_alg, r.access_token_ttl, r.access_token_lifetime, r.require_second_factor, r.require_dpop];
      };
      const jwt = 'https://jwt.example/api';
      printed(
        await cli(
          'resource',
          'create',
          '--uri',
          jwt,
          '--name',
          'JWT API',
          '--token-format',
          'jwt',
          '--signing-alg',
          'RS256',
          '--access-token-ttl',
          '900',
          '--require-second-factor',
          '--require-dpop',
          '--json',
        ),
      );
      assert.deepEqual(settings(printed(await cli('resource', 'list', '--json')), jwt), ['jwt', 'RS256', 900, 900, true, true]);
      assert.deepEqual(settings(printed(await cli('resource', 'list', '--json')), server.url), ['opaque', 'ES256', null, 3600, false, false], 'defaults');
      const text = await cli('resource', 'list');
      assert.match(text.stdout, /^https:\/\/jwt\.example\/api\tJWT API\t-\tjwt RS256\t900s\tsecond factor required\tDPoP required$/m);
      assert.match(text.stdout, /\(built in\)\tannotation:read annotation:write\topaque\t3600s \(default\)$/m);

      const updated = printed(
        await cli(
          'resource',
          'update',
          `${jwt}/`,
          '--signing-alg',
          'ES256',
          '--access-token-ttl',
          'default',
          '--no-require-second-factor',
          '--no-require-dpop',
          '--json',
        ),
      );
      assert.deepEqual(updated, {
        uri: jwt,
        token_format: 'jwt',
        signing_alg: 'ES256',
        access_token_ttl: null,
        access_token_lifetime: 300,
        require_second_factor: false,
        require_dpop: false,
      });
      printed(await cli('resource', 'update', jwt, '--token-format', 'opaque', '--access-token-ttl', '86400', '--json'));
      assert.deepEqual(settings(printed(await cli('resource', 'list', '--json')), jwt), ['opaque', 'ES256', 86400, 86400, false, false]);
      printed(await cli('resource', 'update', server.url, '--access-token-ttl', '600', '--require-second-factor', '--json'));
      assert.deepEqual(
        settings(printed(await cli('resource', 'list', '--json')), server.url),
        ['opaque', 'ES256', 600, 600, true, false],
        "the built-in resource's lifetime may change",
      );
      printed(await cli('resource', 'update', server.url, '--token-format', 'opaque', '--access-token-ttl', 'default', '--no-require-second-factor', '--json'));
      assert.deepEqual(
        settings(printed(await cli('resource', 'list', '--json')), server.url),
        ['opaque', 'ES256', null, 3600, false, false],
        'naming its own format is no change',
      );

      const events = (printed(await cli('audit', '--json')) as Array<{ type: string; detail: Record<string, unknown> }>).filter(
        (e) => e.type === 'resource_updated' && e.detail.resource === jwt,
      );
      assert.deepEqual(
        events.map((e) => e.detail),
        [
          { resource: jwt, token_format: 'opaque', access_token_ttl: 86400 },
          { resource: jwt, signing_alg: 'ES256', access_token_ttl: null, require_second_factor: 0, require_dpop: 0 },
        ],
        'each update records what changed, newest first',
      );
      printed(await cli('resource', 'delete', jwt, '--json'));
    });

    test('bad token settings are refused with one line naming the flag, and change nothing', async () => {
      const opaque = 'https://opaque.example';
      const jwt = 'https://short.example';
      printed(await cli('resource', 'create', '--uri', opaque, '--name', 'Opaque', '--access-token-ttl', '7200', '--json'));
      printed(await cli('resource', 'create', '--uri', jwt, '--name', 'Short', '--token-format', 'jwt', '--json'));
      const before = printed(await cli('resource', 'list', '--json'));
      const create = (...flags: string[]) => cli('resource', 'create', '--uri', 'https://new.example', '--name', 'New', ...flags);
      refused(await create('--token-format', 'jws'), /^gatehouse: --token-format: .*opaque or jwt, got "jws"/);
      refused(await create('--signing-alg', 'HS256'), /^gatehouse: --signing-alg: .*ES256 or RS256, got "HS256"/);
      refused(await create('--token-format', 'jwt', '--access-token-ttl', '3601'), /^gatehouse: --access-token-ttl: .*from 60 to 3600 for jwt/);
      refused(await create('--access-token-ttl', '86401'), /^gatehouse: --access-token-ttl: .*from 60 to 86400 for opaque/);
      refused(await create('--access-token-ttl', '59'), /^gatehouse: --access-token-ttl: .*from 60 to 86400/);
      refused(await create('--access-token-ttl', '1.5e3'), /^gatehouse: --access-token-ttl: .*whole number/);
      refused(await cli('resource', 'update', jwt, '--token-format', 'JWT'), /^gatehouse: --token-format: /);
      refused(await cli('resource', 'update', jwt, '--signing-alg', 'none'), /^gatehouse: --signing-alg: /);
      refused(await cli('resource', 'update', jwt, '--access-token-ttl', '7200'), /^gatehouse: --access-token-ttl: .*from 60 to 3600 for jwt/);
      refused(await cli('resource', 'update', opaque, '--access-token-ttl', '100000'), /^gatehouse: --access-token-ttl: .*from 60 to 86400 for opaque/);
      refused(
        await cli('resource', 'update', opaque, '--token-format', 'jwt'),
        /^gatehouse: --access-token-ttl: .*from 60 to 3600 for jwt tokens .*it is 7200/,
      );
      refused(await cli('resource', 'update', opaque, '--token-format', 'jwt', '--signing-alg', 'RS256', '--access-token-ttl', '4000'), /--access-token-ttl/);
      refused(
        await cli('resource', 'update', server.url, '--token-format', 'jwt'),
        /^gatehouse: --token-format: the built-in resource's token format cannot be changed/,
      );
      refused(await cli('resource', 'update', server.url, '--token-format', 'jwt', '--access-token-ttl', '120'), /built-in resource's token format/);
      refused(await cli('resource', 'update', 'https://unknown.example', '--token-format', 'jwt'), /no resource server with the URI/);
      refused(await cli('resource', 'update'), /^gatehouse: usage: gatehouse resource update <uri>/);
      assert.deepEqual(printed(await cli('resource', 'list', '--json')), before);
      for (const uri of [opaque, jwt]) printed(await cli('resource', 'delete', uri, '--json'));
    });

    test('scope update rewords a scope, a built-in one too: scope list and the consent page show the new words', async () => {
      const updated = printed(await cli('scope', 'update', 'annotation:read', '--description', ' See your profile and your notes ', '--json'));
      assert.deepEqual(updated, { name: 'annotation:read', description: 'See your profile and your notes' });
      const scopes = printed(await cli('scope', 'list', '--json')) as Array<{ name: string; description: string }>;
      assert.equal(scopes.find((s) => s.name === 'annotation:read')?.description, 'See your profile and your notes');
      const { client } = await server.createClient({ name: 'Notes app', scope: 'annotation:read' });
      const alice = new UserAgent(server.url);
      await alice.login('alice');
      const consent = await alice.visit(String((await authorizationUrl(await discover(server, client.id))).url));
      assert.match(consent.html, /See your profile and your notes/);

      refused(await cli('scope', 'update', 'nothing:here', '--description', 'Words'), /^gatehouse: there is no scope named "nothing:here"$/m);
      refused(await cli('scope', 'update', 'annotation:read', '--description', '  '), /description of annotation:read must be/);
      refused(await cli('scope', 'update', 'annotation:read'), /^gatehouse: usage: gatehouse scope update <name> --description <text>/);
      const audit = printed(await cli('audit', '--type', 'scope_updated', '--json')) as Array<{ detail: { scope: string } }>;
      assert.ok(audit.some((event) => event.detail.scope === 'annotation:read'));
      printed(await cli('scope', 'update', 'annotation:read', '--description', 'Read your annotations, including private ones', '--json'));
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
