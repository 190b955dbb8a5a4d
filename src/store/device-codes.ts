/**
 * Device authorization requests (RFC 8628). Every step that must happen once is one
 * conditional write: a poll either finds the interval respected or grows it (`slow_down`),
 * the person's answer is recorded only on a request not yet answered, and the exchange
 * consumes an approved, unused device code in the transaction that creates its grant
 * (atomic-writes.ts `exchangeDeviceCode`). The state lives in the database, so it holds
 * across instances.
 */
import { sql, type Kysely } from 'kysely';
import type { Consume, JoinedTokenSettings } from './codes.ts';
import { joinedClientColumns, type JoinedClient } from './clients.ts';
import { prepare } from './prepared.ts';
import { rowByKey } from './shared-reads.ts';
import { tokenSettingsColumns } from './resources.ts';
import { allColumnsOf, type Database, type DeviceCode } from './schema.ts';
import type { Login } from '../login.ts';

export type NewDeviceCode = Pick<
  DeviceCode,
  'hash' | 'user_code_hash' | 'client_id' | 'scopes' | 'resource_id' | 'created_at' | 'expires_at' | 'poll_interval'
>;

const insertRequest = prepare((db, p: NewDeviceCode) =>
  db
    .insertInto('device_codes')
    .values({
      hash: p.hash,
      user_code_hash: p.user_code_hash,
      client_id: p.client_id,
      scopes: p.scopes,
      resource_id: p.resource_id,
      created_at: p.created_at,
      expires_at: p.expires_at,
      poll_interval: p.poll_interval,
      last_polled_at: p.created_at,
    })
    .onConflict((oc) => oc.column('user_code_hash').doNothing()),
);

/** Stores the request; false, and nothing stored, when its user code is already taken (the caller mints another). */
export async function insertDeviceCode(db: Kysely<Database>, code: NewDeviceCode): Promise<boolean> {
  return (await insertRequest.affected(db, code)) === 1n;
}

/**
 * The request whatever its state, with whether the person who answered it is disabled now
 * (null: nobody answered), its client's scopes as stored now and its resource server's token settings.
 */
export const findDeviceCode: (
  db: Kysely<Database>,
  hash: string,
) => Promise<(DeviceCode & JoinedTokenSettings & JoinedClient & { user_disabled: number | null; username: string | null }) | undefined> = rowByKey(
  'device_codes.hash',
  'hash',
  (db) =>
    db
      .selectFrom('device_codes')
      .leftJoin('users', 'users.id', 'device_codes.user_id')
      .innerJoin('clients', 'clients.id', 'device_codes.client_id')
      .leftJoin('resources', 'resources.id', 'device_codes.resource_id')
      .select(allColumnsOf('device_codes'))
      .select(['users.disabled as user_disabled', 'users.username', ...joinedClientColumns, ...tokenSettingsColumns]),
);

const requestByUserCode = prepare((db, p: { userCodeHash: string }) =>
  db
    .selectFrom('device_codes')
    .innerJoin('clients', 'clients.id', 'device_codes.client_id')
    .select(allColumnsOf('device_codes'))
    .select('clients.name as client_name')
    .where('device_codes.user_code_hash', '=', p.userCodeHash),
);

/** The request a user code names, with its client's name, whatever its state: the caller checks it. */
export async function findByUserCode(db: Kysely<Database>, userCodeHash: string): Promise<(DeviceCode & { client_name: string }) | undefined> {
  return requestByUserCode.first(db, { userCodeHash });
}

/**
 * The device waited its interval since the last poll (or since the request, before the
 * first): what the writes decide by, and `pollDue` tells from a row read before. (The
 * interval in bigint: grown by many polls too soon, times 1000 it would overflow
 * PostgreSQL's integer.)
 */
const polledInTime = (now: number) => sql<boolean>`${sql.ref('last_polled_at')} + cast(${sql.ref('poll_interval')} as bigint) * 1000 <= ${now}`;

/**
 * Whether a poll at `now` is in time by the row as read. A poll's time and interval only
 * grow, so one too soon by the read is too soon in the database as well; one in time by the
 * read is decided again by the write.
 */
