/**
 * Switching clients and people off and on from the command line (SPEC §2, §4.16), run as an
 * operator runs it against a database a real server shares, on both backends: `client
 * disable|enable` for every kind of client (refused like a blocked one, everything issued to
 * it revoked; enabled again, it gets new tokens and the old ones stay dead), `client update`,
 * `user enable`, `user delete` (everything revoked or removed, back-channel logouts still
 * delivered, the audit trail kept, the username free again), and `gatehouse --version`.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import type { Kysely } from 'kysely';
import * as oauth from 'oauth4webapi';
import { createConnection } from '../src/accounts/connections/connections.ts';
import { COMMAND_LINE } from '../src/audit.ts';
import { decodeJwt } from 'jose';
import { startReceiver, type Receiver } from './support/backchannel.ts';
import { BACKENDS, backendOptions } from './support/backends.ts';
import { serveMetadataDocument, type MetadataDocument } from './support/metadata-document.ts';
import { authorizationUrl, discover, insecure, obtainTokens, refreshRequest, tokenResult, type App } from './support/oauth-client.ts';
import { databaseUrl, gatehouse, type Run } from './support/processes.ts';
import { PASSWORD, startServer, type TestServer } from './support/server.ts';
import { testCaProblem } from './support/tls.ts';
import { assertDead } from './support/token-checks.ts';
import { UserAgent } from './support/user-agent.ts';
import { outlastClientCache, until } from './support/waits.ts';

const REDIRECT_URI = 'http://127.0.0.1:51004/callback'; // any port of the loopback redirect URLs below

/** Succeeded, printing one JSON document. */
function json(run: Run): unknown {
  assert.equal(run.code, 0, `exit ${run.code}: ${run.stderr}`);
  return JSON.parse(run.stdout);
}

/** Exit 2 with one line on stderr matching `message`, printing nothing else. */
function refused(run: Run, message: RegExp): void {
  assert.deepEqual([run.code, run.stdout, run.stderr.trimEnd().split('\n').length], [2, '', 1], run.stderr);
  assert.match(run.stderr.trimEnd(), message);
}

test('gatehouse --version prints the version of the package, and --help names it', async () => {
  const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };
  const printed = await gatehouse(['--version'], {});
  assert.deepEqual([printed.code, printed.stdout, printed.stderr], [0, `${version}\n`, '']);
  const help = await gatehouse(['--help'], {});
  assert.match(help.stdout, /--version {2}print the version of Gatehouse/);
  for (const command of [
    'user enable <username>',
    'user delete <username>',
    'client update <client_id>',
    'client disable <client_id>',
    'client enable <client_id>',
  ])
    assert.ok(help.stdout.includes(command), command);
});

