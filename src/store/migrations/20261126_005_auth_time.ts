/**
 * How the person logged in (SPEC §4.9, §4.12): `auth_time` (epoch milliseconds, like every
 * time here; NULL for rows made before this migration) and `amr` (the RFC 8176 method values,
 * space-separated, e.g. 'pwd') on authorization codes, device codes and grants, carried from
 * the login that approved them through every refresh of the grant. A session's login time is
 * its `created_at` (every login starts a new session); its `amr` is added here, and every
 * existing session was a password login. Frozen in time.
 */
import type { Kysely } from 'kysely';

const CARRIERS = ['auth_codes', 'device_codes', 'grants'] as const;

export async function up(db: Kysely<any>): Promise<void> {
  for (const table of CARRIERS) {
    await db.schema.alterTable(table).addColumn('auth_time', 'bigint').execute();
    await db.schema.alterTable(table).addColumn('amr', 'text').execute();
  }
  await db.schema.alterTable('sessions').addColumn('amr', 'text').execute();
  await db.updateTable('sessions').set({ amr: 'pwd' }).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('sessions').dropColumn('amr').execute();
  for (const table of CARRIERS) {
    await db.schema.alterTable(table).dropColumn('amr').execute();
    await db.schema.alterTable(table).dropColumn('auth_time').execute();
  }
}
