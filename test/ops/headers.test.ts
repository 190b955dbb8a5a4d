/**
 * Security headers (SPEC §4.5) on what a browser is served: a Content-Security-Policy that
 * allows no inline script and no framing, no Referer leaving pages that carry a code, HSTS
 * when the server is published over https — and pages that need nothing more.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { BACKENDS, backendOptions, sqlite } from '../support/backends.ts';
import { authorizationUrl, discover, type App } from '../support/oauth-client.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';

/** The policy's directives, by name. */
function directives(response: Response): Map<string, string[]> {
  const policy = response.headers.get('content-security-policy');
  assert.ok(policy, `${response.url} has no Content-Security-Policy`);
  return new Map(
    policy
      .split(';')
      .map((d) => d.trim().split(/\s+/))
      .filter((d) => d[0])
      .map(([name, ...values]) => [name!, values]),
  );
}

function assertLockedDown(response: Response, html: string): void {
  const csp = directives(response);
  assert.deepEqual(csp.get('script-src'), ["'self'"], 'scripts come from our own files only');
  assert.deepEqual(csp.get('frame-ancestors'), ["'none'"]);
  assert.deepEqual(csp.get('object-src'), ["'none'"]);
  assert.deepEqual(csp.get('base-uri'), ["'none'"]);
  assert.ok(![...csp.values()].flat().some((v) => /unsafe-inline|unsafe-eval|\*/.test(v)), 'nothing unsafe is allowed');
  assert.equal(response.headers.get('x-frame-options'), 'DENY');
  assert.equal(response.headers.get('x-content-type-options'), 'nosniff');
  assert.equal(response.headers.get('referrer-policy'), 'no-referrer');
  // …and the page does not need more: no inline script, no inline event handler.
  assert.doesNotMatch(html, /<script(?![^>]*\bsrc=)[^>]*>/i, 'an inline script');
  assert.doesNotMatch(html, /<[^>]+\son[a-z]+\s*=/i, 'an inline event handler');
}

for (const backend of BACKENDS) {
  describe(`security headers (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let app: App;

    before(async () => {
      server = await startServer(backend);
      await server.createUser('alice');
      await server.createUser('root', { admin: true });
      app = await discover(server, (await server.createClient({ name: 'Annotator' })).client.id);
    });
    after(() => server?.close());

    test('every page is locked down: login, consent, error, account and admin pages', async () => {
      const agent = new UserAgent(server.url);
      const login = await agent.visit('/login');
      assertLockedDown(login.response, login.html);

      await agent.login('alice');
      const consent = await agent.visit((await authorizationUrl(app)).url.href.slice(server.url.length));
      assert.match(consent.html, /action="\/oauth\/authorize"/);
      assertLockedDown(consent.response, consent.html);

      const popup = await agent.visit((await authorizationUrl(app, { response_mode: 'web_message' })).url.href.slice(server.url.length));
      assertLockedDown(popup.response, popup.html);

      const error = await agent.visit('/oauth/authorize?client_id=nope');
      assert.equal(error.response.status, 400);
      assertLockedDown(error.response, error.html);

      const applications = await agent.visit('/account/applications');
      assertLockedDown(applications.response, applications.html);

      const admin = new UserAgent(server.url);
      await admin.login('root');
      for (const path of ['/admin/oauthclients', '/admin/oauthclients/new', '/admin/users', '/admin/audit']) {
        const page = await admin.visit(path);
        assert.equal(page.response.status, 200, path);
        assertLockedDown(page.response, page.html);
      }
    });

    test("the admin pages' guard answers locked down too: the redirect to log in, and the 403 page", async () => {
      const anonymous = await new UserAgent(server.url).fetch('/admin');
      assert.equal(anonymous.status, 303);
      assert.match(anonymous.headers.get('location') ?? '', /^\/login\?next=/);
      assertLockedDown(anonymous, '');

      const alice = new UserAgent(server.url);
      await alice.login('alice');
      const refused = await alice.fetch('/admin/users');
      assert.equal(refused.status, 403);
      assertLockedDown(refused, await refused.text());
    });

    test('the responses that carry a code send no Referer onwards', async () => {
      const agent = new UserAgent(server.url);
      const approved = await agent.authorize((await authorizationUrl(app)).url);
      assert.ok(approved.redirect?.searchParams.get('code'));
      assert.equal(approved.response.headers.get('referrer-policy'), 'no-referrer');

      const popup = await agent.visit((await authorizationUrl(app, { response_mode: 'web_message' })).url.href.slice(server.url.length));
      assert.match(popup.html, /gac_/, 'the popup page carries the code');
      assert.equal(popup.response.headers.get('referrer-policy'), 'no-referrer');
      assert.equal(popup.response.headers.get('cache-control'), 'no-store');
    });

    test('no HSTS over plain http: it would pin a name to https that does not serve it', async () => {
      const response = await fetch(`${server.url}/login`);
      assert.equal(response.headers.get('strict-transport-security'), null);
    });
  });
}

describe('security headers behind https', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer(sqlite, { PUBLIC_URL: 'https://auth.example' });
  });
  after(() => server?.close());

  test('HSTS on every response, and secure cookies', async () => {
    for (const path of ['/login', '/.well-known/oauth-authorization-server', '/nowhere']) {
      const response = await fetch(`${server.url}${path}`);
      assert.equal(response.headers.get('strict-transport-security'), 'max-age=31536000; includeSubDomains', path);
    }
    const login = await fetch(`${server.url}/login`);
    for (const cookie of login.headers.getSetCookie()) assert.match(cookie, /; Secure/i, cookie);
  });
});