describe('switching clients and people off and on', { skip: testCaProblem() ?? false }, () => {
  let document: MetadataDocument;
  before(async () => {
    document = await serveMetadataDocument('Switchable Notes');
  });
  after(() => document?.close());

  for (const backend of BACKENDS) {
    describe(`(${backend.name})`, backendOptions(backend), () => {
      let server: TestServer;
      let env: Record<string, string>;
      /** The resource server's introspection client: a confidential client of its own. */
      let introspector: App;
      const cli = (...args: string[]) => gatehouse(args, env, `${PASSWORD}\n`);
      const audited = async (type: string, about: { clientId?: string; userId?: string }) =>
        server.store.db
          .selectFrom('audit_events')
          .selectAll()
          .where('type', '=', type)
          .$if(about.clientId !== undefined, (q) => q.where('client_id', '=', about.clientId!))
          .$if(about.userId !== undefined, (q) => q.where('user_id', '=', about.userId!))
          .execute();
      const introspect = async (token: string) =>
        oauth.processIntrospectionResponse(
          introspector.as,
          introspector.client,
          await oauth.introspectionRequest(introspector.as, introspector.client, introspector.auth, token, insecure),
        );

      before(async () => {
        server = await startServer(backend, { CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES: 'true', DYNAMIC_CLIENT_REGISTRATION: 'true' });
        env = { DATABASE_URL: databaseUrl(server.config), PUBLIC_URL: server.url };
        await server.createUser('root', { admin: true });
        await server.createUser('alice');
        const resource = await server.createClient({ name: 'Annotation API', grantType: 'client_credentials', redirectUris: [], confidential: true });
        introspector = await discover(server, resource.client.id, { secret: resource.secret });
      });
      after(() => server?.close());

      test('client disable refuses a client of every kind and revokes what it holds; client enable lets it get new tokens, the old ones stay dead', async () => {
        const registered = (await server.createClient({ name: 'Registered Notes', redirectUris: [REDIRECT_URI] })).client.id;
        const registration = await fetch(new URL('/oauth/register', server.url), {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ client_name: 'Dynamic Notes', redirect_uris: ['http://127.0.0.1/callback'] }),
        });
        const dynamic = ((await registration.json()) as { client_id: string }).client_id;
        const agent = new UserAgent(server.url);
        const apps: Record<string, App> = {};
        for (const clientId of [registered, dynamic, document.url]) apps[clientId] = await discover(server, clientId, { redirectUri: REDIRECT_URI });
        // Tokens for each, while they are enabled (the metadata document's client is recorded by the approval). One after
        // another: the agent is one browser, and a login in one tab replaces the session another tab's consent form was for.
        const held: Record<string, Awaited<ReturnType<typeof obtainTokens>>> = {};
        for (const [id, app] of Object.entries(apps)) held[id] = await obtainTokens(app, agent, 'alice');

        for (const clientId of Object.keys(apps))
          assert.deepEqual(json(await cli('client', 'disable', clientId, '--json')), { client_id: clientId, disabled: true });
        assert.match((await cli('client', 'disable', registered)).stdout, /^Client .* is already disabled\.$/m);
        const listed = json(await cli('client', 'list', '--json')) as Array<{ client_id: string; disabled: boolean }>;
        assert.deepEqual(
          listed.filter((c) => c.client_id in apps).map((c) => c.disabled),
          [true, true, true],
        );
        assert.match((await cli('client', 'list')).stdout, new RegExp(`^${registered}\\tRegistered Notes\\t.*\\tdisabled$`, 'm'));
        await outlastClientCache(); // on SQLite no message reaches the server from the command line

        for (const [clientId, app] of Object.entries(apps)) {
          const tokens = held[clientId]!;
          // The token endpoint refuses the client as it refuses a blocked one, and the resource server learns the tokens are dead.
          await assertDead({ server, app }, [tokens], [401, 'invalid_client']);
          assert.deepEqual(await introspect(tokens.access_token), { active: false }, `${clientId}: the access token introspects inactive`);
          assert.deepEqual(await introspect(tokens.refresh_token!), { active: false });
          // A new authorization request is refused on the error page, never redirected.
          const asked = await agent.visit((await authorizationUrl(app)).url.href);
          assert.equal(asked.response.status, 400, clientId);
          assert.equal(asked.redirect, null);
          assert.match(
            asked.html,
            clientId === document.url ? /its client ID metadata document was refused/ : /an administrator has disabled this application/,
          );
          assert.equal((await audited('client_disabled', { clientId })).length, 1, 'audited once');
        }

        for (const clientId of Object.keys(apps))
          assert.deepEqual(json(await cli('client', 'enable', clientId, '--json')), { client_id: clientId, disabled: false });
        assert.match((await cli('client', 'enable', registered)).stdout, /is already enabled\.$/m);
        await outlastClientCache();
        for (const [clientId, app] of Object.entries(apps)) {
          const fresh = await obtainTokens(app, agent, 'alice');
          assert.equal((await introspect(fresh.access_token)).active, true, `${clientId} gets new tokens`);
          assert.equal((await tokenResult(await refreshRequest(app, fresh.refresh_token!))).status, 200);
          // What was revoked stays revoked: the client is known again, the old grant is not.
          await assertDead({ server, app }, [held[clientId]!], [400, 'invalid_grant']);
          assert.deepEqual(await introspect(held[clientId]!.access_token), { active: false });
          assert.equal((await audited('client_enabled', { clientId })).length, 1);
        }
        refused(
          await cli('client', 'disable', 'https://unknown.example/client.json'),
          /^gatehouse: no client with id https:\/\/unknown\.example\/client\.json$/,
        );
        refused(await cli('client', 'enable', 'not-a-client'), /^gatehouse: no client with id not-a-client$/);
      });

      test('client update changes what the edit form changes, keeps what is not given, refuses what it cannot change', async () => {
        const { client } = await server.createClient({ name: 'Editable', redirectUris: [REDIRECT_URI], scope: 'annotation:read annotation:write' });
        const app = await discover(server, client.id, { redirectUri: REDIRECT_URI });
        const writing = await obtainTokens(app, new UserAgent(server.url), 'alice');
        const updated = json(
          await cli(
            'client',
            'update',
            client.id,
            '--name',
            'Edited',
            '--redirect-uri',
            REDIRECT_URI,
            '--redirect-uri',
            'https://edited.example/cb',
            '--scope',
            'annotation:read openid',
            '--trusted',
            '--backchannel-logout-uri',
            'https://edited.example/logout',
            '--id-token-alg',
            'ES256',
            '--json',
          ),
        ) as Record<string, unknown>;
        assert.deepEqual(
          [
            updated.name,
            updated.redirect_uris,
            updated.scopes,
            updated.trusted,
            updated.require_pkce,
            updated.backchannel_logout_uri,
            updated.id_token_signed_response_alg,
          ],
          ['Edited', [REDIRECT_URI, 'https://edited.example/cb'], ['annotation:read', 'openid'], true, false, 'https://edited.example/logout', 'ES256'],
        );
        await outlastClientCache();
        assert.deepEqual(await introspect(writing.access_token), { active: false }, 'taking a scope away revokes the grants holding it');
        assert.equal((await audited('client_updated', { clientId: client.id })).length, 1);

        const kept = json(await cli('client', 'update', client.id, '--no-trusted', '--backchannel-logout-uri', '', '--json')) as Record<string, unknown>;
        assert.deepEqual([kept.name, kept.trusted, kept.backchannel_logout_uri, kept.scopes], ['Edited', false, null, ['annotation:read', 'openid']]);
        assert.match((await cli('client', 'update', client.id, '--name', 'Plain text')).stdout, /^Updated client "Plain text" \(.*\)\.$/m);

        refused(await cli('client', 'update', client.id), /^gatehouse: nothing to change: give --name/);
        refused(await cli('client', 'update', client.id, '--grant-type', 'client_credentials'), /^gatehouse: --grant-type cannot be changed/);
        refused(await cli('client', 'update', client.id, '--confidential'), /^gatehouse: --confidential cannot be changed/);
        refused(await cli('client', 'update', client.id, '--redirect-uri', 'not a url'), /^gatehouse: Redirect URL/);
        refused(await cli('client', 'update', client.id, '--scope', 'no-such-scope'), /^gatehouse: Unknown scope "no-such-scope"/);
        refused(await cli('client', 'update', client.id, '--jwks-uri', 'https://keys.example/jwks.json'), /Only a client registered with keys/);
        refused(
          await cli('client', 'update', document.url, '--name', 'X'),
          /only clients an administrator registered can be edited: disable or block this one instead/,
        );
        refused(await cli('client', 'update', 'https://unknown.example/c.json', '--name', 'X'), /^gatehouse: no client with id/);
        const after = json(await cli('client', 'list', '--json')) as Array<{ client_id: string; name: string }>;
        assert.equal(after.find((c) => c.client_id === client.id)!.name, 'Plain text', 'a refused update changes nothing');
      });

      test('user enable lets a disabled person log in again', async () => {
        await server.createUser('carol');
        json(await cli('user', 'disable', 'carol', '--json'));
        assert.notEqual((await new UserAgent(server.url).login('carol')).response.status, 200, 'a disabled person cannot log in');
        assert.deepEqual(json(await cli('user', 'enable', 'carol', '--json')), { username: 'carol', disabled: false });
        assert.equal((await new UserAgent(server.url).login('carol')).response.status, 200, 'enabled, she logs in');
        assert.match((await cli('user', 'enable', 'carol')).stdout, /^carol is already enabled\.$/m);
        const carol = (json(await cli('user', 'list', '--json')) as Array<{ username: string; disabled: boolean }>).find((u) => u.username === 'carol')!;
        assert.equal(carol.disabled, false);
        const user = await server.store.db.selectFrom('users').select('id').where('username', '=', 'carol').executeTakeFirstOrThrow();
        assert.equal((await audited('user_enabled', { userId: user.id })).length, 1, 'audited once');
        refused(await cli('user', 'enable', 'nobody'), /^gatehouse: no user named nobody$/);
      });

      test('user delete revokes and removes everything of the person, delivers their back-channel logouts, keeps the audit trail, frees the username', async () => {
        let receiver: Receiver | undefined;
        try {
          receiver = await startReceiver();
          await server.createUser('dave');
          const { client } = await server.createClient({
            name: 'Logout Notes',
            redirectUris: [REDIRECT_URI],
            scope: 'openid annotation:read',
            backchannelLogoutUri: receiver.url,
          });
          const app = await discover(server, client.id, { redirectUri: REDIRECT_URI });
          const agent = new UserAgent(server.url);
          const tokens = await obtainTokens(app, agent, 'dave', { scope: 'openid annotation:read' });
          const sid = oauth.getValidatedIdTokenClaims(tokens)!.sid as string;
          const dave = await server.store.db.selectFrom('users').selectAll().where('username', '=', 'dave').executeTakeFirstOrThrow();
          // Factors, an identity at a connection and a group membership, written as their own code writes them.
          const now = Date.now();
          await server.store.db
            .insertInto('passkeys')
            .values({
              id: 'cred-dave',
              user_id: dave.id,
              public_key: 'key',
              sign_count: 0,
              transports: '[]',
              name: 'Laptop',
              created_at: now,
              last_used_at: null,
            })
            .execute();
          await server.store.db.insertInto('recovery_codes').values({ user_id: dave.id, code_hash: 'hash-dave', created_at: now }).execute();
          await server.store.db
            .insertInto('authenticator_apps')
            .values({ user_id: dave.id, secret: 'JBSWY3DPEHPK3PXP', encrypted: 0, created_at: now, confirmed_at: now, last_step: null, expires_at: null })
            .execute();
          const connection = await createConnection(
            server.app.gatehouse,
            { name: 'GitHub', preset: 'github', clientId: 'Iv1.0123456789abcdef', clientSecret: 's' },
            COMMAND_LINE,
          );
          await server.store.db
            .insertInto('user_identities')
            .values({ connection_id: connection.id, subject: '1013', user_id: dave.id, email: null, groups: '[]', created_at: now, last_login_at: now })
            .execute();
          json(await cli('group', 'create', 'writers', '--json'));
          json(await cli('group', 'add', 'writers', 'dave', '--json'));

          refused(await cli('user', 'delete', 'root'), /^gatehouse: root is the last administrator: make another person an administrator first$/);
          refused(await cli('user', 'delete', 'nobody'), /^gatehouse: no user named nobody$/);
          refused(await cli('user', 'delete'), /^gatehouse: name exactly one user$/);

          assert.deepEqual(json(await cli('user', 'delete', 'dave', '--json')), { username: 'dave', id: dave.id, deleted: true });
          await outlastClientCache();
          await assertDead({ server, app }, [tokens], [400, 'invalid_grant']);
          assert.deepEqual(await introspect(tokens.access_token), { active: false });
          assert.equal((await agent.visit('/account/security')).redirect, null);
          assert.match((await agent.visit('/account/security')).html, /action="\/login"/, 'their session ended');

          // The running server delivers the logout of the session that ended, though the person is gone.
          await until('the back-channel logout is delivered', () => receiver!.tokens.length === 1);
          const logout = decodeJwt(receiver.tokens[0]!);
          assert.deepEqual([logout.sub, logout.sid, logout.aud], [`acct:dave@127.0.0.1`, sid, client.id]);

          const left: Record<string, number> = {};
          for (const table of [
            'users',
            'sessions',
            'grants',
            'consents',
            'passkeys',
            'recovery_codes',
            'authenticator_apps',
            'user_identities',
            'group_members',
            'auth_codes',
          ] as const) {
            const column = table === 'users' ? 'id' : 'user_id';
            // Kysely cannot type a query over a table chosen by a variable; each has this column.
            const rows = (await (server.store.db as Kysely<any>)
              .selectFrom(table)
              .select((eb) => eb.fn.countAll<number>().as('n'))
              .where(column, '=', dave.id)
              .executeTakeFirstOrThrow()) as { n: number };
            left[table] = Number(rows.n);
          }
          assert.deepEqual(
            Object.values(left).filter((n) => n > 0),
            [],
            `rows left: ${JSON.stringify(left)}`,
          );
          // The audit trail keeps the person's id, and the event of the deletion names who it was.
          const trail = await audited('token_issued', { userId: dave.id });
          assert.equal(trail.length, 1, 'their earlier events are kept');
          const [deleted] = await audited('user_deleted', { userId: dave.id });
          assert.deepEqual(JSON.parse(deleted!.detail!), { username: 'dave' });
          // `audit --user` takes the id of a person who is gone: their events before and after the deletion.
          await until('the delivery is audited', async () => (await audited('backchannel_logout_delivered', { userId: dave.id })).length === 1);
          const theirs = json(await cli('audit', '--user', dave.id, '--json')) as Array<{ type: string; user_id: string; username: string | null }>;
          assert.ok(theirs.every((e) => e.user_id === dave.id && e.username === null));
          const types = new Set(theirs.map((e) => e.type));
          for (const type of ['token_issued', 'user_deleted', 'backchannel_logout_delivered']) assert.ok(types.has(type), type);

          // The username is free again: a new person, a new id, nothing of the old one.
          const again = json(await cli('user', 'create', 'dave', '--email', 'dave@example.com', '--password-stdin', '--json')) as { id: string };
          assert.notEqual(again.id, dave.id);
          assert.equal((await new UserAgent(server.url).login('dave')).response.status, 200);
          assert.deepEqual(json(await cli('group', 'list', '--json')), [{ name: 'writers', members: [] }]);
        } finally {
          receiver?.close();
        }
      });
    });
  }
});
