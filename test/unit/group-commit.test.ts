/**
 * Group commit on SQLite (store/group-commit.ts): writes queued in the same turn of the
 * event loop share one transaction, each in a savepoint of its own. One that fails — here a
 * real constraint violation, in the middle of the batch — is rolled back alone and gets its
 * own error; the others commit, and every member hears its outcome only once the batch's
 * commit is on disk, as a second connection to the same file shows. The real server's
 * exchanges racing inside one batch are in test/oauth/group-commit.test.ts.
 */
import assert from 'node:assert/strict';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { after, before, describe, test } from 'node:test';
import { sql, type Kysely } from 'kysely';
import { migrate, openStore, type Store } from '../../src/store/database.ts';
import { inGroupCommit, type BatchReport } from '../../src/store/group-commit.ts';
import type { Database } from '../../src/store/schema.ts';

const user = (name: string) => ({
  id: `id-${name}`,
  username: name,
  username_key: name,
  email: `${name}@example.com`,
  email_key: `${name}@example.com`,
  display_name: null,
  password_hash: 'x',
  is_admin: 0,
  disabled: 0,
  created_at: 1,
});

/** Inserts the user `name` (a second insert of one name violates the primary key and the unique username). */
const insertUser = (name: string) => async (trx: Kysely<Database>) => {
  await trx.insertInto('users').values(user(name)).execute();
  return name;
};

