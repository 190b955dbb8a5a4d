/**
 * The login decision (accounts/login.ts `logIn`) on its own, without HTTP: which attempts
 * open a session, that a refusal reads the same whether or not the account exists, that the
 * throttle is asked before the password is checked (so a throttled attempt is refused
 * unchecked, even with the right password), and that a new login ends the session it came
 * with. Real collaborators over an in-memory SQLite database and the in-process throttle.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { logIn, type LoginAttempt } from '../../src/accounts/login.ts';
import { sessionUser } from '../../src/accounts/sessions.ts';
import { createAccount, disableUser, findUserNamed } from '../../src/accounts/users.ts';
import { COMMAND_LINE } from '../../src/audit.ts';
import { loadConfig } from '../../src/config.ts';
import { type OpenContext } from '../../src/context.ts';
import { openContext } from '../../src/open-context.ts';
import { migrate, openStore, type Store } from '../../src/store/database.ts';
import { listAuditEvents } from '../../src/store/audit-events.ts';

const PASSWORD = 'correct horse battery staple';

describe('the login decision', () => {
  let store: Store;
  let ctx: OpenContext;

  before(async () => {
    const config = loadConfig({ DATABASE_URL: 'sqlite::memory:', LOGIN_FAILURES_PER_ACCOUNT: '3', LOGIN_FAILURES_PER_ADDRESS: '100' });
    store = openStore(config.database);
    await migrate(store);
    ctx = await openContext(config, store, { info() {}, warn() {}, error() {} });
    for (const username of ['alice', 'bob', 'carol']) {
      await createAccount(ctx.db, { username, email: `${username}@example.com`, password: PASSWORD, isAdmin: false }, ctx.now());
    }
  });
  after(async () => {
    await ctx.close();
    await store.close();
  });

  const attempt = (login: string, password: string, fields: Partial<LoginAttempt> = {}): LoginAttempt => ({
    login,
    password,
    address: '192.0.2.7',
    session: undefined,
    ...fields,
  });

  test('the right password opens a session for the user, by username or by email', async () => {
    for (const login of ['alice', 'alice@example.com']) {
      const result = await logIn(ctx, attempt(login, PASSWORD));
      assert.ok(result.ok, login);
      assert.equal(result.user.username, 'alice');
      assert.equal((await sessionUser(ctx, result.session, '192.0.2.7'))?.username, 'alice');
    }
  });

  test('a wrong password and an unknown account are both refused, and the audit trail tells them apart without what was typed', async () => {
    const wrong = await logIn(ctx, attempt('bob', 'not the password'));
    const unknown = await logIn(ctx, attempt('nobody', 'my password?'));
    assert.deepEqual([wrong.ok, unknown.ok], [false, false]);
    assert.deepEqual([!wrong.ok && wrong.reason, !unknown.ok && unknown.reason], ['wrong_password', 'unknown_account']);
    const events = await listAuditEvents(ctx.db, { type: 'login_failed', limit: 50 });
    assert.deepEqual(events.map((event) => event.detail?.reason).sort(), ['unknown_account', 'wrong_password']);
    assert.ok(!JSON.stringify(events).includes('my password?') && !JSON.stringify(events).includes('not the password'), 'nothing typed is recorded');
  });

  test('a disabled account is refused, even with its password', async () => {
    await disableUser(ctx, (await findUserNamed(ctx, 'carol'))!, COMMAND_LINE);
    const result = await logIn(ctx, attempt('carol', PASSWORD));
    assert.equal(!result.ok && result.reason, 'account_disabled');
  });

  test('past the limit of failures the account is refused unchecked, even with the right password', async () => {
    const failures = await Promise.all(Array.from({ length: 6 }, () => logIn(ctx, attempt('bob@example.com', 'guess', { address: '198.51.100.1' }))));
    const throttled = failures.filter((result) => !result.ok && result.reason === 'throttled');
    assert.ok(throttled.length >= 3, 'of simultaneous guesses, at most the limit are checked (3, one used by the test above)');
    const right = await logIn(ctx, attempt('bob', PASSWORD, { address: '198.51.100.2' }));
    assert.equal(!right.ok && right.reason, 'throttled');
    assert.ok(!right.ok && right.reason === 'throttled' && right.retryAfter > 0);
  });

  test('a login ends the session it came with: that session is never reused', async () => {
    const first = await logIn(ctx, attempt('alice', PASSWORD));
    assert.ok(first.ok);
    const second = await logIn(ctx, attempt('alice', PASSWORD, { session: first.session }));
    assert.ok(second.ok);
    assert.notEqual(second.session, first.session);
    assert.equal(await sessionUser(ctx, first.session, '192.0.2.7'), null);
  });
});
