/** Table sizes, for the metrics. Counting scans whole tables: run it in the background, never per request. */
import { sql, type Kysely } from 'kysely';
import type { Database } from './schema.ts';

/** The tables whose row counts are reported. */
const TABLES = [
  'users',
  'clients',
  'sessions',
  'grants',
  'auth_codes',
  'device_codes',
  'access_tokens',
  'refresh_tokens',
  'consents',
  'setup_tokens',
  'audit_events',
] as const;

/** Rows per table, in one statement. */
export async function countTableRows(db: Kysely<Database>): Promise<Record<string, number>> {
  const counts = sql.join(
    TABLES.map((table) => sql`select ${table} as name, count(*) as n from ${sql.table(table)}`),
    sql` union all `,
  );
  const { rows } = await sql<{ name: string; n: number | string }>`${counts}`.execute(db);
  return Object.fromEntries(rows.map((row) => [row.name, Number(row.n)]));
}
