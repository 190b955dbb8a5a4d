/**
 * How metadata document fetches share their slots (src/oauth/fetch-slots.ts, SPEC §4.8
 * "fetched fairly"): per host, per requesting address, in all, and who goes next.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { BUSY, FetchSlots } from '../../src/oauth/fetch-slots.ts';

/** A task that runs until `finish()` is called, recording that it started. */
function gate(started: string[], name: string) {
  let finish!: () => void;
  const done = new Promise<string>((resolve) => (finish = () => resolve(name)));
  return { task: () => (started.push(name), done), finish: () => finish() };
}

describe('fetch slots', () => {
  test('a host gets perHost slots and an address perAddress, running or waiting; others go on', async () => {
    const slots = new FetchSlots({ atOnce: 4, perHost: 2, perAddress: 3, maxWaiting: 10, maxWaitMs: 5000 });
    const started: string[] = [];
    const hostile = [1, 2, 3].map((i) => gate(started, `hostile ${i}`));
    const runs = hostile.map((g) => slots.run('evil.example', 'attacker', g.task));
    assert.equal(await slots.run('evil.example', 'attacker', async () => 'fourth'), BUSY, 'the address has three held');
    assert.deepEqual(started, ['hostile 1', 'hostile 2'], 'the third waits for the host');
    assert.equal(await slots.run('good.example', 'someone', async () => 'fetched'), 'fetched', 'another host is not held up');
    hostile[0]!.finish();
    assert.equal(await runs[0], 'hostile 1');
    assert.deepEqual(started, ['hostile 1', 'hostile 2', 'hostile 3']);
    hostile[1]!.finish();
    hostile[2]!.finish();
    await Promise.all(runs);
  });

  test('a freed slot goes to the address running the fewest; a waiter with no slot in time is BUSY', async () => {
    const slots = new FetchSlots({ atOnce: 2, perHost: 2, perAddress: 4, maxWaiting: 10, maxWaitMs: 200 });
    const started: string[] = [];
    const a = [1, 2, 3].map((i) => gate(started, `a${i}`));
    const runs = a.map((g, i) => slots.run(`host${i}`, 'a', g.task));
    const b = gate(started, 'b1');
    const late = slots.run('host9', 'b', b.task);
    assert.deepEqual(started, ['a1', 'a2']);
    a[0]!.finish();
    await runs[0];
    assert.deepEqual(started, ['a1', 'a2', 'b1'], 'b, running none, goes before a, which waited longer');
    assert.equal(await runs[2], BUSY, 'a3 found no slot within maxWaitMs');
    a[1]!.finish();
    b.finish();
    assert.equal(await late, 'b1');
  });
});
