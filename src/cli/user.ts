/**
 * `gatehouse user …`: create, list, update, disable, enable and delete users, set their
 * passwords, reset their second factors and unlink their identities at connections.
 */
import { ConnectionInputError, connectionNamed } from '../accounts/connections/connections.ts';
import { unlinkIdentity } from '../accounts/connections/federated-login.ts';
import { keepsAWayToLogIn } from '../accounts/connections/password-login.ts';
import { allGroups } from '../accounts/groups.ts';
import { resetSecondFactor as resetFactors } from '../accounts/second-factors.ts';
import { allUsers, createUser, deleteUser, disableUser, enableUser, findUserNamed, updateProfile, type User } from '../accounts/users.ts';
import { setPassword } from '../accounts/password-changes.ts';
import { sendVerification } from '../accounts/email-verification.ts';
import { COMMAND_LINE } from '../audit.ts';
import type { AppContext } from '../context.ts';
import { UsageError, command, noArguments, oneArgument, usageError, type Command } from './command.ts';
import { readPassword } from './password.ts';

/** The options of a user's profile, on `create` and `update`. */
const PROFILE_OPTIONS = {
  name: { type: 'string', help: 'the display name (the name claim applications get); "" removes it' },
  'email-verified': { type: 'boolean', help: 'an administrator checked the address (email_verified); --no-email-verified: not' },
} as const;

function profileJson(user: User) {
  return { display_name: user.display_name, email_verified: user.email_verified === 1 };
}

const create: Command = command({
  words: 'user create',
  usage: ['<username> --email <e> [--admin] [--password-stdin]', '[--name <display name>] [--email-verified]'],
  options: {
    email: { type: 'string', help: 'their e-mail address, which also logs in' },
    admin: { type: 'boolean', help: 'an administrator: the admin pages are theirs' },
    'password-stdin': { type: 'boolean', help: 'read the password from standard input instead of prompting' },
    ...PROFILE_OPTIONS,
  },
  async run(ctx, args, options, print) {
    const username = oneArgument(create, args);
    if (options.email === undefined) throw new UsageError('--email is required');
    const password = await readPassword(options);
    const user = await createUser(
      ctx,
      { username, email: options.email, password, isAdmin: options.admin ?? false, displayName: options.name, emailVerified: options['email-verified'] },
      COMMAND_LINE,
    );
    print(
      { id: user.id, username: user.username, email: user.email, admin: user.is_admin === 1, ...profileJson(user) },
      `Created user ${user.username}${user.is_admin ? ' (administrator)' : ''}.`,
    );
    return 0;
  },
});

const list = command({
  words: 'user list',
  async run(ctx, args, _options, print) {
    noArguments(args);
    const groupsOf = new Map<string, string[]>();
    for (const group of await allGroups(ctx)) for (const member of group.members) groupsOf.set(member.id, [...(groupsOf.get(member.id) ?? []), group.name]);
    const users = (await allUsers(ctx)).map((u) => ({
      username: u.username,
      email: u.email,
      admin: u.is_admin === 1,
      disabled: u.disabled === 1,
      ...profileJson(u),
      groups: groupsOf.get(u.id) ?? [],
    }));
    const line = (u: (typeof users)[number]) =>
      [
        u.username,
        u.email + (u.email_verified ? ' (verified)' : ''),
        u.display_name ?? '',
        u.admin ? 'admin' : '',
        u.disabled ? 'disabled' : '',
        u.groups.length > 0 ? `groups: ${u.groups.join(' ')}` : '',
      ]
        .join('\t')
        .trimEnd();
    print(users, users.map(line).join('\n') || 'No users.');
    return 0;
  },
});

