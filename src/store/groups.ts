/** Groups of users (SPEC §3), released as the OIDC `groups` claim. */
import type { Kysely } from 'kysely';
import type { Database } from './schema.ts';

/** The names of the groups the user belongs to, sorted. */
export async function userGroups(db: Kysely<Database>, userId: string): Promise<string[]> {
  const rows = await db.selectFrom('group_members').select('group_name').where('user_id', '=', userId).orderBy('group_name').execute();
  return rows.map((row) => row.group_name);
}
