/**
 * `writeTogether` (store/chained-writes.ts), the one way writes that span tables are made
 * all or nothing, on an in-memory SQLite database: every step written when each deciding
 * step finds its row; nothing at all when one does not, and the outcome names that step.
 * The same write's PostgreSQL statement is compiled (not run: no services here) to show each
 * step gated on the one before. That PostgreSQL runs such statements right is shown by the
 * suites that race them (test/oauth/races.test.ts, interleaved.test.ts).
 */
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import type { Kysely } from 'kysely';
import {
  auditEventRow,
  insertAuditEvent,
  insertAuditRowQuery,
  auditArgs,
  auditRowOf,
  type AuditArgs,
  type AuditEventRow,
} from '../../src/store/audit-events.ts';
import { after as gateOn, rowCounts, writeTogether } from '../../src/store/chained-writes.ts';
import { migrate, openStore } from '../../src/store/database.ts';
import { prepare } from '../../src/store/prepared.ts';
import type { Database } from '../../src/store/schema.ts';
import { postgresCompiler } from './support/postgres-compiler.ts';

const store = openStore({ kind: 'sqlite', path: ':memory:', groupCommit: true });
await migrate(store);
after(() => store.close());
const { db } = store;

/** A write of the shape of a code exchange: a row created, a row changed at most once, an audit row. */
interface Args {
  id: string;
  name: string;
  /** The user disabled, once: the exactly-once step. */
  target: string;
}

const userRow = (p: Args) => ({
  id: p.id,
  username: p.name,
  username_key: p.name,
  email: p.name,
  email_key: p.name,
  display_name: null,
  password_hash: 'x',
  is_admin: 0,
  disabled: 0,
  created_at: 1,
});
const createUser = (db: Kysely<Database>, p: Args) =>
  db
    .insertInto('users')
    .values(userRow(p))
    .onConflict((oc) => oc.doNothing());
const disableOnce = (db: Kysely<Database>, p: Args) => db.updateTable('users').set({ disabled: 1 }).where('id', '=', p.target).where('disabled', '=', 0);

/** PostgreSQL: the write as one statement. */
const createAndDisableStatement = (db: Kysely<Database>, p: Args & AuditArgs) =>
  db
    .with('created', () => createUser(db, p).returning('id'))
    .with('disabled', (steps) => disableOnce(db, p).where(gateOn(steps, 'created')).returning('id'))
    .with('audit', (steps) => insertAuditRowQuery(db, auditRowOf(p), gateOn(steps, 'disabled')))
    .selectNoFrom((eb) => rowCounts(eb, ['created', 'disabled']));
const statement = prepare(createAndDisableStatement);
const createAlone = prepare(createUser);
const disableAlone = prepare(disableOnce);

const event: AuditEventRow = auditEventRow({ type: 'user_disabled' }, 1, 2);

function createAndDisable(p: Args) {
  return writeTogether(db, 'done', {
    decidedBy: { created: 'name_taken', disabled: 'already_disabled' },
    statement: () => statement.first(db, { ...p, ...auditArgs(event) }),
    steps: [
      { write: (trx) => createAlone.affected(db, p, trx), decides: 'created' },
      { write: (trx) => disableAlone.affected(db, p, trx), decides: 'disabled' },
      (trx) => insertAuditEvent(db, event, trx),
    ],
  });
}

const usernames = async () => (await db.selectFrom('users').select('username').orderBy('username').execute()).map((r) => r.username);
const disabled = async (id: string) => (await db.selectFrom('users').select('disabled').where('id', '=', id).executeTakeFirstOrThrow()).disabled;
const auditRows = async () =>
  Number(
    (
      await db
        .selectFrom('audit_events')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .executeTakeFirstOrThrow()
    ).n,
  );

