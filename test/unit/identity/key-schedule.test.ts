/**
 * The signing keys' life cycle (src/identity/key-schedule.ts, SPEC §4.9), on an in-memory
 * SQLite database with an injected clock: the first start makes one active key per algorithm;
 * after SIGNING_KEY_ROTATION_DAYS a `next` key is published, and signs PUBLICATION_LEAD_MS
 * later while the old one retires; a retiring key is removed after retirementTailMs;
 * `rotateKeys` and `revokeKey` as the CLI calls them. The ring's timer is not waited for:
 * the test runs its step (`ctx.keys.refresh()`), as the timer would.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { decodeProtectedHeader } from 'jose';
import { COMMAND_LINE } from '../../../src/audit.ts';
import {
  JWKS_MAX_AGE,
  KeyInputError,
  listKeys,
  PUBLICATION_LEAD_MS,
  retirementTailMs,
  revokeKey,
  rotateKeys,
  SIGNING_ALGS,
  type KeyView,
} from '../../../src/identity/key-schedule.ts';
import { memoryContext, type TestContext } from '../support/context.ts';

const DAY_MS = 86_400_000;
const ROTATION_DAYS = 30;

/** The keys as `state alg`, sorted: what the schedule decided, without kids and times. */
const states = (keys: readonly KeyView[]) => keys.map((k) => `${k.state} ${k.alg}`).toSorted();
const published = (t: TestContext) => t.ctx.keys.jwks().keys.map((k) => k.kid!);
const signer = async (t: TestContext, alg: 'ES256' | 'RS256') => decodeProtectedHeader(await t.ctx.keys.signJwt(alg, { typ: 'JWT' }, { exp: 0 })).kid;

