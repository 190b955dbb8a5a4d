import type { Kysely } from 'kysely';
import { prepare } from './prepared.ts';
import type { Database, User } from './schema.ts';

export async function insertSession(db: Kysely<Database>, session: { idHash: string; userId: string; now: number; expiresAt: number }): Promise<void> {
  await db
    .insertInto('sessions')
    .values({ id_hash: session.idHash, user_id: session.userId, created_at: session.now, expires_at: session.expiresAt })
    .execute();
}

const sessionUser = prepare((db, p: { idHash: string; now: number }) =>
  db
    .selectFrom('sessions')
    .innerJoin('users', 'users.id', 'sessions.user_id')
    .selectAll('users')
    .where('sessions.id_hash', '=', p.idHash)
    .where('sessions.expires_at', '>', p.now)
    .where('users.disabled', '=', 0),
);

/** The user behind a live session; undefined when the session is unknown, expired, or its user disabled. */
export async function findSessionUser(db: Kysely<Database>, idHash: string, now: number): Promise<User | undefined> {
  return sessionUser.first(db, { idHash, now });
}

export async function deleteSession(db: Kysely<Database>, idHash: string): Promise<void> {
  await db.deleteFrom('sessions').where('id_hash', '=', idHash).execute();
}

export async function deleteUserSessions(db: Kysely<Database>, userId: string): Promise<void> {
  await db.deleteFrom('sessions').where('user_id', '=', userId).execute();
}