describe('group commit (SQLite)', () => {
  let directory: string;
  let store: Store;
  let observer: DatabaseSync;
  const reports: BatchReport[] = [];
  const report = (message: unknown) => reports.push(message as BatchReport);

  before(async () => {
    directory = mkdtempSync(join(tmpdir(), 'gatehouse-group-commit-'));
    store = openStore({ kind: 'sqlite', path: join(directory, 'gatehouse.db'), groupCommit: true });
    await migrate(store);
    observer = new DatabaseSync(join(directory, 'gatehouse.db'), { readOnly: true });
    subscribe('gatehouse:group-commit', report);
  });
  after(async () => {
    unsubscribe('gatehouse:group-commit', report);
    observer?.close();
    await store?.close();
    rmSync(directory, { recursive: true, force: true });
  });

  /** What another connection sees committed: the usernames among `names`. */
  const committed = (names: string[]) =>
    (
      observer.prepare(`select username from users where username in (${names.map(() => '?').join(',')}) order by username`).all(...names) as Array<{
        username: string;
      }>
    ).map((row) => row.username);

  test('a failing write in the middle of a batch rolls back alone; the writes before and after it commit', async () => {
    reports.length = 0;
    const seen: Record<string, string[]> = {};
    // Queued in one turn: one batch. The second inserts ann again, after the first did, in the same transaction.
    const outcomes = await Promise.allSettled(
      ['ann', 'ann', 'bob', 'cy'].map((name, i) =>
        inGroupCommit(store.db, 'bounded', async (trx) => {
          await insertUser(name)(trx);
          if (name === 'cy') await trx.updateTable('users').set({ display_name: 'Cy' }).where('username', '=', 'cy').execute();
          return name;
        }).then((value) => {
          // Settled only after the commit: another connection already sees every committed member.
          seen[`${i}`] = committed(['ann', 'bob', 'cy']);
          return value;
        }),
      ),
    );
    assert.deepEqual(
      outcomes.map((o) => o.status),
      ['fulfilled', 'rejected', 'fulfilled', 'fulfilled'],
    );
    assert.match(String((outcomes[1] as PromiseRejectedResult).reason), /UNIQUE|constraint/i, 'the failed member gets its own error');
    assert.deepEqual(reports, [{ size: 4, failed: 1, committed: true, journalInMemory: true }], 'one transaction carried all four');
    assert.deepEqual(committed(['ann', 'bob', 'cy']), ['ann', 'bob', 'cy']);
    for (const i of ['0', '2', '3']) assert.deepEqual(seen[i], ['ann', 'bob', 'cy'], `member ${i} heard of its success before its commit`);
    const cy = observer.prepare('select display_name from users where username = ?').get('cy') as { display_name: string };
    assert.equal(cy.display_name, 'Cy', 'every statement of a member after the failed one committed');
  });

  test('a failure after a member has written rolls back that member’s earlier statements too', async () => {
    reports.length = 0;
    const outcomes = await Promise.allSettled([
      inGroupCommit(store.db, 'bounded', insertUser('dee')),
      inGroupCommit(store.db, 'bounded', async (trx) => {
        await insertUser('eve')(trx); // written, then undone with the member
        await insertUser('dee')(trx); // violates: dee exists (the member before, same transaction)
      }),
      inGroupCommit(store.db, 'bounded', insertUser('fay')),
    ]);
    assert.deepEqual(
      outcomes.map((o) => o.status),
      ['fulfilled', 'rejected', 'fulfilled'],
    );
    assert.deepEqual(reports, [{ size: 3, failed: 1, committed: true, journalInMemory: true }]);
    assert.deepEqual(committed(['dee', 'eve', 'fay']), ['dee', 'fay']);
  });

  test('a lone write runs alone, and its failure leaves nothing', async () => {
    reports.length = 0;
    assert.equal(await inGroupCommit(store.db, 'bounded', insertUser('gus')), 'gus');
    await assert.rejects(
      inGroupCommit(store.db, 'bounded', async (trx) => {
        await insertUser('hal')(trx);
        await insertUser('gus')(trx);
      }),
      /UNIQUE|constraint/i,
    );
    assert.deepEqual(reports, [
      { size: 1, failed: 0, committed: true, journalInMemory: false },
      { size: 1, failed: 1, committed: false, journalInMemory: false },
    ]);
    assert.deepEqual(committed(['gus', 'hal']), ['gus']);
  });

  test('writes queued while a batch runs join the next one, and everything else on the connection takes its turn between batches', async () => {
    reports.length = 0;
    let joined: Promise<string> | null = null;
    const first = inGroupCommit(store.db, 'bounded', async (trx) => {
      // Queued from inside the running batch: it cannot join a transaction that is already under way.
      joined = inGroupCommit(store.db, 'bounded', insertUser('ida'));
      return insertUser('jon')(trx);
    });
    assert.equal(await first, 'jon');
    assert.equal(await joined, 'ida');
    assert.deepEqual(
      reports.map((r) => r.size),
      [1, 1],
    );
    assert.deepEqual(committed(['ida', 'jon']), ['ida', 'jon']);
  });

  test('a member that changed more than SQLite keeps of a journal in memory by default is rolled back whole, its journal in memory or in a file', async () => {
    const bulk = Array.from({ length: 300 }, (_, i) => `bulk-${String(i).padStart(3, '0')}`);
    const before = 'y'.repeat(1000);
    await store.db
      .insertInto('users')
      .values(bulk.map((name) => ({ ...user(name), display_name: before })))
      .execute();
    // 300 rows of over 1 KB: about 80 pages to keep as they were, past the 64 KiB SQLite keeps in memory unless told to.
    const renameAllThenFail = (existing: string) => async (trx: Kysely<Database>) => {
      await trx
        .updateTable('users')
        .set({ display_name: 'x'.repeat(1000) })
        .where('username', 'like', 'bulk-%')
        .execute();
      await insertUser(existing)(trx);
    };
    for (const [extent, first, last] of [
      ['bounded', 'kim', 'lee'],
      ['unbounded', 'max', 'ned'],
    ] as const) {
      reports.length = 0;
      let journal: number | undefined;
      const outcomes = await Promise.allSettled([
        inGroupCommit(store.db, 'bounded', insertUser(first)),
        inGroupCommit(store.db, extent, renameAllThenFail(first)),
        inGroupCommit(store.db, 'bounded', async (trx) => {
          journal = (await sql<{ temp_store: number }>`pragma temp_store`.execute(trx)).rows[0]?.temp_store;
          return insertUser(last)(trx);
        }),
      ]);
      assert.equal(journal, extent === 'bounded' ? 2 : 0, `inside the batch, the journal is kept ${extent === 'bounded' ? 'in memory' : 'in a file'}`);
      assert.deepEqual(
        outcomes.map((o) => o.status),
        ['fulfilled', 'rejected', 'fulfilled'],
      );
      assert.deepEqual(reports, [{ size: 3, failed: 1, committed: true, journalInMemory: extent === 'bounded' }], `with an ${extent} member`);
      assert.deepEqual(committed([first, last]), [first, last]);
      const kept = observer.prepare("select count(*) as n from users where username like 'bulk-%' and display_name = ?").get(before) as { n: number };
      assert.equal(kept.n, bulk.length, `every row the failed ${extent} member changed is as it was`);
      const { rows } = await sql<{ temp_store: number }>`pragma temp_store`.execute(store.db);
      assert.equal(rows[0]?.temp_store, 0, 'the connection is back to the default journal for the transactions that are not batches');
    }
  });
});
