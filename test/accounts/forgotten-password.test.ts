/**
 * Forgotten passwords (SPEC §4.16), as a person does it — **Forgot your password?**, the mail a
 * real SMTP server receives, the link, the new password — and as an attacker tries it: telling
 * which addresses have accounts, using a link twice (also at once), after the password
 * changed, after it expired, a newer link beside an older one, skipping the second factor,
 * flooding an address with mail. Both backends.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { startServer, PASSWORD, type TestServer } from '../support/server.ts';
import { linkIn, SMTP_PASSWORD, startSmtpServer, type TestSmtpServer } from '../support/smtp.ts';
import { secretOnPage, totpCode } from '../support/second-factors.ts';
import { UserAgent } from '../support/user-agent.ts';
import { until } from '../support/waits.ts';

const NEW_PASSWORD = 'a new and rather long passphrase';
const MAIL_FROM = 'Gatehouse Test <accounts@example.com>';
const ACCOUNT_LIMIT = 4;

for (const backend of BACKENDS) {
  describe(`forgotten passwords (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let smtp: TestSmtpServer;

    before(async () => {
      smtp = await startSmtpServer();
      server = await startServer(backend, { SMTP_URL: smtp.url, MAIL_FROM, LOGIN_FAILURES_PER_ACCOUNT: String(ACCOUNT_LIMIT) });
    });
    after(async () => {
      await server?.close();
      await smtp?.close();
    });

    /** Asks for a reset link for `email` through the page, as a visitor: the answer. */
    async function askForLink(email: string, agent = new UserAgent(server.url)) {
      const form = await agent.visit('/password/forgot');
      return agent.submit(form.html, '/password/forgot', { email });
    }

    /** Asks for a link for the person and returns it, read from the mail their address receives. */
    async function mailedLink(email: string): Promise<string> {
      const asked = await askForLink(email);
      assert.equal(asked.response.status, 200);
      return linkIn(await smtp.next(email), server.url, '/password/reset');
    }

    /** Opens the link and sets `password` (twice): the answer. */
    async function reset(link: string, password = NEW_PASSWORD, again = password, agent = new UserAgent(server.url)) {
      const form = await agent.visit(link);
      if (form.response.status !== 200) return form;
      return agent.submit(form.html, '/password/reset', { password, password_again: again });
    }

    const auditTypes = async (userId: string) =>
      (await server.store.db.selectFrom('audit_events').select('type').where('user_id', '=', userId).orderBy('id').execute()).map((row) => row.type);

    test('the login page offers it; the mail has a text and an HTML part with a working link, from MAIL_FROM; the new password works and the old does not', async () => {
      const alice = await server.createUser('alice');
      const login = await new UserAgent(server.url).visit('/login');
      assert.match(login.html, /<a href="\/password\/forgot" id="forgot-password">Forgot your password\?<\/a>/);

      const signedIn = new UserAgent(server.url);
      await signedIn.login('alice');
      const asked = await askForLink('Alice@Example.com');
      assert.equal(asked.response.status, 200);
      assert.match(asked.html, /id="reset-sent"/);
      const mail = await smtp.next('alice@example.com'); // to the address as the account has it
      assert.equal(mail.from, '"Gatehouse Test" <accounts@example.com>'); // MAIL_FROM, as a mail client shows it
      assert.equal(mail.subject, 'Reset your password');
      const link = linkIn(mail, server.url, '/password/reset');
      assert.match(link, /\?token=gpr_[A-Za-z0-9_-]{43}$/);
      assert.ok(mail.html.includes(link.replace(/&/g, '&amp;')), 'the HTML part has the same link');
      assert.match(mail.text, /works once, for 30 minutes/);
      // Only the link's hash is stored; the queue never held it.
      const token = new URL(link).searchParams.get('token')!;
      const outbox = JSON.stringify(await server.store.db.selectFrom('mail_outbox').selectAll().execute());
      const links = JSON.stringify(await server.store.db.selectFrom('account_links').selectAll().execute());
      assert.ok(!outbox.includes(token) && !links.includes(token));

      const mismatch = await reset(link, NEW_PASSWORD, 'something else entirely');
      assert.equal(mismatch.response.status, 400);
      assert.match(mismatch.html, /The two passwords differ/);
      const common = await reset(link, 'Password1');
      assert.equal(common.response.status, 400);
      assert.match(common.html, /one of the most common passwords/);
      const done = await reset(link);
      assert.equal(done.response.status, 200);
      assert.match(done.html, /id="password-reset-done"/);

      // Every session ended; the old password is refused, the new one logs in.
      assert.equal((await signedIn.visit('/account/security')).response.url.includes('/login'), true);
      assert.equal((await new UserAgent(server.url).login('alice', PASSWORD)).response.status, 401);
      assert.equal((await new UserAgent(server.url).login('alice', NEW_PASSWORD)).redirect, null);
      const notice = await smtp.next('alice@example.com');
      assert.equal(notice.subject, 'Your password was changed');
      assert.ok(!notice.text.includes(NEW_PASSWORD), 'mail never holds a password');

      // Used once: the link is gone.
      const again = await new UserAgent(server.url).visit(link);
      assert.equal(again.response.status, 410);
      assert.match(again.html, /This link is not valid/);
      // The notice's audit event follows its delivery (mail.ts `deliver`).
      await until('the notice is audited', async () => (await auditTypes(alice.id)).filter((type) => type === 'mail_sent').length === 2);
      assert.deepEqual(
        (await auditTypes(alice.id)).filter((type) => type !== 'login_succeeded' && type !== 'login_failed'),
        ['password_reset_requested', 'mail_sent', 'password_reset', 'mail_sent'],
      );
      // No token, and not the SMTP password, in the log.
      const log = server.logs.join('');
      assert.ok(!log.includes(token) && !log.includes(SMTP_PASSWORD));
    });

    test('the answer is the same for an address no account has, and nothing is sent there', async () => {
      await server.createUser('bruno');
      const known = await askForLink('bruno@example.com');
      const unknown = await askForLink('nobody@example.com');
      const shape = (html: string) => html.replace(/value="[^"]*"/g, '').replace(/(bruno|nobody)@example\.com/g, 'ADDRESS');
      assert.equal(unknown.response.status, known.response.status);
      assert.equal(shape(unknown.html), shape(known.html));
      await smtp.next('bruno@example.com');
      // The unknown address's message was queued like any other, and composed to nothing.
      const rows = await server.store.db.selectFrom('mail_outbox').select(['to_address', 'state']).where('to_address', '=', 'nobody@example.com').execute();
      assert.equal(rows.length, 1);
      for (let i = 0; i < 200 && rows[0]!.state === 'pending'; i++) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        rows[0] = await server.store.db
          .selectFrom('mail_outbox')
          .select(['to_address', 'state'])
          .where('to_address', '=', 'nobody@example.com')
          .executeTakeFirstOrThrow();
      }
      assert.equal(rows[0]!.state, 'skipped');
      assert.ok(!smtp.offered.includes('nobody@example.com'));
    });

    test('a link stops working when the password changes, when a newer one is sent, and after 30 minutes', async () => {
      const carol = await server.createUser('carol');
      const first = await mailedLink('carol@example.com');
      const second = await mailedLink('carol@example.com');
      assert.equal((await new UserAgent(server.url).visit(first)).response.status, 410, 'the newer link replaces the older');
      assert.equal((await new UserAgent(server.url).visit(second)).response.status, 200);
      // The person logs in and changes the password themselves: the outstanding link is void.
      const agent = new UserAgent(server.url);
      await agent.login('carol');
      const security = await agent.visit('/account/security');
      const changed = await agent.submit(security.html, '/account/security/password', {
        current: PASSWORD,
        password: NEW_PASSWORD,
        password_again: NEW_PASSWORD,
      });
      assert.equal(changed.response.status, 200);
      assert.equal((await reset(second, 'yet another long passphrase')).response.status, 410);
      await smtp.next('carol@example.com'); // the change's notice

      const third = await mailedLink('carol@example.com');
      server.advance(31 * 60);
      try {
        assert.equal((await new UserAgent(server.url).visit(third)).response.status, 410);
      } finally {
        server.advance(-31 * 60);
      }
      assert.ok((await auditTypes(carol.id)).includes('password_changed'));
    });

    test('the same link used twice at once sets one password', async () => {
      await server.createUser('dmitri');
      const link = await mailedLink('dmitri@example.com');
      const agents = [new UserAgent(server.url), new UserAgent(server.url)];
      const forms = await Promise.all(agents.map((agent) => agent.visit(link)));
      const answers = await Promise.all(
        agents.map((agent, i) => agent.submit(forms[i]!.html, '/password/reset', { password: `${NEW_PASSWORD} ${i}`, password_again: `${NEW_PASSWORD} ${i}` })),
      );
      assert.deepEqual(answers.map((answer) => answer.response.status).sort(), [200, 410]);
      const winner = answers.findIndex((answer) => answer.response.status === 200);
      assert.equal((await new UserAgent(server.url).login('dmitri', `${NEW_PASSWORD} ${winner}`)).redirect, null);
      assert.equal((await new UserAgent(server.url).login('dmitri', `${NEW_PASSWORD} ${1 - winner}`)).response.status, 401);
    });

    test('a person with an authenticator app still needs it after a reset', async () => {
      await server.createUser('erin');
      const agent = new UserAgent(server.url);
      await agent.login('erin');
      const security = await agent.visit('/account/security');
      const setUp = await agent.submit(security.html, '/account/security/app');
      const secret = secretOnPage(setUp.html);
      const confirmed = await agent.submit(setUp.html, '/account/security/app/confirm', { code: totpCode(secret) });
      assert.equal(confirmed.response.status, 200);

      assert.equal((await reset(await mailedLink('erin@example.com'))).response.status, 200);
      const login = await new UserAgent(server.url).login('erin', NEW_PASSWORD);
      assert.match(login.response.url, /\/login\/second-factor/, 'the new password leads to the second step, not in');
    });

    test('requests are throttled per account, whether or not it exists, and per address', async () => {
      await server.createUser('frank');
      for (const email of ['frank@example.com', 'ghost@example.com']) {
        const answers = [];
        for (let i = 0; i <= ACCOUNT_LIMIT; i++) answers.push((await askForLink(email)).response);
        assert.deepEqual(
          answers.map((answer) => answer.status),
          [...Array(ACCOUNT_LIMIT).fill(200), 429],
          email,
        );
        assert.ok(Number(answers.at(-1)!.headers.get('retry-after')) > 0);
      }
      // At once, the limit holds too.
      await server.createUser('gina');
      const together = await Promise.all(Array.from({ length: ACCOUNT_LIMIT * 2 }, () => askForLink('gina@example.com')));
      assert.equal(together.filter((answer) => answer.response.status === 200).length, ACCOUNT_LIMIT);
    });

    test('bad input gets a clear 400 and queues nothing', async () => {
      const before = (await server.store.db.selectFrom('mail_outbox').select('id').execute()).length;
      for (const email of ['', 'not an address', `${'a'.repeat(400)}@example.com`, '<script>alert(1)</script>']) {
        const answer = await askForLink(email);
        assert.equal(answer.response.status, 400, email);
        assert.match(answer.html, /Email must be an email address/);
        assert.ok(!answer.html.includes('<script>'));
      }
      const forged = await new UserAgent(server.url).visit('/password/reset?token=gpr_' + 'A'.repeat(43));
      assert.equal(forged.response.status, 410);
      assert.equal((await server.store.db.selectFrom('mail_outbox').select('id').execute()).length, before);
    });
  });
}
