/**
 * Pushed authorization requests (RFC 9126, SPEC §4.14): their rows and the two conditional
 * writes that open and answer one. The database decides: of any number of concurrent
 * answers to one request, exactly one consumes it.
 */
import type { Kysely } from 'kysely';
import type { Database } from './schema.ts';

interface NewPushedRequest {
  hash: string;
  client_id: string;
  /** The checked parameters, as JSON. */
  params: string;
  created_at: number;
  expires_at: number;
}

export async function insertPushedRequest(db: Kysely<Database>, row: NewPushedRequest): Promise<void> {
  await db.insertInto('pushed_requests').values(row).execute();
}

/**
 * The pushed parameters (JSON) and when a browser first brought them, when `hash` names an
 * unanswered, unexpired request of `clientId`; undefined otherwise. The first time, it is
 * marked opened and given `openFor` ms from now — the time a person has to log in and answer
 * — in the same statement.
 */
export async function openPushedRequest(
  db: Kysely<Database>,
  hash: string,
  clientId: string,
  now: number,
  openFor: number,
): Promise<{ params: string; opened_at: number | null } | undefined> {
  const row = await db
    .updateTable('pushed_requests')
    .set((eb) => ({
      opened_at: eb.fn.coalesce('opened_at', eb.val(now)),
      expires_at: eb
        .case()
        .when('opened_at', 'is', null)
        .then(eb.val(now + openFor))
        .else(eb.ref('expires_at'))
        .end(),
    }))
    .where('hash', '=', hash)
    .where('client_id', '=', clientId)
    .where('consumed_at', 'is', null)
    .where('expires_at', '>', now)
    .returning(['params', 'opened_at'])
    .executeTakeFirst();
  return row;
}

/** The pushed parameters (JSON) of an unanswered, unexpired request of `clientId`, read without opening it; undefined otherwise. */
export async function findPushedRequest(db: Kysely<Database>, hash: string, clientId: string, now: number): Promise<string | undefined> {
  const row = await db
    .selectFrom('pushed_requests')
    .select('params')
    .where('hash', '=', hash)
    .where('client_id', '=', clientId)
    .where('consumed_at', 'is', null)
    .where('expires_at', '>', now)
    .executeTakeFirst();
  return row?.params;
}

/** Marks the request answered: true for the one call that did, false once it had been (or it expired). */
export async function consumePushedRequest(db: Kysely<Database>, hash: string, now: number): Promise<boolean> {
  const result = await db
    .updateTable('pushed_requests')
    .set({ consumed_at: now })
    .where('hash', '=', hash)
    .where('consumed_at', 'is', null)
    .where('expires_at', '>', now)
    .executeTakeFirst();
  return result.numUpdatedRows === 1n;
}
