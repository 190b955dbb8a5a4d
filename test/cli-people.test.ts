/**
 * `gatehouse user create|update` with display names and verified e-mail, and `gatehouse
 * group …` (SPEC §2), run as an operator runs them on a database a real server shares: what
 * they print, what `user list` and `group list` show afterwards, what they refuse (one clear
 * line, exit 2, nothing changed), and the audit trail they leave.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { BACKENDS, backendOptions } from './support/backends.ts';
import { databaseUrl, gatehouse, type Run } from './support/processes.ts';
import { PASSWORD, startServer, type TestServer } from './support/server.ts';
import { UserAgent } from './support/user-agent.ts';

/** Succeeded, printing one JSON document. */
function printed(run: Run): unknown {
  assert.equal(run.code, 0, `exit ${run.code}: ${run.stderr}`);
  return JSON.parse(run.stdout);
}

/** Exit 2 with one line on stderr matching `message`, printing nothing else. */
function refused(run: Run, message: RegExp): void {
  assert.deepEqual([run.code, run.stdout, run.stderr.trimEnd().split('\n').length], [2, '', 1], run.stderr);
  assert.match(run.stderr.trimEnd(), message);
}

interface Listed {
  username: string;
  email: string;
  display_name: string | null;
  email_verified: boolean;
  groups: string[];
}

