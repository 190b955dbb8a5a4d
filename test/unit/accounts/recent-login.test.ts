/**
 * The "recent login" rule (src/accounts/recent-login.ts, SPEC §4.12): a change to a person's
 * factors needs a login within the last 5 minutes with every factor they have — `mfa` for a
 * person with a passkey or an app, the password alone for one without; and adding a factor
 * counts as using it (provingNewFactor), once. Real collaborators over an in-memory SQLite
 * database, with a clock the test moves.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { PASSKEY_LOGIN_AMR, PASSWORD_LOGIN_AMR, type SignedIn } from '../../../src/login.ts';
import {
  includesSecondFactor,
  isRecentLogin,
  provingNewFactor,
  RECENT_LOGIN_MS,
  requireRecentLogin,
  secondFactorsOf,
} from '../../../src/accounts/recent-login.ts';
import { sessionLogin, startSession } from '../../../src/accounts/sessions.ts';
import { allOrNothing } from '../../../src/store/second-factors.ts';
import type { User } from '../../../src/store/schema.ts';
import { ADDRESS, memoryContext, person, setUpApp, type TestContext } from '../support/context.ts';

/** A password and an app or recovery code (SPEC §4.12). */
const PASSWORD_AND_CODE = 'pwd otp mfa';

describe('recent login', () => {
  let t: TestContext;
  /** Has no second factor. */
  let alice: User;
  /** Has an authenticator app. */
  let bob: User;

  before(async () => {
    t = await memoryContext();
    alice = await person(t.ctx, 'alice');
    bob = await person(t.ctx, 'bob');
    await setUpApp(t.ctx, bob);
  });
  after(() => t.close());

  /** `user`'s login `ago` milliseconds before now, with `amr`. */
  const login = (user: User, amr: string, ago = 0): SignedIn => ({ user, login: { authTime: t.clock.now - ago, amr, sid: null } });

  test('includesSecondFactor: a passkey or an app is one; nothing (recovery codes alone) is none', () => {
    assert.equal(includesSecondFactor({ passkeys: 0, app: false }), false);
    assert.equal(includesSecondFactor({ passkeys: 1, app: false }), true);
    assert.equal(includesSecondFactor({ passkeys: 0, app: true }), true);
  });

  test("secondFactorsOf reads the person's factors from the database", async () => {
    assert.deepEqual(await secondFactorsOf(t.ctx, alice.id), { passkeys: 0, app: false });
    assert.deepEqual(await secondFactorsOf(t.ctx, bob.id), { passkeys: 0, app: true });
  });

  test('the window is 5 minutes, its edge included', () => {
    assert.equal(RECENT_LOGIN_MS, 5 * 60_000);
    const none = { passkeys: 0, app: false };
    assert.equal(isRecentLogin(t.ctx, login(alice, PASSWORD_LOGIN_AMR, RECENT_LOGIN_MS), none), true);
    assert.equal(isRecentLogin(t.ctx, login(alice, PASSWORD_LOGIN_AMR, RECENT_LOGIN_MS + 1), none), false);
    assert.equal(isRecentLogin(t.ctx, login(alice, PASSWORD_AND_CODE, RECENT_LOGIN_MS + 1), none), false, 'a second factor does not stretch it');
  });

  test('a person without a second factor needs only the password', async () => {
    assert.ok(await requireRecentLogin(t.ctx, login(alice, PASSWORD_LOGIN_AMR, 4 * 60_000)));
    assert.equal(await requireRecentLogin(t.ctx, login(alice, PASSWORD_LOGIN_AMR, 6 * 60_000)), null);
  });

  test('a person with a second factor needs mfa in the login: a password alone is refused, however recent', async () => {
    assert.equal(await requireRecentLogin(t.ctx, login(bob, PASSWORD_LOGIN_AMR)), null);
    assert.equal(await requireRecentLogin(t.ctx, login(bob, 'pwd otp')), null, 'otp without mfa is not two factors');
    const recent = await requireRecentLogin(t.ctx, login(bob, PASSWORD_AND_CODE, 60_000));
    assert.equal(recent?.user.id, bob.id);
    assert.ok(await requireRecentLogin(t.ctx, login(bob, PASSKEY_LOGIN_AMR)));
    assert.equal(await requireRecentLogin(t.ctx, login(bob, PASSWORD_AND_CODE, 6 * 60_000)), null);
  });

  test('provingNewFactor: nothing for a login that has mfa already, or without a (well-formed) session', async () => {
    const withMfa = (await requireRecentLogin(t.ctx, login(bob, PASSWORD_AND_CODE)))!;
    const session = await startSession(t.ctx, bob.id, undefined, PASSWORD_AND_CODE, null, ADDRESS);
    assert.equal(provingNewFactor(t.ctx, withMfa, session, PASSWORD_AND_CODE), null);
    const passwordOnly = (await requireRecentLogin(t.ctx, login(alice, PASSWORD_LOGIN_AMR)))!;
    assert.equal(provingNewFactor(t.ctx, passwordOnly, undefined, PASSWORD_AND_CODE), null);
    assert.equal(provingNewFactor(t.ctx, passwordOnly, 'not a session token', PASSWORD_AND_CODE), null);
  });

  test("provingNewFactor: the adding session is replaced by one whose login has the factor's amr, under a new token", async () => {
    const session = await startSession(t.ctx, alice.id, undefined, PASSWORD_LOGIN_AMR, null, ADDRESS);
    const signedIn = (await sessionLogin(t.ctx, session, ADDRESS))!;
    assert.equal(signedIn.login.amr, PASSWORD_LOGIN_AMR);
    const proof = provingNewFactor(t.ctx, (await requireRecentLogin(t.ctx, signedIn))!, session, PASSWORD_AND_CODE);
    assert.ok(proof);
    assert.notEqual(proof.session, session);
    assert.equal(await allOrNothing(t.ctx.db, { session: proof.record }, []), null);
    assert.equal(await sessionLogin(t.ctx, session, ADDRESS), null, 'the old token is gone');
    const upgraded = (await sessionLogin(t.ctx, proof.session, ADDRESS))!;
    assert.ok(upgraded.login.amr.split(' ').includes('mfa'), upgraded.login.amr);
    assert.ok(upgraded.login.amr.split(' ').includes('pwd'), upgraded.login.amr);
    assert.equal(upgraded.login.authTime, t.clock.now, 'the login counts from the proof');
    assert.equal(upgraded.login.sid, signedIn.login.sid, 'the same login: its sid stays');
  });

  test('provingNewFactor: a session whose login went stale before the write is not upgraded, and stays as it was', async () => {
    const session = await startSession(t.ctx, alice.id, undefined, PASSWORD_LOGIN_AMR, null, ADDRESS);
    const recent = (await requireRecentLogin(t.ctx, (await sessionLogin(t.ctx, session, ADDRESS))!))!;
    t.clock.now += RECENT_LOGIN_MS + 1_000; // the factor is proven after the window closed
    const proof = provingNewFactor(t.ctx, recent, session, PASSWORD_AND_CODE)!;
    assert.equal(await allOrNothing(t.ctx.db, { session: proof.record }, []), 'session');
    assert.equal((await sessionLogin(t.ctx, session, ADDRESS))?.login.amr, PASSWORD_LOGIN_AMR);
    assert.equal(await sessionLogin(t.ctx, proof.session, ADDRESS), null);
  });
});
