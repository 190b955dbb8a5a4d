/**
 * Blocked URL prefixes in canonical form (issue 18): a prefix was stored as the administrator
 * wrote it, so `https://example.com` (no path) matched `https://example.com.evil.example/…`
 * and `https://example.com:8443/…` too, and a trailing dot on the host made another string.
 * Each stored prefix is rewritten as the URL parser writes it, without a trailing dot on the
 * host, so that blocks compare by scheme, host and port, then path. Frozen in time.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  const rows: Array<{ prefix: string; created_at: number }> = await db.selectFrom('client_blocks').select(['prefix', 'created_at']).execute();
  for (const row of rows) {
    if (!URL.canParse(row.prefix)) continue;
    const url = new URL(row.prefix);
    url.hostname = url.hostname.replace(/\.$/, '');
    if (url.href === row.prefix) continue;
    await db.deleteFrom('client_blocks').where('prefix', '=', row.prefix).execute();
    await db
      .insertInto('client_blocks')
      .values({ prefix: url.href, created_at: row.created_at })
      .onConflict((c) => c.column('prefix').doNothing())
      .execute();
  }
}

/** Nothing to undo: the canonical prefixes block what the written ones meant to. */
export async function down(): Promise<void> {}
