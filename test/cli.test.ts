/**
 * The `gatehouse` command line (SPEC §2), run as an operator runs it: the real command in a
 * child process, with DATABASE_URL pointing at a database that a real server shares, so
 * what the commands do is checked where users notice it — logins, tokens, sessions.
 *
 * Within a backend the tests read as one operator session: the users and clients the first
 * commands create are the ones the later commands disable and delete.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import * as oauth from 'oauth4webapi';
import { migrate, openStore } from '../src/store/database.ts';
import { loadConfig, parseDatabaseUrl } from '../src/config.ts';
import { BACKENDS, backendOptions } from './support/backends.ts';
import { discover, insecure, obtainCode, obtainTokens, profile, refresh } from './support/oauth-client.ts';
import { PASSWORD, startServer, type TestServer } from './support/server.ts';
import { assertPollError, requestCodes } from './support/device.ts';
import { assertDead, assertWorks } from './support/token-checks.ts';
import { UserAgent } from './support/user-agent.ts';
import { outlastClientCache } from './support/waits.ts';

const MAIN = fileURLToPath(new URL('../bin/gatehouse.js', import.meta.url));
const REDIRECT_URI = 'http://127.0.0.1:8765/callback';

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `gatehouse …` with only the given settings in its environment, feeding `input` to stdin. */
function gatehouse(args: string[], env: Record<string, string>, input = ''): Promise<Run> {
  return new Promise((resolve, reject) => {
    // The timeout stops a command that wrongly goes on to serve instead of failing.
    const child = spawn(process.execPath, [MAIN, ...args], { env: { PATH: process.env.PATH, ...env }, timeout: 30_000 });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => (stdout += chunk));
    child.stderr.on('data', (chunk) => (stderr += chunk));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
    child.stdin.end(input);
  });
}

/** It succeeded and printed one JSON document. */
function json(run: Run): unknown {
  assert.equal(run.code, 0, `exit ${run.code}: ${run.stderr}`);
  return JSON.parse(run.stdout);
}

/** It failed, printing nothing on stdout and one line on stderr matching `message`. */
function assertRefused(run: Run, message: RegExp): void {
  assert.notEqual(run.code, 0);
  assert.equal(run.stdout, '');
  assert.equal(run.stderr.trimEnd().split('\n').length, 1, `more than one line on stderr:\n${run.stderr}`);
  assert.match(run.stderr, message);
}

