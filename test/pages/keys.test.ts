/**
 * `/admin/keys` over plain HTTP, on both backends (SPEC §4.5, §4.9): an administrator sees the
 * signing keys (kid, algorithm, state) that the JWKS publishes; **Rotate** publishes a `next`
 * key per algorithm, **Rotate now** makes new keys active at once, **Revoke** (after a page
 * that confirms it) withdraws one key from the JWKS at once, audited as the administrator's;
 * the forms need their CSRF token and an administrator, and a refused request changes no key.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { decodeProtectedHeader } from 'jose';
import type { User } from '../../src/store/schema.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent, formFields } from '../support/user-agent.ts';

/** One row of the page's table. */
interface KeyRow {
  kid: string;
  alg: string;
  state: string;
}

/** The keys as the page lists them, sorted by state and algorithm. */
function keyRows(html: string): KeyRow[] {
  const rows = [
    ...html.matchAll(
      /<tr>\s*<td[^>]*><span class="id-line"><code class="id"[^>]*>([^<]+)<\/code><\/span><\/td>\s*<td[^>]*>([^<]+)<\/td>\s*<td[^>]*>([^<]+)<\/td>/g,
    ),
  ];
  return rows
    .map(([, kid, alg, state]) => ({ kid: kid!, alg: alg!, state: state! }))
    .sort((a, b) => `${a.state} ${a.alg}`.localeCompare(`${b.state} ${b.alg}`));
}

/** [alg, state] of each row: what the assertions compare. */
const shape = (rows: KeyRow[]) => rows.map((row) => [row.alg, row.state]);

