import type { Kysely, Transaction } from 'kysely';
import { queueBackchannelLogouts } from './backchannel-logouts.ts';
import { prepare } from './prepared.ts';
import { rowByKey, unexpired } from './shared-reads.ts';
import { allColumnsOf, type Database, type User } from './schema.ts';
import { amrUnion } from '../login.ts';

export async function insertSession(
  db: Kysely<Database>,
  session: { idHash: string; userId: string; now: number; expiresAt: number; amr: string; sid: string; connectionId: string | null },
): Promise<void> {
  await db
    .insertInto('sessions')
    .values({
      id_hash: session.idHash,
      user_id: session.userId,
      created_at: session.now,
      expires_at: session.expiresAt,
      amr: session.amr,
      sid: session.sid,
      connection_id: session.connectionId,
    })
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
    .returning(['amr', 'sid', 'connection_id'])
    .executeTakeFirst();
  if (old === undefined) return false;
  const amr = amrUnion(old.amr, p.amr);
  await trx
    .insertInto('sessions')
    .values({ id_hash: p.newIdHash, user_id: p.userId, created_at: p.now, expires_at: p.expiresAt, amr, sid: old.sid, connection_id: old.connection_id })
    .execute();
  return true;
}

/**
 * A session with its user, unless the user is disabled: read by the requests that arrive
 * together as one (shared-reads.ts), each checking the session's expiry against its own clock.
 */
const sessionWithUser = rowByKey('sessions.id_hash', 'id_hash', (db) =>
  db
    .selectFrom('sessions')
    .innerJoin('users', 'users.id', 'sessions.user_id')
    .select(allColumnsOf('users'))
    .select(['sessions.id_hash', 'sessions.expires_at', 'sessions.created_at as auth_time', 'sessions.amr as session_amr', 'sessions.sid as session_sid'])
    .where('users.disabled', '=', 0),
);

/**
 * In the transaction that completes a step-up second step, ends session `idHash` of `userId`
 * (live), with its back-channel logouts queued (from `address`, the request's): true for the
 * one caller that found it live — a session steps up once; the login that replaces it starts
 * once that transaction commits.
 */
export async function consumeSession(trx: Transaction<Database>, p: { idHash: string; userId: string; now: number; address: string | null }): Promise<boolean> {
  const ended = await trx
    .deleteFrom('sessions')
    .where('id_hash', '=', p.idHash)
    .where('user_id', '=', p.userId)
    .where('expires_at', '>', p.now)
    .returning('sid')
    .executeTakeFirst();
  if (ended === undefined) return false;
  await queueBackchannelLogouts(trx, [ended.sid], p.now, p.address);
  return true;
}

/**
 * The user behind a live session, with when (`auth_time`) and how (`session_amr`) they logged
 * in and the session's `sid`; undefined when the session is unknown, expired, or its user disabled.
 */
export async function findSessionUser(
  db: Kysely<Database>,
  idHash: string,
  now: number,
): Promise<(User & { auth_time: number; session_amr: string; session_sid: string }) | undefined> {
  const found = unexpired(await sessionWithUser(db, idHash), now);
  if (found === undefined) return undefined;
  const { id_hash: _key, expires_at: _expiry, ...user } = found;
  return user;
}

/**
 * Ends one session (by `idHash`) or every session of a user (but one, `except`), and in the same transaction
 * queues the back-channel logouts of the sessions that ended (store/backchannel-logouts.ts),
 * from `address` (the request's that ended them; null: the command line).
 * A session ended twice at once is deleted, and its logouts queued, by one of the two only.
 * Returns how many deliveries were queued.
 */
export async function deleteSessions(
  db: Kysely<Database>,
  which: { idHash: string } | { userId: string; /** A session of the user's to keep (theirs, when they change their own factors). */ except?: string },
  now: number,
  address: string | null,
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
      address,
    );
  });
}

/** The connection the session's login came through (SPEC §4.13); null for none, or no such session. */
export async function sessionConnectionId(db: Kysely<Database>, idHash: string): Promise<string | null> {
  return (await db.selectFrom('sessions').select('connection_id').where('id_hash', '=', idHash).executeTakeFirst())?.connection_id ?? null;
}

const liveSession = prepare((db, p: { userId: string; sid: string; now: number }) =>
  db.selectFrom('sessions').select('sid').where('user_id', '=', p.userId).where('sid', '=', p.sid).where('expires_at', '>', p.now),
);

/** Whether the person's login session `sid` (OpenID Connect's, SPEC §4.10) is still live: not ended, not expired. */
export async function isSessionLive(db: Kysely<Database>, p: { userId: string; sid: string; now: number }): Promise<boolean> {
  return (await liveSession.first(db, p)) !== undefined;
}