describe('the key schedule', () => {
  let t: TestContext;

  before(async () => {
    t = await memoryContext({ SIGNING_KEY_ROTATION_DAYS: String(ROTATION_DAYS) });
  });
  after(() => t.close());

  test('the first start makes exactly one active key per algorithm, published and signing', async () => {
    const keys = await listKeys(t.ctx);
    assert.deepEqual(states(keys), ['active ES256', 'active RS256']);
    assert.deepEqual(SIGNING_ALGS.toSorted(), ['ES256', 'RS256']);
    assert.deepEqual(published(t).toSorted(), keys.map((k) => k.kid).toSorted());
    for (const key of keys) assert.equal(await signer(t, key.alg), key.kid);
    const jwk = t.ctx.keys.jwks().keys.find((k) => k.alg === 'RS256')!;
    assert.deepEqual(Object.keys(jwk).toSorted(), ['alg', 'e', 'kid', 'kty', 'n', 'use'], 'nothing private is published');
  });

  test('nothing changes before the rotation is due', async () => {
    const first = await listKeys(t.ctx);
    t.clock.now += ROTATION_DAYS * DAY_MS - 1;
    await t.ctx.keys.refresh();
    assert.deepEqual(await listKeys(t.ctx), first);
  });

  test('after SIGNING_KEY_ROTATION_DAYS a next key is published that activates after the publication lead; the old one retires, then is removed', async () => {
    assert.equal(PUBLICATION_LEAD_MS, 6 * JWKS_MAX_AGE * 1000, 'six times the JWKS max-age');
    assert.ok(PUBLICATION_LEAD_MS >= 3_600_000, 'at least an hour');
    const old = await listKeys(t.ctx);
    t.clock.now += 1;
    await t.ctx.keys.refresh();
    const rotated = await listKeys(t.ctx);
    assert.deepEqual(states(rotated), ['active ES256', 'active RS256', 'next ES256', 'next RS256']);
    const next = rotated.filter((k) => k.state === 'next');
    for (const key of next) assert.equal(key.activatesAt, t.clock.now + PUBLICATION_LEAD_MS);
    assert.equal(published(t).length, 4, 'the next keys are in the JWKS');
    for (const key of old) assert.equal(await signer(t, key.alg), key.kid, 'the old keys still sign');

    t.clock.now += PUBLICATION_LEAD_MS - 1;
    await t.ctx.keys.refresh();
    assert.deepEqual(states(await listKeys(t.ctx)), states(rotated), 'not a millisecond early');

    t.clock.now += 1;
    await t.ctx.keys.refresh();
    const activated = await listKeys(t.ctx);
    assert.deepEqual(states(activated), ['active ES256', 'active RS256', 'retiring ES256', 'retiring RS256']);
    for (const key of next) assert.equal(await signer(t, key.alg), key.kid, 'the next keys sign now');
    const tail = retirementTailMs(t.ctx.config);
    for (const key of activated.filter((k) => k.state === 'retiring')) {
      assert.ok(old.some((o) => o.kid === key.kid));
      assert.equal(key.retiresAt, t.clock.now + tail);
    }
    assert.equal(published(t).length, 4, 'the retiring keys are still in the JWKS');

    t.clock.now += tail - 1;
    await t.ctx.keys.refresh();
    assert.equal((await listKeys(t.ctx)).length, 4);
    t.clock.now += 1;
    await t.ctx.keys.refresh();
    const remaining = await listKeys(t.ctx);
    assert.deepEqual(states(remaining), ['active ES256', 'active RS256']);
    assert.deepEqual(published(t).toSorted(), next.map((k) => k.kid).toSorted());
  });

  test('the retirement tail outlasts everything a key signed: JWT access tokens, ID tokens', () => {
    const { config } = t.ctx;
    assert.ok(retirementTailMs(config) >= Math.max(config.jwtAccessTokenTtl, config.idTokenTtl) * 1000);
    assert.ok(retirementTailMs({ ...config, idTokenTtl: 86_400 }) >= 86_400_000);
  });

  test('rotateKeys: a next key per algorithm after the lead; again keeps it; now: new active keys at once, the next ones withdrawn', async () => {
    const active = await listKeys(t.ctx);
    const rotated = await rotateKeys(t.ctx, { now: false }, COMMAND_LINE);
    assert.deepEqual(states(rotated), ['active ES256', 'active RS256', 'next ES256', 'next RS256']);
    for (const key of rotated.filter((k) => k.state === 'next')) assert.equal(key.activatesAt, t.clock.now + PUBLICATION_LEAD_MS);
    assert.deepEqual(await rotateKeys(t.ctx, { now: false }, COMMAND_LINE), rotated, 'an algorithm that has a next key keeps it');

    const now = await rotateKeys(t.ctx, { now: true }, COMMAND_LINE);
    assert.deepEqual(states(now), ['active ES256', 'active RS256', 'retiring ES256', 'retiring RS256']);
    const kids = (state: string, keys: readonly KeyView[]) => keys.filter((k) => k.state === state).map((k) => k.kid);
    assert.deepEqual(kids('retiring', now).toSorted(), active.map((k) => k.kid).toSorted());
    for (const kid of kids('next', rotated)) assert.ok(!now.some((k) => k.kid === kid), 'the next key not yet signing is gone');
    for (const key of now.filter((k) => k.state === 'active')) {
      assert.equal(key.activatesAt, t.clock.now);
      assert.equal(await signer(t, key.alg), key.kid, 'the new keys sign at once');
    }
  });

  test('revokeKey: an unknown kid is a KeyInputError; a retiring key just goes; the active one is replaced at once', async () => {
    await assert.rejects(revokeKey(t.ctx, 'no-such-kid', COMMAND_LINE), (error: unknown) => {
      assert.ok(error instanceof KeyInputError);
      assert.match(error.message, /no-such-kid/);
      return true;
    });
    const keys = await listKeys(t.ctx);
    const retiring = keys.find((k) => k.state === 'retiring' && k.alg === 'ES256')!;
    assert.equal((await revokeKey(t.ctx, retiring.kid, COMMAND_LINE)).kid, retiring.kid);
    assert.ok(!published(t).includes(retiring.kid), 'it leaves the JWKS at once');
    assert.equal((await listKeys(t.ctx)).filter((k) => k.alg === 'ES256').length, 1);

    const active = keys.find((k) => k.state === 'active' && k.alg === 'RS256')!;
    const signed = await t.ctx.keys.signJwt('RS256', { typ: 'JWT' }, { exp: Math.floor(t.clock.now / 1000) + 60 });
    assert.ok(await t.ctx.keys.verifyJwt(signed, { typ: 'JWT' }));
    const revoked = await revokeKey(t.ctx, active.kid, COMMAND_LINE);
    assert.deepEqual([revoked.kid, revoked.state], [active.kid, 'active']);
    assert.equal(await t.ctx.keys.verifyJwt(signed, { typ: 'JWT' }), null, 'what it signed no longer verifies');
    const remaining = await listKeys(t.ctx);
    const replacement = remaining.find((k) => k.state === 'active' && k.alg === 'RS256');
    assert.ok(replacement && replacement.kid !== active.kid);
    assert.equal(await signer(t, 'RS256'), replacement.kid);
    assert.deepEqual(states(remaining), ['active ES256', 'active RS256', 'retiring RS256'], 'one active key per algorithm');
  });
});