export function pollDue(device: Pick<DeviceCode, 'last_polled_at' | 'poll_interval'>, now: number): boolean {
  return device.last_polled_at + device.poll_interval * 1000 <= now;
}

const pollInTime = prepare((db, p: { hash: string; now: number }) =>
  db.updateTable('device_codes').set({ last_polled_at: p.now }).where('hash', '=', p.hash).where(polledInTime(p.now)),
);

const slowDown = prepare((db, p: { hash: string; now: number }) =>
  db
    .updateTable('device_codes')
    // Never back in time: a request that waited long for the database may come after a later poll.
    .set((eb) => ({
      last_polled_at: sql<number>`case when ${sql.ref('last_polled_at')} > ${p.now} then ${sql.ref('last_polled_at')} else ${p.now} end`,
      poll_interval: eb('poll_interval', '+', 5),
    }))
    .where('hash', '=', p.hash),
);

export type Poll = 'in_time' | 'too_soon' | 'gone';

/**
 * Records a poll: `in_time` when the device waited its interval since the last one (or since
 * the request, before the first poll); otherwise `too_soon` (`recordTooSoon`); `gone` when
 * the device code is no more (voided). Of several polls at once, at most one is in time.
 */
export async function recordPoll(db: Kysely<Database>, hash: string, now: number): Promise<Poll> {
  if ((await pollInTime.affected(db, { hash, now })) === 1n) return 'in_time';
  return recordTooSoon(db, hash, now);
}

/** Records a poll known to be too soon: the interval grows by 5 seconds for this device code from now on (RFC 8628 §3.5 `slow_down`). */
export async function recordTooSoon(db: Kysely<Database>, hash: string, now: number): Promise<Exclude<Poll, 'in_time'>> {
  return (await slowDown.affected(db, { hash, now })) === 1n ? 'too_soon' : 'gone';
}

const recordAnswer = prepare(
  (db, p: { hash: string; decision: 'approved' | 'denied'; userId: string; authTime: number; amr: string; sid: string | null; now: number }) =>
    db
      .updateTable('device_codes')
      .set({ decision: p.decision, user_id: p.userId, auth_time: p.authTime, amr: p.amr, sid: p.sid, decided_at: p.now })
      .where('hash', '=', p.hash)
      .where('decision', 'is', null)
      .where('expires_at', '>', p.now),
);

/**
 * Records the person's answer; false when the request was answered already, has expired,
 * or is gone (voided, its client deleted).
 */
export async function decideDeviceCode(
  db: Kysely<Database>,
  hash: string,
  answer: { decision: 'approved' | 'denied'; userId: string; login: Login; now: number },
): Promise<boolean> {
  const { decision, userId, login, now } = answer;
  return (await recordAnswer.affected(db, { hash, decision, userId, authTime: login.authTime, amr: login.amr, sid: login.sid, now })) === 1n;
}

/**
 * The exchange's consumption is also the poll that makes it: only a poll in time consumes
 * the device code, so an exchange costs one write, not a poll's and then the exchange's.
 * Consuming nothing, the caller tells a poll too soon from a replay with `recordPoll`.
 */
export const consumeDeviceCode: Consume = (db, p) =>
  db
    .updateTable('device_codes')
    .set({ consumed_at: p.now, grant_id: p.grantId, last_polled_at: p.now })
    .where('hash', '=', p.hash)
    .where('decision', '=', 'approved')
    .where('consumed_at', 'is', null)
    .where(polledInTime(p.now));

/**
 * Voids the device codes of the client not yet exchanged (those `userId` approved, when
 * given), like codes.ts `voidCodes`: deleted, so a later poll finds nothing to exchange.
 */
export async function voidDeviceCodes(db: Kysely<Database>, where: { clientId: string; userId?: string }): Promise<void> {
  let query = db.deleteFrom('device_codes').where('client_id', '=', where.clientId).where('consumed_at', 'is', null);
  if (where.userId !== undefined) query = query.where('user_id', '=', where.userId);
  await query.execute();
}
