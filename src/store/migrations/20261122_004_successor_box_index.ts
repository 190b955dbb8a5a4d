/**
 * The purge wipes sealed successor pairs once their grace window is over. Only the few
 * tokens rotated in the last window still hold one, so a partial index over them lets that
 * step touch those rows instead of scanning every refresh token. Frozen in time.
 */
import { sql, type Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createIndex('refresh_tokens_sealed_rotated_at')
    .on('refresh_tokens')
    .column('rotated_at')
    .where(sql.ref('successor_box'), 'is not', null)
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('refresh_tokens_sealed_rotated_at').execute();
}
