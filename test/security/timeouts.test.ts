/**
 * A client that announces a body and never sends it must not hold a connection open for
 * ever (SPEC §4.6, issue 11 item 9): the server ends a request whose headers and body have
 * not arrived within 30 seconds. No storage is involved, so SQLite alone.
 */
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { REQUEST_TIMEOUT_MS } from '../../src/app.ts';
import { sqlite } from '../support/backends.ts';
import { startServer, type TestServer } from '../support/server.ts';

describe('slow requests', () => {
  let server: TestServer;
  before(async () => (server = await startServer(sqlite)));
  after(() => server?.close());

  test('a POST whose body never comes is ended (408) within 30 seconds and some slack', { timeout: 45_000 }, async (t) => {
    const { hostname, port } = new URL(server.url);
    const socket = connect({ host: hostname, port: Number(port) });
    await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
    const start = performance.now();
    socket.write(
      `POST /api/token HTTP/1.1\r\nHost: ${hostname}:${port}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\ngrant_type=`,
    );
    let answer = '';
    socket.on('data', (chunk) => (answer += chunk));
    const ended = new Promise((resolve) => socket.once('close', resolve));
    t.after(() => socket.destroy()); // so that a failure does not keep the server from closing
    await ended;
    const ms = performance.now() - start;
    assert.equal(REQUEST_TIMEOUT_MS, 30_000);
    assert.ok(ms >= REQUEST_TIMEOUT_MS - 1000 && ms < REQUEST_TIMEOUT_MS + 5000, `ended after ${Math.round(ms)} ms`);
    assert.match(answer, /^HTTP\/1\.1 408 /);
  });
});
