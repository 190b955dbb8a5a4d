/** Groups of users (SPEC §3), released as the OIDC `groups` claim. */
import { sql, type Kysely } from 'kysely';
import type { Database } from './schema.ts';

/** The names of the groups the user belongs to, sorted. */
export async function userGroups(db: Kysely<Database>, userId: string): Promise<string[]> {
  const rows = await db.selectFrom('group_members').select('group_name').where('user_id', '=', userId).orderBy('group_name').execute();
  return rows.map((row) => row.group_name);
}

export interface GroupMember {
  id: string;
  username: string;
}

export interface GroupWithMembers {
  name: string;
  members: GroupMember[];
}

/** Every group in name order, with its members in username order. */
export async function listGroups(db: Kysely<Database>): Promise<GroupWithMembers[]> {
  const [groups, members] = await Promise.all([
    db.selectFrom('groups').select('name').orderBy('name').execute(),
    db
      .selectFrom('group_members')
      .innerJoin('users', 'users.id', 'group_members.user_id')
      .select(['group_members.group_name', 'users.id', 'users.username'])
      .orderBy('users.username_key')
      .execute(),
  ]);
  const byName = new Map(groups.map(({ name }): [string, GroupWithMembers] => [name, { name, members: [] }]));
  for (const { group_name, id, username } of members) byName.get(group_name)?.members.push({ id, username });
  return [...byName.values()];
}

export async function groupExists(db: Kysely<Database>, name: string): Promise<boolean> {
  return (await db.selectFrom('groups').select('name').where('name', '=', name).executeTakeFirst()) !== undefined;
}

/** Inserts the group unless one has the name already (also when another writer got there first); whether it did. */
export async function insertGroup(db: Kysely<Database>, name: string, now: number): Promise<boolean> {
  const result = await db
    .insertInto('groups')
    .values({ name, created_at: now })
    .onConflict((oc) => oc.column('name').doNothing())
    .executeTakeFirst();
  return (result.numInsertedOrUpdatedRows ?? 0n) > 0n;
}

/** Deletes the group (its memberships go with it, by cascade); whether there was one. */
export async function deleteGroup(db: Kysely<Database>, name: string): Promise<boolean> {
  const result = await db.deleteFrom('groups').where('name', '=', name).executeTakeFirst();
  return result.numDeletedRows > 0n;
}

/**
 * Makes the user a member of the group, in one statement that also checks the group exists:
 * a group deleted meanwhile gains no member (and breaks no foreign key). Whether a membership
 * was added: false when the group is gone or the user is in it already.
 */
export async function insertMember(db: Kysely<Database>, groupName: string, userId: string): Promise<boolean> {
  const result = await db
    .insertInto('group_members')
    .columns(['group_name', 'user_id'])
    .expression(
      db
        .selectFrom('groups')
        .select(['name', sql<string>`${userId}`.as('user_id')])
        .where('name', '=', groupName),
    )
    .onConflict((oc) => oc.columns(['group_name', 'user_id']).doNothing())
    .executeTakeFirst();
  return (result.numInsertedOrUpdatedRows ?? 0n) > 0n;
}

/** Whether the user was a member (and is no longer). */
export async function deleteMember(db: Kysely<Database>, groupName: string, userId: string): Promise<boolean> {
  const result = await db.deleteFrom('group_members').where('group_name', '=', groupName).where('user_id', '=', userId).executeTakeFirst();
  return result.numDeletedRows > 0n;
}