describe('writeTogether on SQLite', () => {
  test('every step is written when every deciding step finds its row', async () => {
    await db
      .insertInto('users')
      .values(userRow({ id: 'u-target', name: 'target', target: '' }))
      .execute();
    assert.equal(await createAndDisable({ id: 'u-a', name: 'alice', target: 'u-target' }), 'done');
    assert.deepEqual(await usernames(), ['alice', 'target']);
    assert.equal(await disabled('u-target'), 1);
    assert.equal(await auditRows(), 1);
  });

  test('a deciding step that finds nothing part-way stores nothing, earlier steps included, and names itself', async () => {
    // `created` succeeds, then `disabled` finds the target disabled already: the new user is rolled back.
    assert.equal(await createAndDisable({ id: 'u-b', name: 'bob', target: 'u-target' }), 'already_disabled');
    assert.deepEqual(await usernames(), ['alice', 'target']);
    assert.equal(await auditRows(), 1);
  });

  test('the first deciding step that finds nothing names the outcome, and no later step runs', async () => {
    await db
      .insertInto('users')
      .values(userRow({ id: 'u-other', name: 'other', target: '' }))
      .execute();
    // The name is taken: nothing is created, and the user that would have been disabled is not.
    assert.equal(await createAndDisable({ id: 'u-c', name: 'alice', target: 'u-other' }), 'name_taken');
    assert.equal(await disabled('u-other'), 0);
    assert.deepEqual(await usernames(), ['alice', 'other', 'target']);
    assert.equal(await auditRows(), 1);
  });

  test('a step that fails rolls every earlier one back and the error reaches the caller', async () => {
    const failing = writeTogether(db, 'done', {
      decidedBy: {},
      statement: async () => undefined,
      steps: [
        (trx) => createAlone.execute(db, { id: 'u-d', name: 'dora', target: '' }, trx),
        (trx) =>
          trx
            .insertInto('users')
            .values(userRow({ id: 'u-d', name: 'dora2', target: '' }))
            .execute(),
      ],
    });
    await assert.rejects(failing);
    assert.deepEqual(await usernames(), ['alice', 'other', 'target']);
  });
});

test('on PostgreSQL the same write is one statement, each step gated on the one before', () => {
  const postgres = postgresCompiler();
  const text = createAndDisableStatement(postgres, { id: 'u-a', name: 'alice', target: 'u-target', ...auditArgs(event) }).compile().sql;
  assert.match(text, /^with "created" as \(insert into "users"/);
  assert.match(text, /"disabled" as \(update "users" .* and exists \(select 1 from "created"\) returning "id"\)/);
  assert.match(text, /"audit" as \(insert into "audit_events" .* where exists \(select 1 from "disabled"\)\)/);
  assert.match(text, /select \(select count\(\*\) from "created"\) as "created", \(select count\(\*\) from "disabled"\) as "disabled"$/);
});

// What the types hold (checked by `tsc --noEmit`, never run): the outcome is one of the
// write's own; a step is named as the statement names it, or it does not compile.
export async function typeChecks(p: Args): Promise<void> {
  const outcome: 'done' | 'name_taken' | 'already_disabled' = await createAndDisable(p);
  // @ts-expect-error -- not an outcome of this write
  const other: 'done' = outcome;
  void other;
  await writeTogether(db, 'done', {
    decidedBy: { create: 'name_taken' },
    // @ts-expect-error -- `create` is no step of the statement: it counts no such step
    statement: () => statement.first(db, { ...p, ...auditArgs(event) }),
    steps: [],
  });
  await writeTogether(db, 'done', {
    decidedBy: { created: 'name_taken' },
    statement: () => statement.first(db, { ...p, ...auditArgs(event) }),
    // @ts-expect-error -- a SQLite step stands for a step the statement decides by
    steps: [{ write: (trx) => createAlone.affected(db, p, trx), decides: 'disable' }],
  });
  db.with('created', () => createUser(db, p).returning('id'))
    // @ts-expect-error -- a gate names a step written before it
    .with('disabled', (steps) => disableOnce(db, p).where(gateOn(steps, 'create')));
}