for (const backend of BACKENDS) {
  describe(`signing keys in the admin console (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let admin: UserAgent;
    let root: User;

    before(async () => {
      server = await startServer(backend);
      root = await server.createUser('root', { admin: true });
      await server.createUser('alice');
      admin = new UserAgent(server.url);
      await admin.login('root');
    });
    after(() => server?.close());

    const published = async () => ((await (await fetch(`${server.url}/oauth/jwks`)).json()) as { keys: { kid: string }[] }).keys.map((k) => k.kid).sort();
    const listed = async () => keyRows((await admin.visit('/admin/keys')).html);

    test('an administrator sees the active ES256 and RS256 keys the JWKS publishes, and nothing private', async () => {
      const page = await admin.visit('/admin/keys');
      assert.equal(page.response.status, 200);
      assert.match(page.html, /href="\/admin\/keys" aria-current="page"/);
      const rows = keyRows(page.html);
      assert.deepEqual(shape(rows), [
        ['ES256', 'active'],
        ['RS256', 'active'],
      ]);
      assert.deepEqual(rows.map((row) => row.kid).sort(), await published());
      assert.doesNotMatch(page.html, /"d"\s*:|PRIVATE KEY/, 'no private material');
    });

    test('Rotate needs the CSRF token; with it, a next key per algorithm is published while the active ones keep signing', async () => {
      const page = await admin.visit('/admin/keys');
      const before = keyRows(page.html);
      const forged = formFields(page.html, '/admin/keys/rotate');
      forged.delete('_csrf');
      assert.equal((await admin.fetch('/admin/keys/rotate', { method: 'POST', body: forged })).status, 403);
      assert.deepEqual(await listed(), before, 'a forged request changes no key');

      const rotated = await admin.submit(page.html, '/admin/keys/rotate');
      assert.equal(rotated.response.status, 200);
      assert.match(rotated.html, /New keys are published; they sign after the publication lead/);
      const rows = keyRows(rotated.html);
      assert.deepEqual(shape(rows), [
        ['ES256', 'active'],
        ['RS256', 'active'],
        ['ES256', 'next'],
        ['RS256', 'next'],
      ]);
      assert.deepEqual(
        rows.filter((row) => row.state === 'active'),
        before,
        'the same keys still sign',
      );
      assert.deepEqual(rows.map((row) => row.kid).sort(), await published(), 'the next keys are published ahead');
    });

    test('Rotate now makes new keys active at once; the old ones retire, still published', async () => {
      const page = await admin.visit('/admin/keys');
      const previous = keyRows(page.html).filter((row) => row.state === 'active');
      const rotated = await admin.submit(page.html, '/admin/keys/rotate', { now: '1' });
      assert.equal(rotated.response.status, 200);
      assert.match(rotated.html, /New keys are signing from now on; the old ones are retiring/);
      const rows = keyRows(rotated.html);
      const active = rows.filter((row) => row.state === 'active');
      assert.deepEqual(
        active.map((row) => row.alg),
        ['ES256', 'RS256'],
      );
      for (const key of active) assert.ok(!previous.some((old) => old.kid === key.kid), `${key.alg}: a new key signs`);
      assert.deepEqual(
        rows
          .filter((row) => row.state === 'retiring')
          .map((row) => row.kid)
          .sort(),
        previous.map((row) => row.kid).sort(),
        'the keys that signed until now retire',
      );
      assert.deepEqual(rows.map((row) => row.kid).sort(), await published());
    });

    test('Revoke asks for confirmation, needs the CSRF token, withdraws the key at once and is audited as the administrator’s', async () => {
      const page = await admin.visit('/admin/keys');
      const kid = keyRows(page.html).find((row) => row.state === 'active' && row.alg === 'ES256')!.kid;
      const action = `/admin/keys/${kid}/revoke`;
      assert.ok(page.html.includes(`href="${action}"`), 'each key has its Revoke link');
      const revocations = () => server.store.db.selectFrom('audit_events').selectAll().where('type', '=', 'key_revoked').execute();
      const audited = (await revocations()).length;

      const confirm = await admin.visit(action);
      assert.equal(confirm.response.status, 200);
      assert.match(confirm.html, /Revoke this ES256 key\?/);
      assert.ok(confirm.html.includes(kid));
      assert.match(confirm.html, /a new ES256 key signs from now on/);
      assert.ok((await published()).includes(kid), 'the confirming page changes nothing');

      const forged = formFields(confirm.html, action);
      forged.delete('_csrf');
      assert.equal((await admin.fetch(action, { method: 'POST', body: forged })).status, 403);
      assert.ok((await published()).includes(kid), 'a forged request revokes nothing');
      assert.equal((await revocations()).length, audited);

      const revoked = await admin.submit(confirm.html, action);
      assert.equal(revoked.response.status, 200);
      assert.match(revoked.html, /The key was revoked: it left the JWKS.*A new key of its algorithm signs from now on/);
      assert.ok(!(await published()).includes(kid), 'the key left the JWKS at once');
      const successor = keyRows(revoked.html).find((row) => row.state === 'active' && row.alg === 'ES256')!.kid;
      assert.notEqual(successor, kid);
      const signed = await server.app.gatehouse.keys.signJwt('ES256', { typ: 'at+jwt' }, { sub: 'x', exp: Math.floor(Date.now() / 1000) + 60 });
      assert.equal(decodeProtectedHeader(signed).kid, successor, 'the new key signs');

      const rows = (await revocations()).slice(audited);
      assert.equal(rows.length, 1);
      assert.equal(rows[0]!.actor_id, root.id, 'made by the administrator');
      assert.ok(rows[0]!.address, 'from their address');
      assert.deepEqual(JSON.parse(rows[0]!.detail!), { kid, alg: 'ES256' });

      assert.equal((await admin.submit(confirm.html, action)).response.status, 404, 'a key revoked already');
      assert.equal((await admin.visit(action)).response.status, 404);
    });

    test('Revoke of a kid that names no key, or a mangled one, is refused with 4xx and changes nothing', async () => {
      const before = await listed();
      const page = await admin.visit('/admin/keys');
      const token = formFields(page.html, '/admin/keys/rotate').get('_csrf')!;
      for (const kid of ['no-such-kid', '%00', '..%2F..%2Fadmin', 'x'.repeat(300)]) {
        const shown = await admin.fetch(`/admin/keys/${kid}/revoke`);
        assert.ok(shown.status >= 400 && shown.status < 500, `GET ${kid.slice(0, 20)}: ${shown.status}`);
        const posted = await admin.fetch(`/admin/keys/${kid}/revoke`, { method: 'POST', body: new URLSearchParams({ _csrf: token }) });
        assert.ok(posted.status >= 400 && posted.status < 500, `POST ${kid.slice(0, 20)}: ${posted.status}`);
      }
      assert.deepEqual(await listed(), before);
    });

    test('only administrators revoke keys: 403 for a person, the login page for nobody', async () => {
      const before = await listed();
      const action = `/admin/keys/${before[0]!.kid}/revoke`;
      const alice = new UserAgent(server.url);
      await alice.login('alice');
      assert.equal((await alice.visit(action)).response.status, 403);
      assert.equal((await alice.fetch(action, { method: 'POST', body: new URLSearchParams() })).status, 403);
      const anonymous = await new UserAgent(server.url).fetch(action, { method: 'POST', body: new URLSearchParams() });
      assert.equal(anonymous.status, 303);
      assert.match(anonymous.headers.get('location') ?? '', /^\/login\?/);
      assert.deepEqual(await listed(), before, 'no key changed');
    });

    test('only administrators see or rotate keys: 403 for a person, the login page for nobody', async () => {
      const before = await listed();
      const alice = new UserAgent(server.url);
      await alice.login('alice');
      assert.equal((await alice.visit('/admin/keys')).response.status, 403);
      const attempt = await alice.fetch('/admin/keys/rotate', { method: 'POST', body: new URLSearchParams({ now: '1' }) });
      assert.equal(attempt.status, 403);

      const nobody = new UserAgent(server.url);
      const sent = await nobody.fetch('/admin/keys');
      assert.equal(sent.status, 303);
      assert.equal(sent.headers.get('location'), `/login?${new URLSearchParams({ next: '/admin/keys' })}`);
      const anonymous = await nobody.fetch('/admin/keys/rotate', { method: 'POST', body: new URLSearchParams({ now: '1' }) });
      assert.equal(anonymous.status, 303);
      assert.match(anonymous.headers.get('location') ?? '', /^\/login\?/);
      assert.deepEqual(await listed(), before, 'no key changed');
    });
  });
}
