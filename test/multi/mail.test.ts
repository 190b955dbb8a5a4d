/**
 * Mail with two instances on one PostgreSQL database (SPEC §4.16): both work the queue off,
 * and each message is sent once — though both find it due, and the requests that queued the
 * messages came to both. Messages queued by the command line, which sends nothing itself, are
 * sent by the instances.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import { postgres } from '../support/backends.ts';
import { startCluster, type Cluster } from '../support/instances.ts';
import { startSmtpServer, type TestSmtpServer } from '../support/smtp.ts';
import { UserAgent } from '../support/user-agent.ts';

const PEOPLE = 12;
const MAIN = fileURLToPath(new URL('../../bin/gatehouse.js', import.meta.url));

describe('mail with two instances', postgres.unavailable ? { skip: `needs PostgreSQL: ${postgres.unavailable}` } : {}, () => {
  let cluster: Cluster;
  let smtp: TestSmtpServer;
  let databaseUrl = '';

  before(async () => {
    smtp = await startSmtpServer();
    cluster = await startCluster(2, { SMTP_URL: smtp.url }, (url) => void (databaseUrl = url));
  });
  after(async () => {
    await cluster?.close();
    await smtp?.close();
  });

  test('reset requests to both instances, and verification links queued by the command line, each arrive once', async () => {
    const names = Array.from({ length: PEOPLE }, (_, i) => `person${i}`);
    for (const name of names) await cluster.createUser(name);
    await Promise.all(
      names.map(async (name, i) => {
        const agent = new UserAgent(cluster.instances[i % 2]!.url);
        const form = await agent.visit('/password/forgot');
        const answer = await agent.submit(form.html, '/password/forgot', { email: `${name}@example.com` });
        assert.equal(answer.response.status, 200);
      }),
    );
    const cli = await promisify(execFile)(process.execPath, [MAIN, 'user', 'send-verification', 'person0', '--json'], {
      env: { ...process.env, DATABASE_URL: databaseUrl, SMTP_URL: smtp.url, PUBLIC_URL: cluster.publicUrl },
    });
    assert.equal(JSON.parse(cli.stdout).queued, true);

    for (const name of names) assert.equal((await smtp.next(`${name}@example.com`, 20_000)).subject, 'Reset your password');
    assert.equal((await smtp.next('person0@example.com', 20_000)).subject, 'Verify your email address');
    // Both instances poll every 2 seconds: a message sent twice would have arrived by now.
    await new Promise((resolve) => setTimeout(resolve, 5000));
    const perAddress = new Map<string, number>();
    for (const mail of smtp.received) perAddress.set(mail.to, (perAddress.get(mail.to) ?? 0) + 1);
    assert.deepEqual(Object.fromEntries(perAddress), Object.fromEntries(names.map((name) => [`${name}@example.com`, name === 'person0' ? 2 : 1])));
    const rows = await cluster.store.db.selectFrom('mail_outbox').select(['state', 'attempts']).execute();
    assert.ok(rows.every((row) => row.state === 'sent' && Number(row.attempts) === 1));
  });
});
