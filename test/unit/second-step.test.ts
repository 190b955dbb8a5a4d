/**
 * The second step completes once (accounts/second-step.ts): the factor's single-use write and
 * the pending login's consumption commit together through `allOrNothing`
 * (store/second-factors.ts), on an in-memory SQLite database. Of two concurrent completions of
 * one pending login with two different recovery codes, one commits and the other's code is
 * not spent; the refusal names the step that said no. The end-to-end suites race the same on
 * PostgreSQL (test/accounts/second-factors.test.ts).
 */
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { migrate, openStore } from '../../src/store/database.ts';
import { allOrNothing, consumePendingLogin, countRecoveryCodes, insertPendingLogin, useRecoveryCode } from '../../src/store/second-factors.ts';

const store = openStore({ kind: 'sqlite', path: ':memory:', groupCommit: true });
await migrate(store);
after(() => store.close());
const { db } = store;
const now = Date.now();

async function person(id: string): Promise<void> {
  await db
    .insertInto('users')
    .values({
      id,
      username: id,
      username_key: id,
      email: `${id}@example.com`,
      email_key: `${id}@example.com`,
      email_verified: 0,
      display_name: null,
      password_hash: 'x',
      is_admin: 0,
      disabled: 0,
      created_at: now,
    })
    .execute();
  await db
    .insertInto('recovery_codes')
    .values(['a', 'b'].map((code) => ({ user_id: id, code_hash: `${id}-${code}`, created_at: now })))
    .execute();
  await insertPendingLogin(db, { idHash: `${id}-pending`, userId: id, amr: 'pwd', connectionId: null, now, expiresAt: now + 60_000 });
}

function complete(userId: string, code: string) {
  return allOrNothing(
    db,
    {
      factor: (trx) => useRecoveryCode(trx, { userId, codeHash: `${userId}-${code}` }),
      step: (trx) => consumePendingLogin(trx, `${userId}-pending`, now),
    },
    [],
  );
}

describe('completing a second step', () => {
  test('two codes at once for one pending login: one completes it, the other code stays unused', async () => {
    await person('u1');
    const outcomes = await Promise.all([complete('u1', 'a'), complete('u1', 'b')]);
    assert.deepEqual(outcomes.toSorted(), [null, 'step'].toSorted());
    assert.equal(await countRecoveryCodes(db, 'u1'), 1, 'the losing code was rolled back with its completion');
  });

  test('a used code is refused as the factor, and the pending login is not consumed', async () => {
    await person('u2');
    assert.equal(await complete('u2', 'missing'), 'factor');
    assert.equal(await complete('u2', 'a'), null);
  });
});
