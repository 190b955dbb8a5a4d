/**
 * What a per-instance cache of token state could save the bearer check on SQLite (issue 35,
 * item 3) if it kept SPEC §2's promise that a token revoked anywhere is refused by the next
 * request. A revocation can come from this process, from another worker on the same file, or
 * from the CLI; the only way a process learns at once that another connection has committed is
 * to ask SQLite: `PRAGMA data_version` (moves on every other connection's commit), with
 * `total_changes()` for this connection's own writes. A cache that keeps the promise must run
 * that check before every answer it gives from memory.
 *
 * Measured on a file database of the current schema holding TOKENS live access tokens:
 * Gatehouse's bearer read (`findLiveBearerToken`: the token, its grant and its user, on the
 * immediate read path the bearer check uses) against the check alone, each over every token,
 * in interleaved rounds; medians of µs per call. Run with `npm run bench:token-state`.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { createClient } from '../src/clients/clients.ts';
import { findLiveBearerToken } from '../src/store/tokens.ts';
import { mintToken } from '../src/tokens.ts';
import { memoryContext, person } from '../test/unit/support/context.ts';
import { MicroTimings } from './harness.ts';
import { purgeAfterFor } from '../src/store/grants.ts';

const TOKENS = 20_000;
const ROUNDS = 7;
const SCOPES = 'annotation:read annotation:write';

const directory = mkdtempSync(join(tmpdir(), 'gatehouse-token-state-'));
const file = join(directory, 'gatehouse.db');
const { ctx, clock, close } = await memoryContext({ DATABASE_URL: `sqlite:${file}` });
clock.now = Date.now();

const user = await person(ctx, 'alice');
const client = {
  redirectUris: ['https://app.example/cb'],
  scope: SCOPES,
  confidential: false,
  requirePkce: true,
  grantType: 'authorization_code',
  trusted: false,
};
const { client: app } = await createClient(ctx.db, { ...client, name: 'App' }, clock.now);
const hashes: string[] = [];
await ctx.db.transaction().execute(async (trx) => {
  for (let i = 0; i < TOKENS; i++) {
    const id = randomUUID();
    const { hash } = mintToken('access');
    hashes.push(hash);
    const times = { created_at: clock.now, expires_at: clock.now + 3_600_000 };
    await trx
      .insertInto('grants')
      .values({
        id,
        client_id: app.id,
        user_id: user.id,
        resource_id: 'builtin',
        scopes: SCOPES,
        last_used_at: clock.now,
        revoked_at: null,
        purge_after: purgeAfterFor(times.expires_at),
        ...times,
      })
      .execute();
    await trx
      .insertInto('access_tokens')
      .values({ hash, grant_id: id, scopes: SCOPES, ...times })
      .execute();
  }
});

// The check, on a connection of its own: the same statement on the server's connection does the same work.
const other = new DatabaseSync(file);
const check = other.prepare('select data_version as version, total_changes() as changes from pragma_data_version');
interface State {
  version: number;
  changes: number;
}
const stateNow = () => check.get() as unknown as State;
const same = (a: State, b: State) => a.version === b.version && a.changes === b.changes;

// The premises: a commit by another connection moves the check's answer (data_version), and so
// does a write by the checking connection itself (total_changes()).
const { id: someGrant } = await ctx.db.selectFrom('grants').select('id').executeTakeFirstOrThrow();
const before = stateNow();
await ctx.db
  .updateTable('grants')
  .set({ last_used_at: clock.now + 1 })
  .where('id', '=', someGrant)
  .execute();
if (same(stateNow(), before)) throw new Error('PRAGMA data_version did not move on another connection’s commit');
const beforeOwn = stateNow();
other.prepare('update grants set last_used_at = last_used_at + 1 where id = ?').run(someGrant);
if (same(stateNow(), beforeOwn)) throw new Error('total_changes() did not move on the connection’s own write');

const timings = new MicroTimings(TOKENS);
for (let round = 0; round < ROUNDS; round++) {
  await timings.time("Gatehouse's bearer read (token, grant, user)", async () => {
    for (const hash of hashes) if (!(await findLiveBearerToken(ctx.db, hash, clock.now))) throw new Error('a live token was not found');
  });
  await timings.time('the change check a cache would make instead', () => {
    const seen = stateNow();
    for (let i = 0; i < TOKENS; i++) if (!same(stateNow(), seen)) throw new Error('the database changed during the round');
  });
}
timings.report('call');
other.close();
await close();
rmSync(directory, { recursive: true, force: true });
