/**
 * The migration for switching clients off and deleting people (SPEC §4.16, 20261128_002): every
 * client gains `disabled` (0); a queued back-channel logout keeps its person's username and no
 * longer references the person, so deleting them leaves it to be delivered. Down (a row whose
 * person is gone is dropped: it could not reference them) and up again, on both backends.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Migrator, sql, type Kysely } from 'kysely';
import { parseDatabaseUrl } from '../../src/config.ts';
import { migrations, openStore, type Store } from '../../src/store/database.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { insertOldClient, insertOldUser } from '../support/old-rows.ts';
import { PASSWORD } from '../support/server.ts';

const THIS = '20261128_002_switches';

const logouts = async (db: Kysely<any>) => (await sql.raw('select * from backchannel_logouts order by sid').execute(db)).rows as Array<Record<string, unknown>>;

for (const backend of BACKENDS) {
  describe(`the switches migration (${backend.name})`, backendOptions(backend), () => {
    let database: { url: string; drop(): Promise<void> };
    let store: Store;
    let db: Kysely<any>;
    const migrator = (upTo: string) =>
      new Migrator({ db: store.db, provider: { getMigrations: async () => Object.fromEntries(Object.entries(migrations).filter(([name]) => name <= upTo)) } });
    const clientId = '00000000-0000-4000-8000-000000000001';
    let alice: string;
    let bob: string;

    before(async () => {
      database = await backend.create();
      store = openStore(parseDatabaseUrl(database.url));
      db = store.db as unknown as Kysely<any>;
      const before = Object.keys(migrations)
        .filter((name) => name < THIS)
        .at(-1)!;
      assert.equal((await migrator(before).migrateToLatest()).error, undefined);
      const now = Date.now();
      alice = (await insertOldUser(store.db, { username: 'alice', email: 'alice@example.com', password: PASSWORD, isAdmin: false }, now)).id;
      bob = (await insertOldUser(store.db, { username: 'bob', email: 'bob@example.com', password: PASSWORD, isAdmin: false }, now)).id;
      await insertOldClient(db, { id: clientId, scopes: 'openid', more: { backchannel_logout_uri: 'https://notes.example/logout' } }, now);
      const queued = { client_id: clientId, state: 'pending', attempts: 0, next_attempt_at: now, created_at: now, expires_at: now + 86_400_000 };
      await db
        .insertInto('backchannel_logouts')
        .values([
          { ...queued, sid: 'sid-alice', user_id: alice },
          { ...queued, sid: 'sid-bob', user_id: bob },
        ])
        .execute();
      assert.equal((await migrator(THIS).migrateToLatest()).error, undefined);
    });
    after(async () => {
      await store?.close();
      await database?.drop();
    });

    test('clients are enabled; queued logouts keep their rows, now with the username', async () => {
      const client = await db.selectFrom('clients').select('disabled').where('id', '=', clientId).executeTakeFirstOrThrow();
      assert.equal(Number(client.disabled), 0);
      assert.deepEqual(
        (await logouts(db)).map((row) => [row.sid, row.user_id, row.username, row.state]),
        [
          ['sid-alice', alice, 'alice', 'pending'],
          ['sid-bob', bob, 'bob', 'pending'],
        ],
      );
      await assert.rejects(
        db
          .insertInto('backchannel_logouts')
          .values({ sid: 'sid-alice', client_id: clientId, user_id: alice, state: 'pending', attempts: 0, next_attempt_at: 0, created_at: 0, expires_at: 0 })
          .execute(),
        'the key (sid, client_id) holds',
      );
    });

    test('deleting a person leaves their queued logout in place', async () => {
      await db.deleteFrom('users').where('id', '=', bob).execute();
      assert.deepEqual(
        (await logouts(db)).map((row) => row.sid),
        ['sid-alice', 'sid-bob'],
      );
    });

    test('down drops the logouts of people who are gone and references users again; up again works', async () => {
      assert.equal((await migrator(THIS).migrateDown()).error, undefined);
      assert.deepEqual(
        (await logouts(db)).map((row) => [row.sid, 'username' in row]),
        [['sid-alice', false]],
      );
      assert.equal('disabled' in (await db.selectFrom('clients').selectAll().executeTakeFirstOrThrow()), false);
      await assert.rejects(
        db
          .insertInto('backchannel_logouts')
          .values({ sid: 'sid-x', client_id: clientId, user_id: bob, state: 'pending', attempts: 0, next_attempt_at: 0, created_at: 0, expires_at: 0 })
          .execute(),
        'a logout must name a person who exists again',
      );
      assert.equal((await migrator(THIS).migrateToLatest()).error, undefined);
      assert.deepEqual(
        (await logouts(db)).map((row) => [row.sid, row.username]),
        [['sid-alice', 'alice']],
      );
    });
  });
}
