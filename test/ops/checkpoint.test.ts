/**
 * SQLite's WAL is copied back into the database file by the server's own timer, on a thread
 * of its own, not only when a commit fills it (src/http/ops.ts, src/store/checkpointer.ts).
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

  /** Commits `count` rows of about 1 kB each: at least `count` × 1000 bytes for the database file. */
  async function writeAuditEvents(count: number) {
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
      .values(Array.from({ length: count }, () => event))
      .execute();
  }

  test('within a second or two of a write, the database file holds it, with the WAL far from its limit', async () => {
    const { rows } = await sql<{ wal_autocheckpoint: number }>`pragma wal_autocheckpoint`.execute(server.store.db);
    assert.equal(rows[0]!.wal_autocheckpoint, 10_000);
    await sleep(1200); // a checkpoint of what start-up wrote
    const size = statSync(path).size;
    await writeAuditEvents(100);
    assert.equal(statSync(path).size, size, 'the commit itself only appended to the WAL');
    await sleep(2200);
    assert.ok(statSync(path).size >= size + 100 * 1000, 'the timer copied the new pages into the database file');
  });

  test('a checkpoint does not need the event loop: it runs while the serving thread is busy', async () => {
    await sleep(1200); // what the test before wrote is copied back
    const size = statSync(path).size;
    await writeAuditEvents(100);
    // Hold this thread — the server's event loop — for 3 s, as a long synchronous task would.
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 3000);
    assert.ok(statSync(path).size >= size + 100 * 1000, 'the pages were copied back while the event loop was held');
  });
});
