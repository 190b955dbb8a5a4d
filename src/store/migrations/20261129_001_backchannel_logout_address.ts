/**
 * `backchannel_logouts.address`: the address of the request that ended the session (a
 * person's logout in the browser, an administrator's change on a page), null when the
 * command line ended it. The delivery, made later in the background and perhaps by another
 * instance, is audited with it, so the trail says where the logout came from. Rows queued
 * before this have none. Frozen in time.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('backchannel_logouts').addColumn('address', 'text').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('backchannel_logouts').dropColumn('address').execute();
}
