/**
 * `sharedCalls` (src/protocol/shared-calls.ts), the batching of PostgreSQL's reads by key and
 * of the fan-out's messages, with a read the test answers by hand: callers that come while a
 * read is under way share the next one, never the one under way (which may have begun before
 * they came); one that hangs holds only its own callers; a failed read fails only its own.
 * That PostgreSQL answers each caller with its own row is shown by the suites that run on it
 * (test/oauth/shared-reads.test.ts); that revocations share messages, by test/multi/fan-out.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { sharedCalls } from '../../src/protocol/shared-calls.ts';

/** A read the test ends: the keys each read was asked for, in order, and a way to answer each. */
function handRead() {
  const reads: Array<{ keys: readonly string[]; answer(): void; fail(error: Error): void }> = [];
  const readAll = (keys: readonly string[]) =>
    new Promise<ReadonlyMap<string, string>>((resolve, reject) => {
      reads.push({ keys, answer: () => resolve(new Map(keys.map((key) => [key, `row of ${key}`]))), fail: reject });
    });
  return { reads, readAll };
}

describe('shared calls', () => {
  test('one caller alone reads at once', async () => {
    const { reads, readAll } = handRead();
    const read = sharedCalls(readAll);
    const value = read('a');
    assert.deepEqual(reads[0]?.keys, ['a']);
    reads[0]!.answer();
    assert.equal(await value, 'row of a');
  });

  test('callers that come while a read is under way share the next one, which begins when it ends', async () => {
    const { reads, readAll } = handRead();
    const read = sharedCalls(readAll);
    const first = read('a');
    const later = ['b', 'c', 'b'].map((key) => read(key));
    assert.equal(reads.length, 1, 'nobody joins the read under way');
    reads[0]!.answer();
    assert.equal(await first, 'row of a');
    await sleep(0);
    assert.deepEqual(reads[1]?.keys, ['b', 'c'], 'the next read has every key once');
    reads[1]!.answer();
    assert.deepEqual(await Promise.all(later), ['row of b', 'row of c', 'row of b']);
  });

  test('a key with no row is undefined for its caller alone', async () => {
    const read = sharedCalls(async (keys: readonly string[]) => new Map(keys.filter((key) => key !== 'gone').map((key) => [key, key])));
    assert.deepEqual(await Promise.all([read('a'), read('gone'), read('b')]), ['a', undefined, 'b']);
  });

  test('a read that hangs holds only its callers: the next begins 50 ms after its callers came', async () => {
    const { reads, readAll } = handRead();
    const read = sharedCalls(readAll);
    void read('hangs');
    const waited = read('b');
    await sleep(20);
    assert.equal(reads.length, 1);
    await sleep(60);
    assert.deepEqual(reads[1]?.keys, ['b']);
    reads[1]!.answer();
    assert.equal(await waited, 'row of b');
  });

  test('a caller that comes after a late read began waits for the next, not for either under way', async () => {
    const { reads, readAll } = handRead();
    const read = sharedCalls(readAll);
    void read('hangs');
    const second = read('b');
    await sleep(60);
    assert.deepEqual(reads[1]?.keys, ['b'], 'the late read began');
    const third = read('c');
    assert.equal(reads.length, 2, 'nobody joins a read under way');
    reads[1]!.answer();
    assert.equal(await second, 'row of b');
    await sleep(0);
    assert.deepEqual(reads[2]?.keys, ['c'], 'the next began when the late one ended');
    reads[2]!.answer();
    assert.equal(await third, 'row of c');
  });

  test('a read that throws at once fails its callers, like one that rejects', async () => {
    const read = sharedCalls((): Promise<ReadonlyMap<string, string>> => {
      throw new Error('no connection');
    });
    await assert.rejects(read('a'), /no connection/);
  });

  test('with as many reads under way as allowed, later callers get nothing rather than another read', async () => {
    const { reads, readAll } = handRead();
    const read = sharedCalls(readAll, 1);
    void read('hangs');
    const skipped = read('b');
    assert.equal(await skipped, undefined);
    assert.equal(reads.length, 1);
  });

  test('a failed read fails its own callers, and the next read is not affected', async () => {
    const { reads, readAll } = handRead();
    const read = sharedCalls(readAll);
    const failing = read('a');
    const next = read('b');
    reads[0]!.fail(new Error('connection lost'));
    await assert.rejects(failing, /connection lost/);
    await sleep(0);
    reads[1]!.answer();
    assert.equal(await next, 'row of b');
  });
});
