/**
 * Secrets at rest (protocol/seal.ts): a kind sealed under KEYS_SECRET when it is set is stored
 * as it is without it, but people's provider tokens are only ever stored sealed — asked to store
 * them without KEYS_SECRET, seal refuses rather than hand back the tokens in clear.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { seal } from '../../src/protocol/seal.ts';

const SECRET = 'k'.repeat(32);

test("people's provider tokens are never stored in clear: without KEYS_SECRET, sealing them is refused", async () => {
  await assert.rejects(seal('provider_tokens', 'owner', '{"access_token":"upstream"}', null), /stored only sealed: KEYS_SECRET is not set/);
  const sealed = await seal('provider_tokens', 'owner', '{"access_token":"upstream"}', SECRET);
  assert.equal(sealed.encrypted, 1);
  assert.ok(!sealed.value.includes('upstream'));
});

test('a kind that may be stored in clear is, without KEYS_SECRET, and sealed with it', async () => {
  assert.deepEqual(await seal('connections', 'owner', 'client-secret', null), { value: 'client-secret', encrypted: 0 });
  assert.equal((await seal('connections', 'owner', 'client-secret', SECRET)).encrypted, 1);
});
