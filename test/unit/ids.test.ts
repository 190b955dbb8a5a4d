/** Time-ordered UUIDs (RFC 9562 §5.7) for grant ids. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { timeOrderedUuid } from '../../src/ids.ts';
import { isUuid } from '../../src/oauth/client-auth.ts';

describe('timeOrderedUuid', () => {
  const at = Date.UTC(2026, 10, 23, 4, 5, 6, 789);

  test('is a lowercase UUID, version 7, RFC 9562 variant', () => {
    for (let i = 0; i < 100; i++) {
      const id = timeOrderedUuid(at);
      assert.ok(isUuid(id), id);
      assert.equal(id[14], '7', id);
      assert.match(id[19]!, /[89ab]/, id);
    }
  });

  test('starts with the 48-bit time in milliseconds', () => {
    const id = timeOrderedUuid(at);
    assert.equal(parseInt(id.slice(0, 8) + id.slice(9, 13), 16), at);
    assert.ok(timeOrderedUuid(0).startsWith('00000000-0000-7'));
    assert.ok(timeOrderedUuid(2 ** 48 - 1).startsWith('ffffffff-ffff-7'));
  });

  test('sorts by time, as text too', () => {
    const ids = [at, at + 1, at + 1000, at + 86_400_000, at + 365 * 86_400_000].map((t) => timeOrderedUuid(t));
    assert.deepEqual([...ids].sort(), ids);
  });

  test('ids made in the same millisecond differ', () => {
    const ids = new Set(Array.from({ length: 10_000 }, () => timeOrderedUuid(at)));
    assert.equal(ids.size, 10_000);
  });
});