const update: Command = command({
  words: 'user update',
  usage: '<username> [--name <display name>] [--email <e>] [--[no-]email-verified]',
  help: ['a new --email is unverified unless --email-verified comes with it;', '--name "" removes the display name'],
  options: { email: { type: 'string', help: 'a new e-mail address, unverified unless --email-verified comes with it' }, ...PROFILE_OPTIONS },
  async run(ctx, args, options, print) {
    const user = await requireUser(ctx, args);
    if (options.name === undefined && options.email === undefined && options['email-verified'] === undefined)
      throw new UsageError('nothing to change: give --name, --email, --email-verified or --no-email-verified');
    const changed = await updateProfile(ctx, user, { displayName: options.name, email: options.email, emailVerified: options['email-verified'] }, COMMAND_LINE);
    print(
      { username: changed.username, email: changed.email, ...profileJson(changed) },
      `Updated ${changed.username}: ${changed.display_name === null ? 'no display name' : `display name "${changed.display_name}"`}, ` +
        `${changed.email} (${changed.email_verified ? 'verified' : 'unverified'}).`,
    );
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

const enable = command({
  words: 'user enable',
  usage: '<username>',
  help: 'a disabled user may log in again',
  async run(ctx, args, _options, print) {
    const user = await requireUser(ctx, args);
    const changed = await enableUser(ctx, user, COMMAND_LINE);
    print({ username: user.username, disabled: false }, changed ? `Enabled ${user.username}: they may log in again.` : `${user.username} is already enabled.`);
    return 0;
  },
});

const remove = command({
  words: 'user delete',
  usage: '<username>',
  help: [
    'revokes every grant and token of the user, ends their sessions',
    '(with back-channel logouts), and removes their passkeys,',
    'authenticator app, recovery codes, identities at connections,',
    'consents and group memberships; the audit trail keeps their id.',
    'The last administrator cannot be deleted',
  ],
  async run(ctx, args, _options, print) {
    const user = await requireUser(ctx, args);
    await deleteUser(ctx, user, COMMAND_LINE);
    print({ username: user.username, id: user.id, deleted: true }, `Deleted ${user.username} (${user.id}); everything they had is revoked or removed.`);
    return 0;
  },
});

const setPasswordCommand = command({
  words: 'user set-password',
  usage: '<username> [--password-stdin]',
  help: "also ends the user's sessions",
  options: { 'password-stdin': { type: 'boolean', help: 'read the password from standard input instead of prompting' } },
  async run(ctx, args, options, print) {
    const user = await requireUser(ctx, args);
    await setPassword(ctx, user, await readPassword(options), COMMAND_LINE);
    print({ username: user.username, password_changed: true }, `Password changed for ${user.username}.`);
    return 0;
  },
});

const sendVerificationCommand = command({
  words: 'user send-verification',
  usage: '<username>',
  help: [
    'mails the user a link that marks their email address verified once they open it (24 hours, single use);',
    'a running server sends it (SMTP_URL must be set)',
  ],
  async run(ctx, args, _options, print) {
    const user = await requireUser(ctx, args);
    await sendVerification(ctx, user, COMMAND_LINE);
    print({ username: user.username, email: user.email, queued: true }, `A verification link for ${user.email} is queued; the server sends it.`);
    return 0;
  },
});

const resetSecondFactor = command({
  words: 'user reset-second-factor',
  usage: '<username>',
  help: [
    "removes the user's passkeys, authenticator app and recovery codes and ends their sessions:",
    'for a person who has lost every factor; they log in with their password again',
  ],
  async run(ctx, args, _options, print) {
    const user = await requireUser(ctx, args);
    const removed = await resetFactors(ctx, user, COMMAND_LINE);
    print(
      { username: user.username, passkeys: removed.passkeys, authenticator_apps: removed.apps, recovery_codes: removed.recoveryCodes, sessions_ended: true },
      `Reset the second factors of ${user.username}: ${removed.passkeys} passkey(s), ${removed.apps} authenticator app(s) ` +
        `and ${removed.recoveryCodes} recovery code(s) removed; their sessions are ended.`,
    );
    return 0;
  },
});

const unlink: Command = command({
  words: 'user unlink',
  usage: '<username> <connection id>',
  help: [
    "unlinks the user's identity at the connection and ends their sessions that",
    'came through it, even when it was their last way to log in (then says so)',
  ],
  async run(ctx, args, _options, print) {
    const [username, connectionId, ...extra] = args;
    if (username === undefined || connectionId === undefined || extra.length > 0) throw usageError(unlink);
    const user = await requireUser(ctx, [username]);
    const connection = await connectionNamed(ctx, connectionId).catch((error: unknown) => {
      throw error instanceof ConnectionInputError ? new UsageError(`no connection with the id ${connectionId}; see gatehouse connection list`) : error;
    });
    // An administrator may take the last way away (a person who left); the command says so.
    const canLogIn = await keepsAWayToLogIn(ctx, user, connection.id);
    const outcome = await unlinkIdentity(ctx, user, connection.id, { actor: COMMAND_LINE, mustKeepAWay: false });
    if (outcome !== 'unlinked') throw new UsageError(`${user.username} has no identity at ${connection.id}`);
    const warning = canLogIn ? '' : `\nWarning: ${user.username} has no other way to log in now (no password they may use, passkey or other connection).`;
    print(
      { username: user.username, connection: connection.id, unlinked: true, can_log_in: canLogIn },
      `Unlinked ${user.username}'s identity at ${connection.name} (${connection.id}); their sessions that came through it are ended.${warning}`,
    );
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

export const USER_COMMANDS: readonly Command[] = [
  create,
  list,
  update,
  disable,
  enable,
  remove,
  setPasswordCommand,
  sendVerificationCommand,
  resetSecondFactor,
  unlink,
];
