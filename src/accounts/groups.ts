/**
 * Groups of users (SPEC §3): creating and deleting them, adding and removing members, shared
 * by the CLI and the admin pages. A group's name is released in the OIDC `groups` claim, so
 * it is an RFC 6749 scope token (no spaces, quotes or backslashes), compared exactly. The
 * changes record their own audit events, made by the given actor.
 */
import { madeBy, type Actor } from '../audit.ts';
import type { AppContext } from '../context.ts';
import { isScopeToken } from '../oauth/scopes.ts';
import { deleteGroup, deleteMember, groupExists, insertGroup, insertMember, listGroups, userGroups, type GroupWithMembers } from '../store/groups.ts';
import { AccountError, type User } from './users.ts';

export type { GroupWithMembers };

export const MAX_GROUP_NAME_LENGTH = 100;

export function groupNameProblem(name: string): string | null {
  return name.length <= MAX_GROUP_NAME_LENGTH && isScopeToken(name)
    ? null
    : `must be 1-${MAX_GROUP_NAME_LENGTH} characters, without spaces, quotes (") or backslashes`;
}

/** Every group in name order, with its members in username order. */
/** The names of the groups the user is in. */
export function groupsOf(ctx: AppContext, userId: string): Promise<string[]> {
  return userGroups(ctx.db, userId);
}

export function allGroups(ctx: AppContext): Promise<GroupWithMembers[]> {
  return listGroups(ctx.db);
}

export async function createGroup(ctx: AppContext, name: string, actor: Actor): Promise<void> {
  const problem = groupNameProblem(name);
  if (problem) throw new AccountError('name', `group name ${problem}`);
  if (!(await insertGroup(ctx.db, name, ctx.now()))) throw new AccountError('name', `group "${name}" exists already`);
  await ctx.audit({ type: 'group_created', ...madeBy(actor), detail: { group: name } });
}

/** Deletes the group; its members leave it (their next ID tokens no longer name it). */
export async function removeGroup(ctx: AppContext, name: string, actor: Actor): Promise<void> {
  if (!(await deleteGroup(ctx.db, name))) throw noGroup(name);
  await ctx.audit({ type: 'group_deleted', ...madeBy(actor), detail: { group: name } });
}

export async function addMember(ctx: AppContext, name: string, user: User, actor: Actor): Promise<void> {
  if (!(await insertMember(ctx.db, name, user.id))) {
    if (!(await groupExists(ctx.db, name))) throw noGroup(name);
    throw new AccountError('username', `${user.username} is in group "${name}" already`);
  }
  await ctx.audit({ type: 'group_member_added', ...madeBy(actor), userId: user.id, detail: { group: name } });
}

export async function removeMember(ctx: AppContext, name: string, user: User, actor: Actor): Promise<void> {
  if (!(await deleteMember(ctx.db, name, user.id))) {
    if (!(await groupExists(ctx.db, name))) throw noGroup(name);
    throw new AccountError('username', `${user.username} is not in group "${name}"`);
  }
  await ctx.audit({ type: 'group_member_removed', ...madeBy(actor), userId: user.id, detail: { group: name } });
}

function noGroup(name: string): AccountError {
  return new AccountError('group', `there is no group named "${name}"`);
}
