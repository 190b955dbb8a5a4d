/**
 * Which prepared statements run under a name on PostgreSQL (store/prepared.ts `mayBeNamed`):
 * those that choose their columns by name, never those that choose them with `*` — a named
 * one of those would fail on an older instance once a migration adds a column (the rolling
 * upgrade of test/ops/rolling-upgrade-columns.test.ts). Compiled as Kysely compiles them for
 * PostgreSQL, not run.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { sql, type Compilable } from 'kysely';
import { mayBeNamed } from '../../src/store/prepared.ts';
import { allColumnsOf } from '../../src/store/schema.ts';
import { postgresCompiler } from './support/postgres-compiler.ts';

const db = postgresCompiler();
const named = (query: Compilable) => mayBeNamed(query.compile().sql);

describe('which prepared statements run under a name (PostgreSQL)', () => {
  test('a statement that chooses columns with * does not, however it is written', () => {
    const unnamed: Compilable[] = [
      db.selectFrom('clients').selectAll().where('id', '=', 'x'),
      db.selectFrom('auth_codes').innerJoin('users', 'users.id', 'auth_codes.user_id').selectAll('auth_codes').select('users.username'),
      db.selectFrom('auth_codes').innerJoin('users', 'users.id', 'auth_codes.user_id').select('users.username').selectAll('auth_codes'),
      db.selectFrom('scopes').selectAll().distinct(),
      db.selectFrom('scopes').selectAll('scopes').distinctOn('resource_id'),
      db.updateTable('grants').set({ revoked_at: 1 }).where('id', '=', 'x').returningAll(),
      db.deleteFrom('sessions').where('id_hash', '=', 'x').returningAll(),
      db
        .selectFrom('users')
        .select('id')
        .where(({ exists, selectFrom }) => exists(selectFrom('sessions').selectAll().whereRef('sessions.user_id', '=', 'users.id'))),
      db.selectFrom('clients').select(sql`"public"."clients".*`.as('row')),
    ];
    for (const query of unnamed) assert.equal(named(query), false, query.compile().sql);
    assert.equal(mayBeNamed('SELECT\n*\nFROM "clients"'), false, 'any case, any white space');
  });

  test('a statement that names its columns does, a count(*) or a multiplication included', () => {
    const withNames: Compilable[] = [
      db.selectFrom('clients').select(allColumnsOf('clients')).where('id', '=', 'x'),
      db.selectFrom('auth_codes').innerJoin('users', 'users.id', 'auth_codes.user_id').select(allColumnsOf('auth_codes')).select('users.username'),
      db.selectFrom('grants').select((eb) => eb.fn.countAll<number>().as('n')),
      db
        .updateTable('device_codes')
        .set({ last_polled_at: 1 })
        .where(sql<boolean>`${sql.ref('last_polled_at')} + ${sql.ref('poll_interval')} * 1000 <= ${2}`),
      db.insertInto('scopes').values({ name: 'a', resource_id: 'r', description: 'd', created_at: 1 }).returning(['name']),
    ];
    for (const query of withNames) assert.equal(named(query), true, query.compile().sql);
  });
});
