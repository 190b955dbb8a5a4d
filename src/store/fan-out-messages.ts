/** The fan-out's messages between processes sharing one SQLite file (events/fan-out.ts `databaseTransport`). */
import type { Kysely } from 'kysely';
import type { Database } from './schema.ts';

export interface FanOutMessage {
  readonly id: number;
  readonly origin: string;
  readonly payload: string;
}

/** The id of the latest message, 0 when there is none: where a process that starts begins reading. */
export async function latestFanOutMessage(db: Kysely<Database>): Promise<number> {
  const row = await db
    .selectFrom('fan_out_messages')
    .select((eb) => eb.fn.max('id').as('id'))
    .executeTakeFirst();
  return Number(row?.id ?? 0);
}

/** The messages after `id`, in order: one range read of the primary key, usually empty. */
export function fanOutMessagesAfter(db: Kysely<Database>, id: number): Promise<FanOutMessage[]> {
  return db.selectFrom('fan_out_messages').select(['id', 'origin', 'payload']).where('id', '>', id).orderBy('id').execute();
}

/** Adds a message, and deletes those sent before `keepSince` (every reader has long read them), in one transaction. */
export async function appendFanOutMessage(
  db: Kysely<Database>,
  message: { origin: string; payload: string; sentAt: number },
  keepSince: number,
): Promise<void> {
  await db.transaction().execute(async (trx) => {
    await trx.deleteFrom('fan_out_messages').where('sent_at', '<', keepSince).execute();
    await trx.insertInto('fan_out_messages').values({ origin: message.origin, payload: message.payload, sent_at: message.sentAt }).execute();
  });
}