describe('the command line, before any database', () => {
  test('--help prints the usage of every command', async () => {
    const run = await gatehouse(['--help'], {});
    assert.equal(run.code, 0);
    assert.match(run.stdout, /^Usage: gatehouse <command>/);
    for (const command of [
      'serve',
      'migrate',
      'user create',
      'user list',
      'user disable',
      'user set-password',
      'client create',
      'client list',
      'client delete',
      'purge',
    ]) {
      assert.ok(run.stdout.includes(command), `--help does not mention "${command}"`);
    }
  });

  test('--help lists every setting config.ts reads, each with what it is', async () => {
    // The names loadConfig reads, recorded as it reads them: not a list kept here that could fall behind.
    const read = new Set<string>();
    const recording = new Proxy(
      {},
      {
        get: (_, name) => {
          if (typeof name === 'string') read.add(name);
          return undefined;
        },
      },
    );
    loadConfig(recording);
    assert.ok(read.size >= 35, `only ${read.size} settings read`);
    const run = await gatehouse(['--help'], {});
    assert.equal(run.code, 0);
    for (const name of read) assert.match(run.stdout, new RegExp(`^ {2}${name} +\\S.{10,}$`, 'm'), `--help does not list ${name} with what it is`);
  });

  test('a mistyped command is refused with one line, before any database is opened', async () => {
    const directory = await mkdtemp(join(tmpdir(), 'gatehouse-cli-'));
    try {
      const env = { DATABASE_URL: `sqlite:${join(directory, 'gatehouse.db')}` };
      // Also the names every object has (constructor, toString): a command is not looked up among them.
      for (const words of [['frob'], ['user', 'frob'], ['constructor'], ['toString'], ['user', 'constructor']]) {
        const run = await gatehouse(words, env);
        assert.equal(run.code, 2, `gatehouse ${words.join(' ')}: exit ${run.code}`);
        assertRefused(run, new RegExp(`^gatehouse: unknown command "${words.join(' ')}"; see gatehouse ${words.length > 1 ? `${words[0]} ` : ''}--help`));
      }
      assert.deepEqual(await readdir(directory), []);
    } finally {
      await rm(directory, { recursive: true, force: true });
    }
  });

  test('<command> --help shows that command alone: its usage, help and options', async () => {
    const run = await gatehouse(['user', 'set-password', '--help'], {});
    assert.equal(run.code, 0);
    assert.equal(run.stdout.split('\n')[0], 'Usage: gatehouse user set-password <username> [--password-stdin]');
    assert.match(run.stdout, /also ends the user's sessions/);
    assert.match(run.stdout, /^ {2}--password-stdin {2}read the password from standard input instead of prompting$/m);
    assert.match(run.stdout, /^ {2}--json {12}print machine-readable JSON$/m);
    assert.doesNotMatch(run.stdout, /user create|client/);
  });

  test('a bare noun lists its commands', async () => {
    for (const [args, code] of [
      [['user'], 2],
      [['user', '--help'], 0],
    ] as const) {
      const run = await gatehouse([...args], {});
      assert.equal(run.code, code);
      assert.match(run.stdout, /^Usage: gatehouse user <command>/);
      for (const command of ['user create', 'user list', 'user disable', 'user set-password']) assert.ok(run.stdout.includes(command), `no "${command}"`);
      assert.doesNotMatch(run.stdout, /client create/);
    }
  });

  test('a mistyped option or command gets the closest one, in one line, before any database is opened', async () => {
    const directory = await mkdtemp(join(tmpdir(), 'gatehouse-cli-'));
    try {
      const env = { DATABASE_URL: `sqlite:${join(directory, 'gatehouse.db')}` };
      const option = await gatehouse(['client', 'create', 'App', '--confidentail', '--redirect-uri', REDIRECT_URI], env);
      assert.equal(option.code, 2);
      assertRefused(option, /^gatehouse: unknown option --confidentail for "client create"; did you mean --confidential\?/);
      // An option of another command is not one of this one's.
      assertRefused(
        await gatehouse(['user', 'list', '--email', 'a@example.com'], env),
        /^gatehouse: unknown option --email for "user list"; see gatehouse user list --help/,
      );
      assertRefused(await gatehouse(['usr', 'list'], env), /^gatehouse: unknown command "usr list"; did you mean "user list"\?/);
      assertRefused(await gatehouse(['user', 'crate', 'alice'], env), /^gatehouse: unknown command "user crate"; did you mean "user create"\?/);
      assertRefused(await gatehouse(['migrat'], env), /^gatehouse: unknown command "migrat"; did you mean "migrate"\?/);
      assert.deepEqual(await readdir(directory), []);
    } finally {
      await rm(directory, { recursive: true, force: true });
    }
  });

  test('serve on a busy port says so in one line, naming PORT; with workers the primary stops at once', async () => {
    const directory = await mkdtemp(join(tmpdir(), 'gatehouse-cli-'));
    const busy = createServer();
    await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
    try {
      const port = String((busy.address() as AddressInfo).port);
      const env = { PORT: port, HOST: '127.0.0.1', DATABASE_URL: `sqlite:${join(directory, 'gatehouse.db')}` };
      const busyLine = new RegExp(`^gatehouse: port ${port} is busy .*set PORT to another port$`, 'gm');
      const single = await gatehouse(['serve'], env);
      assertRefused(single, busyLine);
      // The primary also prints the setup link and logs the worker's exit: each worker that tried says the port is busy, and none is restarted.
      const workers = await gatehouse(['serve'], { ...env, WORKERS: '2' });
      assert.notEqual(workers.code, 0);
      assert.ok(workers.stderr.match(busyLine)!.length <= 2, workers.stderr);
      assert.doesNotMatch(workers.stdout + workers.stderr, /starting another|unexpected error|\n\s+at /);
    } finally {
      busy.close();
      await rm(directory, { recursive: true, force: true });
    }
  });

  test('an invalid setting stops start-up with one line naming it', async () => {
    const [port, database] = await Promise.all([
      gatehouse(['serve'], { PORT: 'abc', DATABASE_URL: 'sqlite::memory:' }),
      gatehouse(['serve'], { DATABASE_URL: 'mysql://localhost/gatehouse' }),
    ]);
    assertRefused(port, /^gatehouse: PORT\b.*"abc"/);
    assertRefused(database, /^gatehouse: DATABASE_URL\b/);
  });
});

for (const backend of BACKENDS) {
  describe(`the command line (${backend.name})`, backendOptions(backend), () => {
    let database: { url: string; drop(): Promise<void> };
    let server: TestServer;
    const cli = (args: string[], input?: string) => gatehouse(args, { DATABASE_URL: database.url }, input);
    /** The ids the session's `client create` commands printed. */
    const clients = { public: '', confidential: '' };

    before(async () => {
      database = await backend.create();
      server = await startServer(backend, { DATABASE_URL: database.url });
    });
    after(async () => {
      await server?.close();
      await database?.drop();
    });

    test('migrate sets up a fresh database, and running it again changes nothing', async () => {
      const fresh = await backend.create();
      try {
        const env = { DATABASE_URL: fresh.url };
        assert.deepEqual(json(await gatehouse(['migrate', '--json'], env)), { migrated: true });
        assert.deepEqual(json(await gatehouse(['migrate', '--json'], env)), { migrated: true });
        const store = openStore(parseDatabaseUrl(fresh.url));
        try {
          assert.deepEqual(await migrate(store), [], 'no migration was left to apply');
          const tables = (await store.db.introspection.getTables()).map((t) => t.name);
          for (const table of ['users', 'clients', 'grants', 'access_tokens', 'refresh_tokens']) assert.ok(tables.includes(table), `no ${table} table`);
        } finally {
          await store.close();
        }
      } finally {
        await fresh.drop();
      }
    });

    test('user create takes the password from stdin, and the user can log in with it', async () => {
      const [alice, bob] = await Promise.all([
        cli(['user', 'create', 'alice', '--email', 'alice@example.com', '--admin', '--password-stdin', '--json'], `${PASSWORD}\n`),
        cli(['user', 'create', 'bob', '--email', 'bob@example.com', '--password-stdin', '--json'], `${PASSWORD}\n`),
      ]);
      assert.deepEqual(
        { ...(json(alice) as object), id: '' },
        { id: '', username: 'alice', email: 'alice@example.com', admin: true, display_name: null, email_verified: false },
      );
      assert.equal((json(bob) as { admin: boolean }).admin, false);
      assert.ok(!alice.stdout.includes(PASSWORD) && !alice.stderr.includes(PASSWORD), 'the password is echoed');

      const [list, duplicate] = await Promise.all([
        cli(['user', 'list', '--json']),
        cli(['user', 'create', 'ALICE', '--email', 'other@example.com', '--password-stdin'], `${PASSWORD}\n`),
      ]);
      assert.deepEqual(json(list), [
        { username: 'alice', email: 'alice@example.com', admin: true, disabled: false, display_name: null, email_verified: false, groups: [] },
        { username: 'bob', email: 'bob@example.com', admin: false, disabled: false, display_name: null, email_verified: false, groups: [] },
      ]);
      assertRefused(duplicate, /^gatehouse: username "ALICE" is taken/);

      const login = await new UserAgent(server.url).login('alice');
      assert.equal(login.response.status, 200, 'alice logs in with the password given on stdin');
    });

    test('client create prints the client_id, and the secret of a confidential client once', async () => {
      const [publicClient, confidential] = await Promise.all([
        cli(['client', 'create', '--name', 'Annotator', '--redirect-uri', REDIRECT_URI, '--json']),
        cli(['client', 'create', '--name', 'Indexer', '--grant-type', 'client_credentials', '--confidential', '--scope', 'annotation:read', '--json']),
      ]);
      const created = json(publicClient) as { client_id: string };
      assert.deepEqual(Object.keys(created), ['client_id']);
      const withSecret = json(confidential) as { client_id: string; client_secret: string };
      assert.deepEqual(Object.keys(withSecret).sort(), ['client_id', 'client_secret']);
      clients.public = created.client_id;
      clients.confidential = withSecret.client_id;

      // The secret printed is the one that works.
      const app = await discover(server, withSecret.client_id, { secret: withSecret.client_secret });
      const response = await oauth.clientCredentialsGrantRequest(app.as, app.client, app.auth, {}, insecure);
      const tokens = await oauth.processClientCredentialsResponse(app.as, app.client, response);
      assert.equal(tokens.scope, 'annotation:read');

      const list = await cli(['client', 'list', '--json']);
      assert.ok(!list.stdout.includes(withSecret.client_secret), 'client list shows the secret');
      const listed = (json(list) as Array<Record<string, unknown>>).map((c) => [
        c.name,
        c.client_id,
        c.confidential,
        Object.keys(c).some((key) => /secret/.test(key)),
      ]);
      assert.deepEqual(listed.sort(), [
        ['Annotator', created.client_id, false, false],
        ['Indexer', withSecret.client_id, true, false],
      ]);
    });

    test('client create refuses bad input with one clear line, and registers nothing', async () => {
      const create = (...extra: string[]) => cli(['client', 'create', '--name', 'Broken', '--json', ...extra]);
      const [insecureHost, grantType, scope] = await Promise.all([
        create('--redirect-uri', 'http://example.com/callback'), // plain http is for loopback hosts only
        create('--redirect-uri', REDIRECT_URI, '--grant-type', 'password'),
        create('--redirect-uri', REDIRECT_URI, '--scope', 'annotation:read admin'),
      ]);
      assertRefused(insecureHost, /^gatehouse: Redirect URL /);
      assertRefused(grantType, /^gatehouse: Grant type must be one of authorization_code, client_credentials/);
      assertRefused(scope, /^gatehouse: Unknown scope "admin"/);
      const names = (await server.store.db.selectFrom('clients').select('name').execute()).map((c) => c.name);
      assert.deepEqual(names.sort(), ['Annotator', 'Indexer']);
    });

    test('user disable ends the user’s sessions and kills their tokens', async () => {
      const app = await discover(server, clients.public);
      const agent = new UserAgent(server.url);
      const tokens = await obtainTokens(app, agent, 'bob');
      assert.equal((await agent.fetch('/')).status, 200, 'bob is logged in');
      assert.equal((await profile(server, tokens.access_token)).status, 200);

      assert.deepEqual(json(await cli(['user', 'disable', 'bob', '--json'])), { username: 'bob', disabled: true });
      await assertDead({ server, app }, [tokens]);
      const home = await agent.fetch('/');
      assert.equal(home.status, 302);
      assert.equal(home.headers.get('location'), '/login', 'the session has ended');
      assert.equal((await new UserAgent(server.url).login('bob')).response.status, 401, 'a disabled user cannot log in');
    });

    test('client delete revokes everything issued to the client', async () => {
      const app = await discover(server, clients.public);
      const tokens = await obtainTokens(app, new UserAgent(server.url), 'alice');
      const refreshed = await refresh(app, tokens.refresh_token!);

      assert.deepEqual(json(await cli(['client', 'delete', clients.public, '--json'])), { client_id: clients.public, deleted: true });
      // The client is gone, so its refresh tokens fail client authentication first, once the
      // server's copy of the client has expired (on SQLite no message reaches it from the CLI).
      // Until then they are refused as unknown (test/security/client-cache.test.ts).
      await outlastClientCache();
      await assertDead({ server, app }, [tokens, refreshed], [401, 'invalid_client']);
      const [list, again] = await Promise.all([cli(['client', 'list', '--json']), cli(['client', 'delete', clients.public])]);
      assert.deepEqual(
        (json(list) as Array<{ client_id: string }>).map((c) => c.client_id),
        [clients.confidential],
      );
      assertRefused(again, /^gatehouse: no client with id /);
    });

    test('purge deletes expired codes, tokens, sessions and consents, and nothing live', async () => {
      // Separate applications, so that the live authorization does not renew the old consent.
      const [old, current] = await Promise.all([server.createClient({ name: 'Old' }), server.createClient({ name: 'Current' })]);
      const oldApp = await discover(server, old.client.id);
      const app = await discover(server, current.client.id);
      // Rows made two years ago have all expired by the real clock `purge` goes by.
      server.advance(-2 * 365 * 86_400);
      const past = new UserAgent(server.url);
      const stale = await obtainTokens(oldApp, past, 'alice');
      await refresh(oldApp, stale.refresh_token!); // a rotated token with a sealed successor pair
      await obtainCode(oldApp, past); // a code never exchanged
      server.advance(2 * 365 * 86_400);
      const live = await obtainTokens(app, new UserAgent(server.url), 'alice');

      const counts = json(await cli(['purge', '--json'])) as Record<string, number>;
      for (const table of ['auth_codes', 'access_tokens', 'refresh_tokens', 'grants', 'sessions', 'consents']) {
        assert.ok(counts[table]! > 0, `nothing purged from ${table}`);
        const expired = await server.store.db
          .selectFrom(table as 'grants')
          .select((eb) => eb.fn.countAll<number>().as('n'))
          .where('expires_at', '<=', Date.now())
          .executeTakeFirstOrThrow();
        assert.equal(Number(expired.n), 0, `expired rows left in ${table}`);
      }
      await assertWorks({ server, app }, live);
    });

    test('client create --grant-type device_code registers a device client without a redirect URL; purge takes expired device codes', async () => {
      const created = json(await cli(['client', 'create', '--name', 'Kitchen TV', '--grant-type', 'device_code', '--json'])) as { client_id: string };
      const listed = (json(await cli(['client', 'list', '--json'])) as Array<{ client_id: string; grant_type: string; redirect_uris: string[] }>).find(
        (c) => c.client_id === created.client_id,
      );
      assert.deepEqual([listed?.grant_type, listed?.redirect_uris], ['urn:ietf:params:oauth:grant-type:device_code', []]);
      const app = await discover(server, created.client_id);
      server.advance(-2 * 365 * 86_400);
      const stale = await requestCodes(app);
      server.advance(2 * 365 * 86_400);
      const live = await requestCodes(app);
      const counts = json(await cli(['purge', '--json'])) as Record<string, number>;
      assert.ok(counts.device_codes! > 0, 'nothing purged from device_codes');
      server.advance(5);
      await assertPollError(app, stale.device_code, 'invalid_grant');
      await assertPollError(app, live.device_code, 'authorization_pending');
    });
  });
}
