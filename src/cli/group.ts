/** `gatehouse group …`: create, delete and list groups, add and remove their members. */
import { addMember, allGroups, createGroup, removeGroup, removeMember } from '../accounts/groups.ts';
import { findUserNamed } from '../accounts/users.ts';
import { COMMAND_LINE } from '../audit.ts';
import { UsageError, command, noArguments, oneArgument, usageError, type Command } from './command.ts';

const create: Command = command({
  words: 'group create',
  usage: '<name>',
  help: 'a name of letters, digits and punctuation, without spaces, quotes or backslashes',
  async run(ctx, args, _options, print) {
    const name = oneArgument(create, args);
    await createGroup(ctx, name, COMMAND_LINE);
    print({ name, created: true }, `Created group ${name}.`);
    return 0;
  },
});

const remove: Command = command({
  words: 'group delete',
  usage: '<name>',
  async run(ctx, args, _options, print) {
    const name = oneArgument(remove, args);
    await removeGroup(ctx, name, COMMAND_LINE);
    print({ name, deleted: true }, `Deleted group ${name}.`);
    return 0;
  },
});

/** `group add` and `group remove`: the group and the user come as arguments. */
function memberCommand(action: 'add' | 'remove', perform: typeof addMember, done: (username: string, name: string) => string): Command {
  const self: Command = command({
    words: `group ${action}`,
    usage: '<name> <username>',
    async run(ctx, args, _options, print) {
      const [name, username, ...extra] = args;
      if (name === undefined || username === undefined || extra.length > 0) throw usageError(self);
      const user = await findUserNamed(ctx, username);
      if (!user) throw new UsageError(`no user named ${username}`);
      await perform(ctx, name, user, COMMAND_LINE);
      print({ name, username: user.username, member: action === 'add' }, done(user.username, name));
      return 0;
    },
  });
  return self;
}

const add = memberCommand('add', addMember, (username, name) => `Added ${username} to group ${name}.`);
const removeFrom = memberCommand('remove', removeMember, (username, name) => `Removed ${username} from group ${name}.`);

const list = command({
  words: 'group list',
  async run(ctx, args, _options, print) {
    noArguments(args);
    const groups = (await allGroups(ctx)).map((g) => ({ name: g.name, members: g.members.map((m) => m.username) }));
    print(groups, groups.map((g) => `${g.name}\t${g.members.join(' ') || '(no members)'}`).join('\n') || 'No groups.');
    return 0;
  },
});

export const GROUP_COMMANDS: readonly Command[] = [create, list, add, removeFrom, remove];
