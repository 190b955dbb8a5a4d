/**
 * SQLite's WAL is copied back into the database file by the server's own timer, between
 * requests, not only when a commit fills it (src/http/ops.ts, src/store/database.ts).
 */
import assert from 'node:assert/strict';
import { statSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { sqlite } from '../support/backends.ts';
import { startServer, type TestServer } from '../support/server.ts';

describe('checkpoints (sqlite)', () => {
  let server: TestServer;
  let path: string;
  before(async () => {
    server = await startServer(sqlite);
    path = (server.config.database as { path: string }).path;
  });
  after(() => server?.close());

  test('within a second or two of a write, the database file holds it, with the WAL far from its limit', async () => {
    const { rows } = await sql<{ wal_autocheckpoint: number }>`pragma wal_autocheckpoint`.execute(server.store.db);
    assert.equal(rows[0]!.wal_autocheckpoint, 10_000);
    await sleep(1200); // a checkpoint of what start-up wrote
    const size = statSync(path).size;
    const event = {
      at: Date.now(),
      type: 'logout',
      actor_id: null,
      user_id: null,
      client_id: null,
      address: null,
      detail: 'x'.repeat(1000),
      expires_at: Date.now(),
    };
    await server.store.db
      .insertInto('audit_events')
      .values(Array.from({ length: 100 }, () => event))
      .execute();
    assert.equal(statSync(path).size, size, 'the commit itself only appended to the WAL');
    await sleep(2200);
    assert.ok(statSync(path).size >= size + 100 * 1000, 'the timer copied the new pages into the database file');
  });
});