for (const backend of BACKENDS) {
  describe(`gatehouse user update and group (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    const cli = (...args: string[]) => gatehouse(args, { DATABASE_URL: databaseUrl(server.config), PUBLIC_URL: server.url }, `${PASSWORD}\n`);
    const listed = async (username: string) => (printed(await cli('user', 'list', '--json')) as Listed[]).find((u) => u.username === username)!;

    before(async () => {
      server = await startServer(backend);
      await server.createUser('bob');
    });
    after(() => server?.close());

    test('user create takes a display name and a verified flag; user list shows them, and text output too', async () => {
      const created = printed(
        await cli(
          'user',
          'create',
          'alice',
          '--email',
          'alice@example.com',
          '--name',
          '  Alice\u00A0 Liddell ',
          '--email-verified',
          '--password-stdin',
          '--json',
        ),
      );
      assert.deepEqual(
        { ...(created as object), id: '' },
        {
          id: '',
          username: 'alice',
          email: 'alice@example.com',
          admin: false,
          display_name: 'Alice Liddell',
          email_verified: true,
        },
      );
      assert.deepEqual(await listed('alice'), {
        username: 'alice',
        email: 'alice@example.com',
        admin: false,
        disabled: false,
        display_name: 'Alice Liddell',
        email_verified: true,
        groups: [],
      });
      assert.match((await cli('user', 'list')).stdout, /^alice\talice@example\.com \(verified\)\tAlice Liddell$/m);
      assert.equal((await new UserAgent(server.url).login('alice')).response.status, 200, 'alice logs in');
    });

    test('user update changes the name; a new --email clears the verified flag unless --email-verified comes with it', async () => {
      assert.deepEqual(printed(await cli('user', 'update', 'alice', '--name', 'Alice L.', '--json')), {
        username: 'alice',
        email: 'alice@example.com',
        display_name: 'Alice L.',
        email_verified: true,
      });
      const moved = printed(await cli('user', 'update', 'alice', '--email', 'alice@new.example', '--json')) as Listed;
      assert.deepEqual([moved.email, moved.email_verified], ['alice@new.example', false]);
      assert.equal((await listed('alice')).email_verified, false);

      const vouched = printed(await cli('user', 'update', 'alice', '--email', 'alice@other.example', '--email-verified', '--json')) as Listed;
      assert.deepEqual([vouched.email, vouched.email_verified], ['alice@other.example', true]);
      assert.equal((await new UserAgent(server.url).login('alice@other.example')).response.status, 200, 'she logs in with the new address');

      const unverified = printed(await cli('user', 'update', 'alice', '--no-email-verified', '--name', '', '--json')) as Listed;
      assert.deepEqual([unverified.email_verified, unverified.display_name], [false, null]);
      assert.match((await cli('user', 'update', 'alice', '--email-verified')).stdout, /^Updated alice: no display name, alice@other\.example \(verified\)\.$/m);
    });

    test('user update refuses bad input with one line and changes nothing', async () => {
      const before = await listed('alice');
      refused(await cli('user', 'update', 'alice'), /^gatehouse: nothing to change: give --name, --email/);
      refused(await cli('user', 'update', 'nobody', '--name', 'X'), /^gatehouse: no user named nobody$/);
      refused(await cli('user', 'update', 'alice', '--email', 'not-an-address'), /^gatehouse: email must be an email address$/);
      refused(await cli('user', 'update', 'alice', '--email', 'BOB@example.com', '--email-verified'), /belongs to another account/);
      refused(await cli('user', 'update', 'alice', '--name', 'Ali\u200Bce'), /display name must not hold control, format or invisible characters/);
      refused(await cli('user', 'update', 'alice', '--name', 'x'.repeat(201)), /display name must be 1-200 characters/);
      refused(await cli('user', 'create', 'carol', '--email', 'carol@example.com', '--name', 'a\u202Eb', '--password-stdin'), /display name must not hold/);
      assert.deepEqual(await listed('alice'), before);
      assert.equal((printed(await cli('user', 'list', '--json')) as Listed[]).length, 2, 'carol was not created');
    });

    test('groups: create, add, list (text and --json), remove, delete; user list names each user’s groups', async () => {
      for (const name of ['editors', 'ops:on-call', "o'<b>&"]) printed(await cli('group', 'create', name, '--json'));
      printed(await cli('group', 'add', 'editors', 'alice', '--json'));
      printed(await cli('group', 'add', 'editors', 'BOB', '--json'));
      printed(await cli('group', 'add', 'ops:on-call', 'alice', '--json'));
      assert.deepEqual(printed(await cli('group', 'list', '--json')), [
        { name: 'editors', members: ['alice', 'bob'] },
        { name: "o'<b>&", members: [] },
        { name: 'ops:on-call', members: ['alice'] },
      ]);
      assert.equal((await cli('group', 'list')).stdout, "editors\talice bob\no'<b>&\t(no members)\nops:on-call\talice\n");
      assert.deepEqual((await listed('alice')).groups, ['editors', 'ops:on-call']);

      assert.deepEqual(printed(await cli('group', 'remove', 'editors', 'bob', '--json')), { name: 'editors', username: 'bob', member: false });
      assert.deepEqual(printed(await cli('group', 'delete', 'ops:on-call', '--json')), { name: 'ops:on-call', deleted: true });
      assert.deepEqual(printed(await cli('group', 'list', '--json')), [
        { name: 'editors', members: ['alice'] },
        { name: "o'<b>&", members: [] },
      ]);
      assert.deepEqual((await listed('alice')).groups, ['editors'], 'deleting a group takes it from its members');
    });

    test('group commands refuse bad input with one line and change nothing', async () => {
      const before = printed(await cli('group', 'list', '--json'));
      refused(await cli('group', 'create', 'two words'), /^gatehouse: group name must be 1-100 characters, without spaces/);
      refused(await cli('group', 'create', 'say"hi'), /group name must be/);
      refused(await cli('group', 'create', 'back\\slash'), /group name must be/);
      refused(await cli('group', 'create', 'g'.repeat(101)), /group name must be/);
      refused(await cli('group', 'create', ''), /group name must be/);
      refused(await cli('group', 'create', 'editors'), /^gatehouse: group "editors" exists already$/);
      refused(await cli('group', 'create'), /^gatehouse: usage: gatehouse group create <name>$/);
      refused(await cli('group', 'add', 'editors', 'nobody'), /^gatehouse: no user named nobody$/);
      refused(await cli('group', 'add', 'nothing', 'alice'), /^gatehouse: there is no group named "nothing"$/);
      refused(await cli('group', 'add', 'editors', 'alice'), /^gatehouse: alice is in group "editors" already$/);
      refused(await cli('group', 'add', 'editors'), /^gatehouse: usage: gatehouse group add <name> <username>$/);
      refused(await cli('group', 'remove', 'editors', 'bob'), /^gatehouse: bob is not in group "editors"$/);
      refused(await cli('group', 'delete', 'nothing'), /^gatehouse: there is no group named "nothing"$/);
      refused(await cli('group', 'list', 'extra'), /unexpected argument "extra"/);
      assert.deepEqual(printed(await cli('group', 'list', '--json')), before);
    });

    test('every change is in the audit trail, naming what changed but no values', async () => {
      const events = printed(await cli('audit', '--json', '--limit', '100')) as Array<{
        type: string;
        username: string | null;
        detail: Record<string, unknown> | null;
      }>;
      const of = (type: string) => events.filter((e) => e.type === type);
      assert.equal(of('group_created').length, 3);
      assert.deepEqual(
        of('group_member_added').map((e) => e.detail),
        [{ group: 'ops:on-call' }, { group: 'editors' }, { group: 'editors' }],
      );
      assert.deepEqual(
        of('group_member_removed').map((e) => e.detail),
        [{ group: 'editors' }],
      );
      assert.deepEqual(
        of('group_deleted').map((e) => e.detail),
        [{ group: 'ops:on-call' }],
      );
      const updates = of('user_updated');
      assert.deepEqual(
        updates.map((e) => e.detail!.changed),
        ['email_verified', 'display_name email_verified', 'email email_verified', 'email email_verified', 'display_name'],
      );
      assert.ok(!JSON.stringify(updates).includes('alice@'), 'no address in the trail');
    });
  });
}
