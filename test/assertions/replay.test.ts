/**
 * Assertions accepted once (SPEC §4.11): the conditional write behind every `jti` check, on both
 * backends, raced 20 ways — within one store, and on PostgreSQL across two stores (two
 * instances' connection pools) sharing the database.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { parseDatabaseUrl } from '../../src/config.ts';
import { consumeAssertion, type ReplayStore } from '../../src/oauth/assertions/replay.ts';
import { migrate, openStore, type Store } from '../../src/store/database.ts';
import { purgeExpired } from '../../src/store/purge.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';

const RACERS = 20;

for (const backend of BACKENDS) {
  describe(`consumeAssertion (${backend.name})`, backendOptions(backend), () => {
    let database: { url: string; drop(): Promise<void> };
    const stores: Store[] = [];
    let clock = Date.now();
    const on = (store: Store): ReplayStore => ({ db: store.db, now: () => clock });

    before(async () => {
      database = await backend.create();
      stores.push(openStore(parseDatabaseUrl(database.url)));
      await migrate(stores[0]!);
      if (backend.name === 'postgres') stores.push(openStore(parseDatabaseUrl(database.url)));
    });
    after(async () => {
      for (const store of stores) await store.close();
      await database?.drop();
    });

    test('of 20 concurrent presentations of one assertion exactly one is accepted', async () => {
      const use = { issuer: 'https://issuer.example', id: randomUUID(), expiresAt: clock + 60_000 };
      // Alternate the stores: on PostgreSQL half the racers come through a second instance's pool.
      const results = await Promise.all(Array.from({ length: RACERS }, (_, i) => consumeAssertion(on(stores[i % stores.length]!), use)));
      assert.equal(results.filter(Boolean).length, 1);
      assert.equal(await consumeAssertion(on(stores[0]!), use), false, 'a later replay is refused too');
    });

    test('the same id from another issuer is another assertion', async () => {
      const id = randomUUID();
      assert.equal(await consumeAssertion(on(stores[0]!), { issuer: 'a', id, expiresAt: clock + 60_000 }), true);
      assert.equal(await consumeAssertion(on(stores[0]!), { issuer: 'b', id, expiresAt: clock + 60_000 }), true);
      // Issuer and id are joined with NUL before hashing; an issuer holding NUL (which no real
      // one does) is refused, so that "x\0y" + "z" cannot stand in for "x" + "y\0z".
      assert.equal(await consumeAssertion(on(stores[0]!), { issuer: 'x', id: 'y\0z', expiresAt: clock + 60_000 }), true);
      assert.equal(await consumeAssertion(on(stores[0]!), { issuer: 'x\0y', id: 'z', expiresAt: clock + 60_000 }), false);
    });

    test('once expired, the row is purged, and until the purge an id may be used again only once', async () => {
      const use = { issuer: 'c', id: randomUUID(), expiresAt: clock + 1000 };
      assert.equal(await consumeAssertion(on(stores[0]!), use), true);
      clock += 2000;
      const later = { ...use, expiresAt: clock + 1000 };
      const results = await Promise.all(Array.from({ length: RACERS }, () => consumeAssertion(on(stores[0]!), later)));
      assert.equal(results.filter(Boolean).length, 1);
      clock += 2000;
      const counts = await purgeExpired(stores[0]!.db, clock, 0);
      assert.ok((counts.consumed_assertions ?? 0) >= 1);
      const left = await stores[0]!.db.selectFrom('consumed_assertions').select('key').where('expires_at', '<=', clock).execute();
      assert.deepEqual(left, []);
    });
  });
}
