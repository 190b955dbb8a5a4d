/**
 * Second-factor codes (src/accounts/second-factors.ts, SPEC §4.12): what a code field is read
 * as (readCode), and a code accepted once — an app code (TOTP: SHA-1, 6 digits, 30 s, ±1
 * step) and a recovery code — through the exported functions, on an in-memory SQLite
 * database with a clock the test moves.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { requireRecentLogin } from '../../../src/accounts/recent-login.ts';
import { findPending, startPendingLogin } from '../../../src/accounts/second-step.ts';
import { beginAppSetup, generateRecoveryCodes, MAX_CODE_LENGTH, readCode, RECOVERY_CODE_COUNT, submitCode } from '../../../src/accounts/second-factors.ts';
import { sessionLogin } from '../../../src/accounts/sessions.ts';
import type { User } from '../../../src/store/schema.ts';
import { ADDRESS, memoryContext, person, setUpApp, totpCode, type TestContext } from '../support/context.ts';

/** A password and an app or recovery code (SPEC §4.12). */
const PASSWORD_AND_CODE = 'pwd otp mfa';

describe('readCode', () => {
  test('six digits are an app code, spaces and dashes ignored', () => {
    assert.deepEqual(readCode('123456'), { kind: 'totp', code: '123456' });
    assert.deepEqual(readCode(' 123 456 '), { kind: 'totp', code: '123456' });
    assert.deepEqual(readCode('123-456'), { kind: 'totp', code: '123456' });
  });

  test('ten letters and digits of the recovery alphabet are a recovery code, read without case, dashes or spaces', () => {
    const code = readCode('abcde-fghjk');
    assert.equal(code.kind, 'recovery');
    assert.deepEqual(readCode('ABCDE FGHJK'), code);
    assert.deepEqual(readCode('abcdefghjk'), code);
    assert.notDeepEqual(readCode('abcdefghjm'), code, 'another code, another hash');
    assert.ok(code.kind === 'recovery' && !code.hash.includes('abcde'), 'only a hash of it is kept');
  });

  test('anything else is malformed, with a problem to show', () => {
    for (const typed of ['', '   ', '12345', '1234567', 'abcdefghi', 'abcdefghjkm', 'abcdefghi1', 'abcdefghjl', '12345a', 'x'.repeat(MAX_CODE_LENGTH + 1)]) {
      const code = readCode(typed);
      assert.equal(code.kind, 'malformed', JSON.stringify(typed));
      assert.ok(code.kind === 'malformed' && code.problem.length > 0);
    }
    // The alphabet leaves out what reads alike: i, l, o, 0 and 1.
    assert.equal(readCode('abcdefghio').kind, 'malformed');
    assert.equal(readCode('abcdefgh01').kind, 'malformed');
  });
});

describe('accepting a code once', () => {
  let t: TestContext;
  let bob: User;
  let secret: string;
  /** The session the app's set-up started: a login with the app. */
  let session: string;

  before(async () => {
    t = await memoryContext();
    bob = await person(t.ctx, 'bob');
    ({ secret, session } = await setUpApp(t.ctx, bob));
  });
  after(() => t.close());

  /** Bob at the second step of a new login, after his password. */
  async function secondStep() {
    const pending = await findPending(t.ctx, await startPendingLogin(t.ctx, bob.id));
    assert.ok(pending);
    return { user: bob, pending };
  }

  test('the code of the step that confirmed the set-up is spent: it does not log in', async () => {
    assert.deepEqual(await submitCode(t.ctx, await secondStep(), totpCode(secret, t.clock.now), ADDRESS, undefined), { ok: false, reason: 'wrong_code' });
  });

  test('an app code logs in once, with amr pwd otp mfa; the same code again fails, also at another login', async () => {
    t.clock.now += 30_000;
    const code = totpCode(secret, t.clock.now);
    const done = await submitCode(t.ctx, await secondStep(), code, ADDRESS, undefined);
    assert.ok(done.ok);
    assert.equal((await sessionLogin(t.ctx, done.session, ADDRESS))?.login.amr, PASSWORD_AND_CODE);
    assert.deepEqual(await submitCode(t.ctx, await secondStep(), code, ADDRESS, undefined), { ok: false, reason: 'wrong_code' });
  });

  test('the window is one step either side: a code two steps old, or a wrong one, fails', async () => {
    t.clock.now += 5 * 30_000;
    assert.deepEqual(await submitCode(t.ctx, await secondStep(), totpCode(secret, t.clock.now - 60_000), ADDRESS, undefined), {
      ok: false,
      reason: 'wrong_code',
    });
    const wrong = String((Number(totpCode(secret, t.clock.now)) + 1) % 1_000_000).padStart(6, '0');
    assert.deepEqual(await submitCode(t.ctx, await secondStep(), wrong, ADDRESS, undefined), { ok: false, reason: 'wrong_code' });
    // The next step's code is still good (a clock running a little ahead).
    assert.ok((await submitCode(t.ctx, await secondStep(), totpCode(secret, t.clock.now + 30_000), ADDRESS, undefined)).ok);
  });

  test('a pending login is completed once: a second code at the same step finds it ended', async () => {
    t.clock.now += 5 * 30_000;
    const step = await secondStep();
    assert.ok((await submitCode(t.ctx, step, totpCode(secret, t.clock.now), ADDRESS, undefined)).ok);
    assert.deepEqual(await submitCode(t.ctx, step, totpCode(secret, t.clock.now + 30_000), ADDRESS, undefined), { ok: false, reason: 'expired' });
  });

  test('a recovery code logs in once, typed as shown or not; the others stay good', async () => {
    const recent = await requireRecentLogin(t.ctx, { user: bob, login: { authTime: t.clock.now, amr: PASSWORD_AND_CODE, sid: null } });
    assert.ok(recent);
    const codes = await generateRecoveryCodes(t.ctx, recent, session, ADDRESS);
    assert.equal(codes?.length, RECOVERY_CODE_COUNT);
    assert.match(codes![0]!, /^[a-z2-9]{5}-[a-z2-9]{5}$/);
    const first = await submitCode(t.ctx, await secondStep(), codes![0]!.toUpperCase().replace('-', ' '), ADDRESS, undefined);
    assert.ok(first.ok);
    assert.equal((await sessionLogin(t.ctx, first.session, ADDRESS))?.login.amr, PASSWORD_AND_CODE);
    assert.deepEqual(await submitCode(t.ctx, await secondStep(), codes![0]!, ADDRESS, undefined), { ok: false, reason: 'wrong_code' });
    assert.ok((await submitCode(t.ctx, await secondStep(), codes![1]!, ADDRESS, undefined)).ok);
  });

  test('a malformed code is refused before it is checked or counted', async () => {
    const refused = await submitCode(t.ctx, await secondStep(), 'nope', ADDRESS, undefined);
    assert.equal(refused.ok === false && refused.reason, 'malformed');
  });

  test('a second app is refused while the first is set up', async () => {
    assert.equal(await beginAppSetup(t.ctx, bob), null);
  });
});
