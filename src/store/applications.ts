/** A user's authorized applications (the account page): their live grants, one row per client. */
import type { Kysely } from 'kysely';
import type { Database } from './schema.ts';

export interface AuthorizedApplication {
  client_id: string;
  name: string;
  scopes: string;
  authorized_at: number;
  last_used_at: number;
}

/** The applications holding a live grant from the user, one row per application. */
export async function listAuthorizedApplications(db: Kysely<Database>, userId: string, now: number): Promise<AuthorizedApplication[]> {
  const rows = await db
    .selectFrom('grants')
    .innerJoin('clients', 'clients.id', 'grants.client_id')
    .select(['grants.client_id', 'clients.name', 'grants.scopes', 'grants.created_at', 'grants.last_used_at'])
    .where('grants.user_id', '=', userId)
    .where('grants.revoked_at', 'is', null)
    .where('grants.expires_at', '>', now)
    .orderBy('grants.created_at')
    .execute();
  const byClient = new Map<string, AuthorizedApplication>();
  for (const row of rows) {
    const app = byClient.get(row.client_id);
    const scopes = new Set([...(app?.scopes.split(' ') ?? []), ...row.scopes.split(' ')]);
    byClient.set(row.client_id, {
      client_id: row.client_id,
      name: row.name,
      scopes: [...scopes].sort().join(' '),
      authorized_at: Math.min(app?.authorized_at ?? Infinity, row.created_at),
      last_used_at: Math.max(app?.last_used_at ?? 0, row.last_used_at),
    });
  }
  return [...byClient.values()];
}
