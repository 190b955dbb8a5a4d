/**
 * A person's own email address and password on /account/security (SPEC §4.16), against a real
 * SMTP server: verifying the address (asked by the person, by an administrator, by the command
 * line) and `email_verified` in ID tokens following it; changing the address (a recent login,
 * the link to the new address, the old one kept until then and told); changing the password
 * (a recent login, the current password, the other sessions ended); and the attacks on them —
 * a stale session, a wrong current password, an address someone else has or takes meanwhile,
 * a reset link sent to the old address. Without SMTP_URL the pages say to ask an
 * administrator. Both backends.
 */
import assert from 'node:assert/strict';
import { decodeJwt } from 'jose';
import { after, before, describe, test } from 'node:test';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { discover, obtainTokens } from '../support/oauth-client.ts';
import { PASSWORD, startServer, type TestServer } from '../support/server.ts';
import { linkIn, startSmtpServer, type TestSmtpServer } from '../support/smtp.ts';
import { UserAgent } from '../support/user-agent.ts';

const SECURITY = '/account/security';
const NEW_PASSWORD = 'a new and rather long passphrase';

for (const backend of BACKENDS) {
  describe(`one's own email address and password (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let smtp: TestSmtpServer;

    before(async () => {
      smtp = await startSmtpServer();
      server = await startServer(backend, { SMTP_URL: smtp.url });
    });
    after(async () => {
      await server?.close();
      await smtp?.close();
    });

    async function signedIn(username: string): Promise<UserAgent> {
      const agent = new UserAgent(server.url);
      assert.equal((await agent.login(username)).redirect, null);
      return agent;
    }

    /** Sends a form of the security page; the page the answer leads to. */
    async function onSecurityPage(agent: UserAgent, action: string, fields: Record<string, string> = {}) {
      const page = await agent.visit(SECURITY);
      return agent.submit(page.html, action, fields);
    }

    /** Posts to `action` with the page's CSRF token though the page offers no such form (a stale session's): the answer. */
    async function forge(agent: UserAgent, action: string, fields: Record<string, string>) {
      const csrf = /name="_csrf" value="([^"]+)"/.exec((await agent.visit(SECURITY)).html)![1]!;
      return agent.fetch(action, { method: 'POST', body: new URLSearchParams({ _csrf: csrf, ...fields }) });
    }

    /** Opens a verification link and confirms it: the answer. */
    async function confirm(link: string, agent = new UserAgent(server.url)) {
      const page = await agent.visit(link);
      if (page.response.status !== 200) return page;
      return agent.submit(page.html, '/email/verify');
    }

    const userNamed = (username: string) => server.store.db.selectFrom('users').selectAll().where('username', '=', username).executeTakeFirstOrThrow();
    const emailVerifiedClaim = async (username: string) => {
      const { client } = await server.createClient();
      const tokens = await obtainTokens(await discover(server, client.id), await signedIn(username), username, { scope: 'openid email' });
      return decodeJwt(tokens.id_token!).email_verified;
    };

    test('Verify your email: the link marks the address verified, and ID tokens say so', async () => {
      await server.createUser('vera');
      assert.equal(await emailVerifiedClaim('vera'), false);
      const agent = await signedIn('vera');
      const page = await agent.visit(SECURITY);
      assert.match(page.html, /<strong>vera@example.com<\/strong> — not verified/);
      const sent = await onSecurityPage(agent, `${SECURITY}/email/verify`);
      assert.match(sent.html, /A link to verify your address is on its way/);
      const mail = await smtp.next('vera@example.com');
      assert.equal(mail.subject, 'Verify your email address');
      const link = linkIn(mail, server.url, '/email/verify');
      // Opening the link changes nothing (a mail scanner follows links); confirming does.
      const opened = await new UserAgent(server.url).visit(link);
      assert.match(opened.html, /Confirm that <strong>vera@example.com<\/strong> is the email address/);
      assert.equal((await userNamed('vera')).email_verified, 0);
      const done = await confirm(link);
      assert.match(done.html, /id="email-verified"/);
      assert.equal((await userNamed('vera')).email_verified, 1);
      assert.equal(await emailVerifiedClaim('vera'), true);
      assert.equal((await confirm(link)).response.status, 410, 'single use');
      assert.match((await agent.visit(SECURITY)).html, /<strong>vera@example.com<\/strong> — verified/);
      const types = (
        await server.store.db
          .selectFrom('audit_events')
          .select('type')
          .where('user_id', '=', (await userNamed('vera')).id)
          .execute()
      ).map((r) => r.type);
      for (const type of ['email_verification_requested', 'mail_sent', 'email_verified']) assert.ok(types.includes(type), type);
    });

    test('an administrator has a verification link sent from /admin/users; a link older than 24 hours does not work', async () => {
      await server.createUser('root', { admin: true });
      const walt = await server.createUser('walt');
      const admin = await signedIn('root');
      const form = await admin.visit(`/admin/users/${walt.id}`);
      const sent = await admin.submit(form.html, `/admin/users/${walt.id}/verify-email`);
      assert.match(sent.html, /A link to verify their address is on its way/);
      const link = linkIn(await smtp.next('walt@example.com'), server.url, '/email/verify');
      server.advance(24 * 3600 + 60);
      try {
        assert.equal((await confirm(link)).response.status, 410);
      } finally {
        server.advance(-(24 * 3600 + 60));
      }
      assert.equal((await userNamed('walt')).email_verified, 0);
    });

    test('changing the address: a recent login, the link to the new address, the old one kept and told; reset links to the old one die', async () => {
      await server.createUser('carla');
      const agent = await signedIn('carla');
      // A reset link mailed to the old address before the change.
      const visitor = new UserAgent(server.url);
      const forgot = await visitor.visit('/password/forgot');
      await visitor.submit(forgot.html, '/password/forgot', { email: 'carla@example.com' });
      const resetLink = linkIn(await smtp.next('carla@example.com'), server.url, '/password/reset');

      server.advance(6 * 60);
      try {
        const stale = await forge(agent, `${SECURITY}/email`, { email: 'carla@new.example' });
        assert.equal(stale.status, 403, 'a session more than five minutes old cannot change the address');
      } finally {
        server.advance(-6 * 60);
      }
      // An address another account has: the same answer (the form does not tell who has an
      // account), no link to its holder; the old address is told all the same.
      const toVera = () => smtp.received.filter((mail) => mail.to === 'vera@example.com').length;
      const veraBefore = toVera();
      const taken = await onSecurityPage(agent, `${SECURITY}/email`, { email: 'vera@example.com' });
      assert.match(taken.html, /A link to confirm your new address is on its way/);
      assert.equal((await smtp.next('carla@example.com')).subject, 'Your email address is changing');

      const asked = await onSecurityPage(agent, `${SECURITY}/email`, { email: 'carla@new.example' });
      assert.match(asked.html, /A link to confirm your new address is on its way/);
      const notice = await smtp.next('carla@example.com');
      assert.equal(notice.subject, 'Your email address is changing');
      assert.match(notice.text, /to carla@new\.example/);
      const link = linkIn(await smtp.next('carla@new.example'), server.url, '/email/verify');
      assert.equal((await userNamed('carla')).email, 'carla@example.com', 'kept until the new one is verified');

      const done = await confirm(link);
      assert.match(done.html, /is now the address of your account/);
      const carla = await userNamed('carla');
      assert.deepEqual([carla.email, carla.email_verified], ['carla@new.example', 1]);
      assert.equal((await new UserAgent(server.url).login('carla@new.example')).redirect, null, 'logs in with the new address');
      assert.equal((await new UserAgent(server.url).visit(resetLink)).response.status, 410, 'the reset link went to the old address');
      assert.equal(toVera(), veraBefore, 'the holder of the taken address got nothing');
    });

    test('a verification queued before an administrator changed the address is not sent: it cannot bring the old address back', async () => {
      await server.createUser('boss', { admin: true });
      const olga = await server.createUser('olga');
      // Refused for now at every attempt, the verification waits in the queue (2, 4, 8 … s apart).
      smtp.refuse('olga@example.com', 451);
      const admin = await signedIn('boss');
      const form = await admin.visit(`/admin/users/${olga.id}`);
      await onSecurityPage(await signedIn('olga'), `${SECURITY}/email/verify`);
      await admin.submit(form.html, `/admin/users/${olga.id}`, { name: '', email: 'olga@new.example' });
      // The next attempt composes it again, for an account that no longer has the address.
      const deadline = Date.now() + 40_000;
      let state = 'pending';
      while (state === 'pending' && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        state = (await server.store.db.selectFrom('mail_outbox').select('state').where('to_address', '=', 'olga@example.com').executeTakeFirstOrThrow()).state;
      }
      assert.equal(state, 'skipped');
      assert.equal(smtp.received.filter((mail) => mail.to === 'olga@example.com').length, 0);
      assert.equal((await userNamed('olga')).email, 'olga@new.example');
    });

    test('an address that would make a mail header read another mailbox is refused', async () => {
      await server.createUser('mallory');
      const agent = await signedIn('mallory');
      for (const email of ['x,y@evil.test', 'victim<attacker@evil.test>', 'a"b"@evil.test', 'a b@evil.test']) {
        const refused = await onSecurityPage(agent, `${SECURITY}/email`, { email });
        assert.equal(refused.response.status, 400, email);
        assert.match(refused.html, /Email must be an email address/);
      }
      assert.ok(!smtp.offered.some((to) => to.endsWith('@evil.test')));
    });

    test('two people asking for the same new address: the second to confirm is refused', async () => {
      await server.createUser('kim');
      await server.createUser('lee');
      const links: string[] = [];
      for (const name of ['kim', 'lee']) {
        await onSecurityPage(await signedIn(name), `${SECURITY}/email`, { email: 'shared@example.org' });
        links.push(linkIn(await smtp.next('shared@example.org'), server.url, '/email/verify'));
      }
      assert.equal((await confirm(links[0]!)).response.status, 200);
      const second = await confirm(links[1]!);
      assert.equal(second.response.status, 409);
      assert.match(second.html, /belongs to another account/);
      assert.equal((await userNamed('lee')).email, 'lee@example.com');
    });

    test('changing the password: a recent login and the current password; the other sessions end, this one goes on', async () => {
      const pat = await server.createUser('pat');
      const agent = await signedIn('pat');
      const other = await signedIn('pat');
      await onSecurityPage(agent, `${SECURITY}/email/verify`);
      const verifyLink = linkIn(await smtp.next('pat@example.com'), server.url, '/email/verify');
      const wrong = await onSecurityPage(agent, `${SECURITY}/password`, { current: 'not my password', password: NEW_PASSWORD, password_again: NEW_PASSWORD });
      assert.equal(wrong.response.status, 400);
      assert.match(wrong.html, /The current password is wrong/);
      const failed = await server.store.db
        .selectFrom('audit_events')
        .select('detail')
        .where('user_id', '=', pat.id)
        .where('type', '=', 'login_failed')
        .execute();
      assert.equal(failed.length, 1, 'a wrong current password counts as a failed login');
      const common = await onSecurityPage(agent, `${SECURITY}/password`, { current: PASSWORD, password: 'iloveyou1', password_again: 'iloveyou1' });
      assert.match(common.html, /one of the most common passwords/);
      const mismatch = await onSecurityPage(agent, `${SECURITY}/password`, { current: PASSWORD, password: NEW_PASSWORD, password_again: 'other' });
      assert.match(mismatch.html, /The two passwords differ/);

      server.advance(6 * 60);
      try {
        assert.match((await agent.visit(SECURITY)).html, /id="password-reauth"/);
        const stale = await forge(agent, `${SECURITY}/password`, { current: PASSWORD, password: NEW_PASSWORD, password_again: NEW_PASSWORD });
        assert.equal(stale.status, 403);
      } finally {
        server.advance(-6 * 60);
      }
      const changed = await onSecurityPage(agent, `${SECURITY}/password`, { current: PASSWORD, password: NEW_PASSWORD, password_again: NEW_PASSWORD });
      assert.match(changed.html, /Password changed. Your other sessions have been logged out./);
      assert.equal((await agent.visit(SECURITY)).response.status, 200, 'this session goes on');
      assert.match((await other.visit(SECURITY)).response.url, /\/login/, 'the other one ended');
      assert.equal((await new UserAgent(server.url).login('pat', NEW_PASSWORD)).redirect, null);
      assert.equal((await smtp.next('pat@example.com')).subject, 'Your password was changed');
      assert.equal((await confirm(verifyLink)).response.status, 410, 'a new password voids every outstanding link');
    });
  });

  describe(`without SMTP_URL (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    before(async () => {
      server = await startServer(backend);
      await server.createUser('nomail');
    });
    after(() => server?.close());

    test('the pages say to ask an administrator, and nothing is queued', async () => {
      const forgot = await new UserAgent(server.url).visit('/password/forgot');
      assert.match(forgot.html, /id="ask-administrator"/);
      assert.ok(!forgot.html.includes('action="/password/forgot"'));
      const agent = new UserAgent(server.url);
      await agent.login('nomail');
      const security = await agent.visit(SECURITY);
      assert.match(security.html, /id="email-no-mail"/);
      assert.ok(!security.html.includes('Verify your email'));
      const csrf = /name="_csrf" value="([^"]+)"/.exec(security.html)![1]!;
      const refused = await agent.fetch('/password/forgot', { method: 'POST', body: new URLSearchParams({ _csrf: csrf, email: 'nomail@example.com' }) });
      assert.equal(refused.status, 400);
      assert.equal((await server.store.db.selectFrom('mail_outbox').select('id').execute()).length, 0);
    });
  });
}
