/**
 * The mail queue (SPEC §4.16) against a real SMTP server: a request never waits for mail, not
 * even for a server that does not answer; a message refused for now (4xx), or sent while the
 * SMTP server is down or refuses the credentials, is retried with backoff and arrives once; one
 * refused for good (5xx) is not retried; each outcome is audited, and neither the link nor the
 * SMTP password reaches the log. Both backends; several instances: test/multi/mail.test.ts.
 */
import assert from 'node:assert/strict';
import { createServer, type Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { freePort } from '../support/ports.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { SMTP_PASSWORD, SMTP_USER, startSmtpServer, type TestSmtpServer } from '../support/smtp.ts';
import { UserAgent } from '../support/user-agent.ts';
import { until } from '../support/waits.ts';

/** Asks for a reset link for `email` through the page: the answer, and how long it took. */
async function askForLink(server: TestServer, email: string) {
  const agent = new UserAgent(server.url);
  const form = await agent.visit('/password/forgot');
  const started = performance.now();
  const answer = await agent.submit(form.html, '/password/forgot', { email });
  return { status: answer.response.status, ms: performance.now() - started };
}

/** The queued rows to `to`, once none is pending any more (waiting up to `timeoutMs`). */
async function settled(server: TestServer, to: string, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const rows = await server.store.db.selectFrom('mail_outbox').select(['state', 'attempts']).where('to_address', '=', to).execute();
    if ((rows.length > 0 && rows.every((row) => row.state !== 'pending')) || Date.now() > deadline)
      return rows.map((row) => ({ ...row, attempts: Number(row.attempts) }));
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

const mailEvents = async (server: TestServer, userId: string) =>
  (
    await server.store.db
      .selectFrom('audit_events')
      .select(['type', 'detail'])
      .where('user_id', '=', userId)
      .where('type', 'like', 'mail_%')
      .orderBy('id')
      .execute()
  ).map((row): Record<string, unknown> => ({ type: row.type, ...(JSON.parse(row.detail ?? '{}') as Record<string, unknown>) }));

for (const backend of BACKENDS) {
  describe(`the mail queue (${backend.name})`, backendOptions(backend), () => {
    let smtp: TestSmtpServer;
    let server: TestServer;

    before(async () => {
      smtp = await startSmtpServer();
      server = await startServer(backend, { SMTP_URL: smtp.url });
    });
    after(async () => {
      await server?.close();
      await smtp?.close();
    });

    test('a message refused for now is sent on a later attempt, once; one refused for good is not tried again', async () => {
      const later = await server.createUser('later');
      smtp.refuse('later@example.com', 451, 1);
      assert.equal((await askForLink(server, 'later@example.com')).status, 200);
      const mail = await smtp.next('later@example.com');
      assert.equal(mail.subject, 'Reset your password');
      assert.deepEqual(await settled(server, 'later@example.com'), [{ state: 'sent', attempts: 2 }]);
      await until('both attempts are audited', async () => (await mailEvents(server, later.id)).length === 2);
      assert.deepEqual(await mailEvents(server, later.id), [
        { type: 'mail_failed', kind: 'password_reset', attempt: 1, reason: 'the SMTP server answered 451', retrying: true },
        { type: 'mail_sent', kind: 'password_reset', attempt: 2 },
      ]);
      assert.equal(smtp.received.filter((m) => m.to === 'later@example.com').length, 1);

      const never = await server.createUser('never');
      smtp.refuse('never@example.com', 550);
      assert.equal((await askForLink(server, 'never@example.com')).status, 200);
      assert.deepEqual(await settled(server, 'never@example.com'), [{ state: 'failed', attempts: 1 }]);
      await until('the failure is audited', async () => (await mailEvents(server, never.id)).length === 1);
      assert.deepEqual(await mailEvents(server, never.id), [
        { type: 'mail_failed', kind: 'password_reset', attempt: 1, reason: 'the SMTP server answered 550', retrying: false },
      ]);
      const log = server.logs.join('');
      assert.match(log, /"event":"mail_failed"/);
      assert.ok(!log.includes(SMTP_PASSWORD) && !/gpr_[A-Za-z0-9_-]{43}/.test(log), 'no SMTP password and no link in the log');
    });
  });

  describe(`a queue with rows whose last attempt never ended (${backend.name})`, backendOptions(backend), () => {
    test('rows out of attempts, left pending by an instance that died, do not hold up the others', async () => {
      const smtp = await startSmtpServer();
      const server = await startServer(backend, { SMTP_URL: smtp.url });
      try {
        const now = Date.now();
        const stuck = Array.from({ length: 25 }, (_, i) => ({
          id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
          kind: 'password_changed' as const,
          user_id: null,
          to_address: `stuck${i}@example.com`,
          detail: '{}',
          address: null,
          state: 'pending' as const,
          attempts: 10,
          next_attempt_at: now - 60_000,
          claimed_until: now - 30_000,
          created_at: now - 120_000,
          expires_at: now + 3_600_000,
        }));
        await server.store.db.insertInto('mail_outbox').values(stuck).execute();
        await server.createUser('fresh');
        assert.equal((await askForLink(server, 'fresh@example.com')).status, 200);
        assert.equal((await smtp.next('fresh@example.com')).subject, 'Reset your password');
        assert.ok(!smtp.offered.some((to) => to.startsWith('stuck')));
      } finally {
        await server.close();
        await smtp.close();
      }
    });
  });

  describe(`mail while the SMTP server is away (${backend.name})`, backendOptions(backend), () => {
    test('a request does not wait for an SMTP server that never answers', async () => {
      // Accepts connections and says nothing: nodemailer waits for a greeting that never comes.
      const held: Socket[] = [];
      const silent = createServer((socket) => void held.push(socket));
      await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
      const port = (silent.address() as { port: number }).port;
      const server = await startServer(backend, { SMTP_URL: `smtp://127.0.0.1:${port}` });
      try {
        await server.createUser('patient');
        const asked = await askForLink(server, 'patient@example.com');
        assert.equal(asked.status, 200);
        // The SMTP conversation's first deadline is 10 seconds: the answer came long before it.
        assert.ok(asked.ms < 5000, `answered in ${Math.round(asked.ms)} ms`);
      } finally {
        for (const socket of held) socket.destroy();
        silent.close();
        await server.close();
      }
    });

    test('mail asked for while the SMTP server is down, or refusing the credentials, arrives once it is back', async () => {
      const port = await freePort();
      const server = await startServer(backend, { SMTP_URL: `smtp://${SMTP_USER}:${SMTP_PASSWORD}@127.0.0.1:${port}` });
      let smtp: TestSmtpServer | undefined;
      try {
        const user = await server.createUser('waiting');
        assert.equal((await askForLink(server, 'waiting@example.com')).status, 200);
        // The first attempt finds nothing listening; the SMTP server starts before the retries run out.
        await until('a mail event is recorded', async () => (await mailEvents(server, user.id)).length > 0, 15);
        smtp = await startSmtpServer(port);
        const mail = await smtp.next('waiting@example.com', 20_000);
        assert.equal(mail.subject, 'Reset your password');
        assert.equal((await settled(server, 'waiting@example.com'))[0]!.state, 'sent');
        // The audit event follows the state it reports (mail.ts `deliver`): wait for it too.
        await until('the sent mail is audited', async () => (await mailEvents(server, user.id)).at(-1)?.type === 'mail_sent');
        const events = await mailEvents(server, user.id);
        assert.ok(events.slice(0, -1).every((event) => event.type === 'mail_failed' && event.retrying === true));
        assert.ok(!server.logs.join('').includes(SMTP_PASSWORD));
      } finally {
        await server.close();
        await smtp?.close();
      }
    });

    test('refused credentials are retried, not given up: an administrator fixes SMTP_URL', async () => {
      const smtp = await startSmtpServer();
      const server = await startServer(backend, { SMTP_URL: `smtp://${SMTP_USER}:wrong-password@127.0.0.1:${smtp.port}` });
      try {
        const user = await server.createUser('locked');
        assert.equal((await askForLink(server, 'locked@example.com')).status, 200);
        await until('a mail event is recorded', async () => (await mailEvents(server, user.id)).length > 0, 15);
        const [event] = await mailEvents(server, user.id);
        assert.deepEqual(event, { type: 'mail_failed', kind: 'password_reset', attempt: 1, reason: 'the SMTP server answered 535', retrying: true });
        assert.ok(!server.logs.join('').includes('wrong-password'));
      } finally {
        await server.close();
        await smtp.close();
      }
    });
  });
}
