/** `gatehouse user …`: create, list, disable users and set their passwords. */
import { allUsers, createUser, disableUser, findUserNamed, setPassword } from '../accounts/users.ts';
import { COMMAND_LINE } from '../audit.ts';
import type { AppContext } from '../context.ts';
import { UsageError, command, noArguments, oneArgument, type Command } from './command.ts';
import { readPassword } from './password.ts';

const create: Command = command({
  words: 'user create',
  usage: '<username> --email <e> [--admin] [--password-stdin]',
  options: { email: { type: 'string' }, admin: { type: 'boolean' }, 'password-stdin': { type: 'boolean' } },
  async run(ctx, args, options, print) {
    const username = oneArgument(create, args);
    if (options.email === undefined) throw new UsageError('--email is required');
    const password = await readPassword(options);
    const user = await createUser(ctx, { username, email: options.email, password, isAdmin: options.admin ?? false }, COMMAND_LINE);
    print(
      { id: user.id, username: user.username, email: user.email, admin: user.is_admin === 1 },
      `Created user ${user.username}${user.is_admin ? ' (administrator)' : ''}.`,
    );
    return 0;
  },
});

const list = command({
  words: 'user list',
  async run(ctx, args, _options, print) {
    noArguments(args);
    const users = (await allUsers(ctx)).map((u) => ({ username: u.username, email: u.email, admin: u.is_admin === 1, disabled: u.disabled === 1 }));
    print(users, users.map((u) => `${u.username}\t${u.email}${u.admin ? '\tadmin' : ''}${u.disabled ? '\tdisabled' : ''}`).join('\n') || 'No users.');
    return 0;
  },
});

const disable = command({
  words: 'user disable',
  usage: '<username>',
  help: "also revokes the user's tokens and sessions",
  async run(ctx, args, _options, print) {
    const user = await requireUser(ctx, args);
    await disableUser(ctx, user, COMMAND_LINE);
    print({ username: user.username, disabled: true }, `Disabled ${user.username}; their tokens and sessions are revoked.`);
    return 0;
  },
});

const setPasswordCommand = command({
  words: 'user set-password',
  usage: '<username> [--password-stdin]',
  help: "also ends the user's sessions",
  options: { 'password-stdin': { type: 'boolean' } },
  async run(ctx, args, options, print) {
    const user = await requireUser(ctx, args);
    await setPassword(ctx, user, await readPassword(options));
    print({ username: user.username, password_changed: true }, `Password changed for ${user.username}.`);
    return 0;
  },
});

async function requireUser(ctx: AppContext, args: string[]) {
  const [username, ...extra] = args;
  if (username === undefined || extra.length > 0) throw new UsageError('name exactly one user');
  const user = await findUserNamed(ctx, username);
  if (!user) throw new UsageError(`no user named ${username}`);
  return user;
}

export const USER_COMMANDS: readonly Command[] = [create, list, disable, setPasswordCommand];
