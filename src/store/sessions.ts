import type { Kysely, Transaction } from 'kysely';
import { queueBackchannelLogouts } from './backchannel-logouts.ts';
import { prepare } from './prepared.ts';
import type { Database, User } from './schema.ts';

/**
 * A login (SPEC §4.9, §4.12): when (`authTime`, epoch ms; the claim `auth_time` is in
 * seconds) and how (`amr`: RFC 8176 values, space-separated, as stored). The codes and device
 * approvals a session makes carry it into their grants, whose refreshes keep it.
 */
export interface Login {
  authTime: number;
  amr: string;
  /** The session's public identifier (OIDC `sid`); null on rows made before it was recorded. */
  sid: string | null;
}

/** The login recorded on a code or grant row; null for none (a client acting as itself, a row older than the record). */
export function loginOf(row: { auth_time: number | null; amr: string | null; sid: string | null }): Login | null {
  return row.auth_time === null || row.amr === null ? null : { authTime: row.auth_time, amr: row.amr, sid: row.sid };
}

/**
 * `auth_time` (epoch seconds) and `amr` (RFC 8176) of a person's token (SPEC §4.9, §4.10,
 * §4.12), in JWT access tokens, ID tokens and introspection alike; nothing when no login is recorded.
 */
export function loginClaims(login: Login | null): { auth_time?: number; amr?: string[] } {
  return login === null ? {} : { auth_time: Math.floor(login.authTime / 1000), amr: login.amr.split(' ') };
}

export async function insertSession(
  db: Kysely<Database>,
  session: { idHash: string; userId: string; now: number; expiresAt: number; amr: string; sid: string },
): Promise<void> {
  await db
    .insertInto('sessions')
    .values({ id_hash: session.idHash, user_id: session.userId, created_at: session.now, expires_at: session.expiresAt, amr: session.amr, sid: session.sid })
    .execute();
}

/**
 * In the transaction that adds a factor (SPEC §4.12: adding a factor counts as using it), replaces
 * session `idHash` by one under `newIdHash` whose login also proved `amr` (RFC 8176 values, added to
 * the login's own), at `now`. Only a live session of `userId` whose login is at or after `recentSince`
 * is replaced: one that ended or went stale since the request was checked gains nothing (false,
 * nothing changed). The token changes, as at every login, so a copy of the old cookie gains nothing
 * either; the `sid` stays — the same login, with one more factor proven — so the clients that got ID
 * tokens in it are not logged out.
 */
export async function upgradeSession(
  trx: Transaction<Database>,
  p: { idHash: string; newIdHash: string; userId: string; amr: string; now: number; expiresAt: number; recentSince: number },
): Promise<boolean> {
  const old = await trx
    .deleteFrom('sessions')
    .where('id_hash', '=', p.idHash)
    .where('user_id', '=', p.userId)
    .where('expires_at', '>', p.now)
    .where('created_at', '>=', p.recentSince)
    .returning(['amr', 'sid'])
    .executeTakeFirst();
  if (old === undefined) return false;
  const amr = [...new Set([...old.amr.split(' '), ...p.amr.split(' ')])].join(' ');
  await trx.insertInto('sessions').values({ id_hash: p.newIdHash, user_id: p.userId, created_at: p.now, expires_at: p.expiresAt, amr, sid: old.sid }).execute();
  return true;
}

const sessionUser = prepare((db, p: { idHash: string; now: number }) =>
  db
    .selectFrom('sessions')
    .innerJoin('users', 'users.id', 'sessions.user_id')
    .selectAll('users')
    .select(['sessions.created_at as auth_time', 'sessions.amr as session_amr', 'sessions.sid as session_sid'])
    .where('sessions.id_hash', '=', p.idHash)
    .where('sessions.expires_at', '>', p.now)
    .where('users.disabled', '=', 0),
);

/**
 * The user behind a live session, with when (`auth_time`) and how (`session_amr`) they logged
 * in and the session's `sid`; undefined when the session is unknown, expired, or its user disabled.
 */
export async function findSessionUser(
  db: Kysely<Database>,
  idHash: string,
  now: number,
): Promise<(User & { auth_time: number; session_amr: string; session_sid: string }) | undefined> {
  return sessionUser.first(db, { idHash, now });
}

/**
 * Ends one session (by `idHash`) or every session of a user (but one, `except`), and in the same transaction
 * queues the back-channel logouts of the sessions that ended (store/backchannel-logouts.ts).
 * A session ended twice at once is deleted, and its logouts queued, by one of the two only.
 * Returns how many deliveries were queued.
 */
export async function deleteSessions(
  db: Kysely<Database>,
  which: { idHash: string } | { userId: string; /** A session of the user's to keep (theirs, when they change their own factors). */ except?: string },
  now: number,
): Promise<number> {
  return db.transaction().execute(async (trx) => {
    const [column, value] = 'idHash' in which ? (['id_hash', which.idHash] as const) : (['user_id', which.userId] as const);
    let remove = trx.deleteFrom('sessions').where(column, '=', value);
    if ('except' in which && which.except !== undefined) remove = remove.where('id_hash', '<>', which.except);
    const ended = await remove.returning('sid').execute();
    return queueBackchannelLogouts(
      trx,
      ended.map((session) => session.sid),
      now,
    );
  });
}
