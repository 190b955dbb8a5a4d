/**
 * `gatehouse client create --grant-type jwt_bearer` and `gatehouse issuer …` (SPEC §2, §4.11),
 * run as an operator runs them, on the database a real server shares: a publisher client whose
 * secret, shown once, signs grant tokens the server accepts; trusted issuers created, listed
 * (text and JSON), refused with one clear line, and deleted.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { SignJWT } from 'jose';
import { BACKENDS, backendOptions } from './support/backends.ts';
import { databaseUrl, gatehouse, type Run } from './support/processes.ts';
import { startServer, type TestServer } from './support/server.ts';
import { JWT_BEARER_GRANT_TYPE as JWT_BEARER } from '../src/oauth/grants/types.ts';

function printed(run: Run): unknown {
  assert.equal(run.code, 0, `exit ${run.code}: ${run.stderr}`);
  return JSON.parse(run.stdout);
}

function refused(run: Run, message: RegExp): void {
  assert.deepEqual([run.code !== 0, run.stdout, run.stderr.trimEnd().split('\n').length], [true, '', 1], run.stderr);
  assert.match(run.stderr, message);
}

for (const backend of BACKENDS) {
  describe(`gatehouse client create --grant-type jwt_bearer and gatehouse issuer (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    const cli = (...args: string[]) => gatehouse(args, { DATABASE_URL: databaseUrl(server.config), PUBLIC_URL: server.url });

    before(async () => {
      server = await startServer(backend);
      await server.createUser('alice');
    });
    after(() => server?.close());

    test('a jwt_bearer client is confidential without --confidential, needs no redirect URL, and its secret signs grant tokens', async () => {
      const created = printed(await cli('client', 'create', '--name', 'Publisher', '--grant-type', 'jwt_bearer', '--json')) as {
        client_id: string;
        client_secret: string;
      };
      assert.match(created.client_secret, /^gcs_/);
      const listed = printed(await cli('client', 'list', '--json')) as Array<{ client_id: string; grant_type: string; confidential: boolean }>;
      const row = listed.find((c) => c.client_id === created.client_id)!;
      assert.deepEqual([row.grant_type, row.confidential], [JWT_BEARER, true]);
      const host = new URL(server.url).hostname;
      const now = Math.floor(Date.now() / 1000);
      const token = await new SignJWT({ iss: created.client_id, aud: host, sub: `acct:alice@${host}`, nbf: now, exp: now + 60 })
        .setProtectedHeader({ alg: 'HS256' })
        .sign(new TextEncoder().encode(created.client_secret));
      const response = await fetch(`${server.url}/api/token`, { method: 'POST', body: new URLSearchParams({ grant_type: JWT_BEARER, assertion: token }) });
      assert.equal(response.status, 200, await response.clone().text());
      const text = await cli('client', 'create', '--name', 'Publisher 2', '--grant-type', JWT_BEARER);
      assert.equal(text.code, 0, text.stderr);
      assert.match(text.stdout, /client_secret: gcs_/);
    });

    test('issuer create, list and delete; bad input gets one line naming what is wrong', async () => {
      const client = printed(await cli('client', 'create', '--name', 'CI deployer', '--grant-type', 'client_credentials', '--confidential', '--json')) as {
        client_id: string;
      };
      const created = printed(
        await cli(
          'issuer',
          'create',
          '--issuer',
          'https://token.actions.githubusercontent.com',
          '--profile',
          'workload',
          '--client',
          client.client_id,
          '--subject',
          'repo:example/app:ref:refs/heads/main',
          '--scope',
          'annotation:read',
          '--json',
        ),
      ) as Record<string, unknown>;
      assert.deepEqual(created, {
        issuer: 'https://token.actions.githubusercontent.com',
        profile: 'workload',
        jwks_uri: null,
        allow_private_address: false,
        subject_claim: 'sub',
        subject: 'repo:example/app:ref:refs/heads/main',
        clients: [client.client_id],
        scopes: ['annotation:read'],
        resource: null,
        created_at: created.created_at,
      });
      const idp = await cli(
        'issuer',
        'create',
        '--issuer',
        'https://example.okta.com',
        '--profile',
        'id-jag',
        '--subject-claim',
        'email',
        '--jwks-uri',
        'https://example.okta.com/oauth2/v1/keys',
      );
      assert.equal(idp.code, 0, idp.stderr);
      assert.match(idp.stdout, /Trusted https:\/\/example\.okta\.com \(id-jag\)\./);
      assert.doesNotMatch(idp.stdout, /Warning/);
      // A workload issuer with no exact subject: any workload it signs for acts as the client, and the command says so.
      const unpinned = await cli('issuer', 'create', '--issuer', 'https://ci.example', '--profile', 'workload', '--client', client.client_id);
      assert.equal(unpinned.code, 0, unpinned.stderr);
      assert.match(unpinned.stdout, /Warning: no --subject, so any workload this issuer signs a token for acts as the client/);
      assert.equal((await cli('issuer', 'delete', 'https://ci.example')).code, 0);
      const list = printed(await cli('issuer', 'list', '--json')) as Array<{ issuer: string }>;
      assert.deepEqual(
        list.map((i) => i.issuer),
        ['https://example.okta.com', 'https://token.actions.githubusercontent.com'],
      );
      const text = await cli('issuer', 'list');
      assert.match(
        text.stdout,
        /^https:\/\/example\.okta\.com\tid-jag\thttps:\/\/example\.okta\.com\/oauth2\/v1\/keys\tsubject: email\tclients: any confidential\tscopes: any$/m,
      );

      refused(await cli('issuer', 'create', '--issuer', 'https://example.okta.com', '--profile', 'id-jag'), /This issuer is trusted already/);
      refused(await cli('issuer', 'create', '--issuer', 'http://idp.example', '--profile', 'id-jag'), /Issuer must be an https URL/);
      refused(await cli('issuer', 'create', '--issuer', 'https://idp.example', '--profile', 'saml'), /Profile must be one of id-jag, workload/);
      refused(await cli('issuer', 'create', '--issuer', 'https://idp.example'), /--profile is required/);
      refused(await cli('issuer', 'create', '--issuer', 'https://idp.example', '--profile', 'workload'), /exactly one client/);
      refused(
        await cli(
          'issuer',
          'create',
          '--issuer',
          'https://idp.example',
          '--profile',
          'workload',
          '--client',
          client.client_id,
          '--resource',
          'https://unknown.example',
        ),
        /no such resource server/,
      );

      const deleted = printed(await cli('issuer', 'delete', 'https://example.okta.com', '--json'));
      assert.deepEqual(deleted, { issuer: 'https://example.okta.com', deleted: true });
      refused(await cli('issuer', 'delete', 'https://example.okta.com'), /is not a trusted issuer/);
      const audit = await server.store.db.selectFrom('audit_events').select('type').where('type', 'in', ['issuer_created', 'issuer_deleted']).execute();
      assert.deepEqual(audit.map((row) => row.type).sort(), ['issuer_created', 'issuer_created', 'issuer_created', 'issuer_deleted', 'issuer_deleted']);
    });

    test('issuer create --help says what the options do', async () => {
      const help = await cli('issuer', 'create', '--help');
      assert.equal(help.code, 0);
      assert.match(help.stdout, /Usage: gatehouse issuer create --issuer <url> --profile id-jag\|workload/);
      assert.match(help.stdout, /--allow-private-address/);
      assert.match(help.stdout, /--subject-claim\nsays how users are found/);
      const all = await cli('--help');
      assert.match(all.stdout, /issuer list/);
      assert.match(all.stdout, /client create .*\n.*jwt_bearer/);
    });
  });
}
