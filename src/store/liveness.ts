/**
 * Which of many access tokens are still live, in one query: what the real-time API re-checks
 * for its open sockets every second, so that a revocation the revocation bus never carried
 * (the command line on SQLite, a message lost while Redis or the PostgreSQL listener
 * reconnects) still closes them. "Live" is what a bearer check accepts: not expired, its
 * grant not revoked (nor deleted with its client), its user, if any, not disabled.
 */
import type { Kysely } from 'kysely';
import type { Database } from './schema.ts';
import { liveToken } from './tokens.ts';

/** Hashes per query: far below the bound on bound parameters of either backend. */
const HASHES_PER_QUERY = 1000;

/** The hashes among `hashes` whose access tokens are live at `now`. */
export async function liveAccessTokenHashes(db: Kysely<Database>, hashes: readonly string[], now: number): Promise<Set<string>> {
  const live = new Set<string>();
  for (let i = 0; i < hashes.length; i += HASHES_PER_QUERY) {
    const rows = await db
      .selectFrom('access_tokens')
      .innerJoin('grants', 'grants.id', 'access_tokens.grant_id')
      .leftJoin('users', 'users.id', 'grants.user_id')
      .select('access_tokens.hash')
      .where('access_tokens.hash', 'in', hashes.slice(i, i + HASHES_PER_QUERY))
      .where(liveToken('access_tokens', now))
      .execute();
    for (const row of rows) live.add(row.hash);
  }
  return live;
}
