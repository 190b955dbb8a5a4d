/**
 * Exchanges that share a commit (SQLite's group commit, src/store/group-commit.ts) through
 * the real server: codes exchanged at once, among them many copies of one code. Each copy
 * that loses its race has already written its grant when its consumption finds the code
 * spent, and is rolled back to its own savepoint: no grant, token or audit row of it stays,
 * while the exchanges of the other codes in the same transaction commit and their tokens
 * work. On PostgreSQL (no batching: one statement each) the same must hold.
 */
import assert from 'node:assert/strict';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { after, before, describe, test } from 'node:test';
import type { BatchReport } from '../../src/store/group-commit.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { exchangeRequest, obtainCallback, tokenResult } from '../support/oauth-client.ts';
import { assertDead, assertWorks, startWithApp, type Setup } from '../support/token-checks.ts';

const OTHERS = 8;
const COPIES = 8;
/** Rounds tried until one batch held winners and losers together (SQLite); the requests' arrival decides how they batch. */
const MAX_ROUNDS = 5;

for (const backend of BACKENDS) {
  describe(`exchanges sharing a commit (${backend.name})`, backendOptions(backend), () => {
    let setup: Setup;
    const reports: BatchReport[] = [];
    const report = (message: unknown) => reports.push(message as BatchReport);
    before(async () => {
      setup = await startWithApp(backend);
      subscribe('gatehouse:group-commit', report);
    });
    after(async () => {
      unsubscribe('gatehouse:group-commit', report);
      await setup?.server.close();
    });

    const count = async (table: 'grants' | 'audit_events', where: { type?: string } = {}) => {
      let query = setup.server.store.db.selectFrom(table).select((eb) => eb.fn.countAll<number>().as('n'));
      if (where.type) query = query.where('type' as never, '=', where.type as never);
      return Number((await query.executeTakeFirstOrThrow()).n);
    };

    test('losers of a race roll back alone inside the batch; the other exchanges commit and work', async () => {
      const { app, agent } = setup;
      let mixed = false;
      for (let round = 1; round <= MAX_ROUNDS && !mixed; round++) {
        const contested = await obtainCallback(app, agent);
        const others = await Promise.all(Array.from({ length: OTHERS }, () => obtainCallback(app, agent)));
        const [grantsBefore, issuedBefore] = [await count('grants'), await count('audit_events', { type: 'token_issued' })];
        reports.length = 0;
        // Interleaved, all in flight at once: copies of the contested code between the others.
        const requests = others.flatMap((other, i) => [exchangeRequest(app, other), ...(i < COPIES ? [exchangeRequest(app, contested)] : [])]);
        const results = await Promise.all(requests.map(async (request) => tokenResult(await request)));
        const ofOthers = results.filter((_, i) => i % 2 === 0);
        const ofContested = results.filter((_, i) => i % 2 === 1);

        assert.deepEqual(
          ofOthers.map((r) => r.status),
          ofOthers.map(() => 200),
          'every other code is exchanged',
        );
        assert.equal(ofContested.filter((r) => r.status === 200).length, 1, 'one copy of the contested code wins');
        for (const loser of ofContested.filter((r) => r.status !== 200)) assert.deepEqual([loser.status, loser.body.error], [400, 'invalid_grant']);
        // One grant and one token_issued per winning exchange: the losers' grants were rolled back with them.
        assert.equal((await count('grants')) - grantsBefore, OTHERS + 1);
        assert.equal((await count('audit_events', { type: 'token_issued' })) - issuedBefore, OTHERS + 1);
        for (const other of ofOthers) await assertWorks(setup, other.body);
        // The replays of the contested code revoke what its winner got (RFC 6749 §4.1.2), as without batching.
        await assertDead(setup, [ofContested.find((r) => r.status === 200)!.body]);
        mixed = reports.some((r) => r.committed && r.failed > 0 && r.size > r.failed);
        if (backend.name !== 'sqlite') break; // nothing to batch on PostgreSQL
      }
      if (backend.name === 'sqlite') assert.ok(mixed, `no batch held both winners and losers in ${MAX_ROUNDS} rounds`);
      else assert.deepEqual(reports, [], 'PostgreSQL writes do not go through group commit');
    });
  });
}
