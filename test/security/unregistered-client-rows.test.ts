/**
 * Client rows nobody vetted (SPEC §4.8, §4.5, §4.6, issue 18 items 4 and 7). The attack: an
 * anonymous visitor sends GET /oauth/authorize naming a different client ID metadata document
 * each time; if each request stored a `clients` row, one address would add hundreds of rows
 * a minute, kept for ever, all shown on one admin page. Here: anonymous requests store
 * nothing; a person's approval records the client once, audited; a changed document is
 * audited with what changed; unused clients of both kinds are purged; and the admin list and
 * `gatehouse client list` show at most 100 rows a page, with pages that lead on and back.
 */
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:https';
import type { ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { COMMAND_LINE, listAuditEvents } from '../../src/audit.ts';
import { blockClient } from '../../src/clients/clients.ts';
import { findClient } from '../../src/store/clients.ts';
import { purgeOnce } from '../../src/store/purge.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { authorizationUrl, discover, obtainCode, obtainTokens } from '../support/oauth-client.ts';
import { databaseUrl, gatehouse } from '../support/processes.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { serverCertificate, testCaProblem } from '../support/tls.ts';
import { UserAgent } from '../support/user-agent.ts';

const HOUR = 3600;
const REDIRECT_URI = 'http://127.0.0.1:51004/callback';

/** An https server for metadata documents: path → document, changeable during a test. */
async function documentServer() {
  const documents = new Map<string, (res: ServerResponse) => void>();
  const server: Server = createServer(serverCertificate(['127.0.0.1']), (req, res) => {
    const path = new URL(req.url!, 'https://x').pathname;
    const answer = documents.get(path);
    if (answer) return answer(res);
    // Any other path under /flood/ is a valid document of its own: the attacker's endless supply.
    if (path.startsWith('/flood/')) return json(res, { client_id: `${origin}${path}`, client_name: 'Flood', redirect_uris: [REDIRECT_URI] });
    res.writeHead(404).end();
  });
  const json = (res: ServerResponse, body: object) =>
    res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'max-age=0' }).end(JSON.stringify(body));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const origin = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    origin,
    server,
    serve(path: string, fields: object = {}) {
      const url = `${origin}${path}`;
      documents.set(path, (res) => json(res, { client_id: url, client_name: 'Notes CLI', redirect_uris: [REDIRECT_URI], ...fields }));
      return url;
    },
  };
}

/** The client IDs an admin client list page shows. */
const listedIds = (html: string) => [...html.matchAll(/<code class="id"[^>]*>([^<]+)<\/code>/g)].map((m) => m[1]!);
/** The href of the link labelled `label`, unescaped, or null. */
const linkTo = (html: string, label: RegExp) => {
  const found = [...html.matchAll(/<a [^>]*href="([^"]+)"[^>]*>([^<]+)<\/a>/g)].find((m) => label.test(m[2]!));
  return found ? found[1]!.replaceAll('&amp;', '&').replaceAll('&#38;', '&') : null;
};

describe('client rows of clients nobody registered', { skip: testCaProblem() ?? false, timeout: 120_000 }, () => {
  let documents: Awaited<ReturnType<typeof documentServer>>;
  before(async () => {
    documents = await documentServer();
  });
  after(() => documents?.server.close());

  for (const backend of BACKENDS) {
    describe(`(${backend.name})`, backendOptions(backend), () => {
      let server: TestServer;
      let alice: UserAgent;
      let admin: UserAgent;
      let env: Record<string, string>;
      const metadataRows = async () =>
        (await server.store.db.selectFrom('clients').select('id').where('kind', '=', 'metadata_document').execute()).map((row) => row.id);
      const events = (clientId: string, type: string) => listAuditEvents(server.store.db, { clientId, type: type as never, limit: 10 });
      const cli = (args: string[]) => gatehouse(['client', 'list', '--json', ...args], env);

      before(async () => {
        server = await startServer(backend, {
          CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES: 'true',
          DYNAMIC_CLIENT_REGISTRATION: 'true',
          TOKEN_REQUESTS_PER_ADDRESS: '100000',
        });
        env = { DATABASE_URL: databaseUrl(server.config) };
        await server.createUser('alice');
        await server.createUser('root', { admin: true });
        alice = new UserAgent(server.url);
        await alice.login('alice');
        admin = new UserAgent(server.url);
        await admin.login('root');
      });
      after(() => server?.close());

      test('anonymous authorization requests naming 120 distinct metadata documents store no client', async () => {
        for (let i = 0; i < 120; i++) {
          const url = `${documents.origin}/flood/${i}.json`;
          const query = new URLSearchParams({
            client_id: url,
            response_type: 'code',
            redirect_uri: REDIRECT_URI,
            code_challenge: 'x'.repeat(43),
            code_challenge_method: 'S256',
          });
          const response = await fetch(`${server.url}/oauth/authorize?${query}`, { redirect: 'manual' });
          assert.equal(response.status, 302, `request ${i}`);
          assert.match(response.headers.get('location')!, /^\/login\?/, 'the document resolved: the visitor is sent to log in');
          if (i === 0) {
            // The login page names the application it leads to: that resolves the client too.
            const login = await fetch(new URL(response.headers.get('location')!, server.url));
            assert.match(await login.text(), /Flood/);
          }
        }
        assert.deepEqual(await metadataRows(), [], 'no client row was stored');
        assert.doesNotMatch((await admin.visit('/admin/oauthclients')).html, /\/flood\//);
        const listed = JSON.parse((await cli([])).stdout) as Array<{ client_id: string }>;
        assert.ok(Array.isArray(listed));
        assert.ok(!listed.some((c) => c.client_id.includes('/flood/')), '`client list` shows none of them');
      });

      test('an approval records the client exactly once, with client_recorded naming who and what', async () => {
        const url = documents.serve('/apps/recorded.json');
        const app = await discover(server, url, { redirectUri: REDIRECT_URI });
        await obtainTokens(app, alice);
        await obtainTokens(app, alice); // approved before: no consent page, the client is known
        assert.deepEqual(
          (await metadataRows()).filter((id) => id === url),
          [url],
        );
        const recorded = await events(url, 'client_recorded');
        assert.equal(recorded.length, 1);
        assert.equal(recorded[0]!.username, 'alice');
        assert.equal(recorded[0]!.detail?.name, 'Notes CLI');
        assert.equal(recorded[0]!.detail?.redirect_uris, REDIRECT_URI);
        assert.equal((await events(url, 'client_document_changed')).length, 0);
        // The admin page shows the event under its name.
        assert.match((await admin.visit(`/admin/audit?type=client_recorded`)).html, /client_recorded/);
      });

      test('20 approvals of a new client at once: one row, one client_recorded, 20 codes', async () => {
        const url = documents.serve('/apps/raced.json');
        const app = await discover(server, url, { redirectUri: REDIRECT_URI });
        const consents = await Promise.all(
          Array.from({ length: 20 }, async () => (await alice.visit((await authorizationUrl(app)).url.href.slice(server.url.length))).html),
        );
        assert.deepEqual(
          (await metadataRows()).filter((id) => id === url),
          [],
          'the consent pages stored nothing',
        );
        const approved = await Promise.all(consents.map((html) => alice.submit(html, '/oauth/authorize', { decision: 'approve' })));
        for (const outcome of approved) assert.ok(outcome.redirect?.searchParams.get('code'), `no code: ${outcome.response.status}`);
        assert.deepEqual(
          (await metadataRows()).filter((id) => id === url),
          [url],
        );
        assert.equal((await events(url, 'client_recorded')).length, 1);
      });

      test('a document whose name and redirect URLs change: recorded at the next approval, with client_document_changed', async () => {
        const url = documents.serve('/apps/renamed.json');
        const app = await discover(server, url, { redirectUri: REDIRECT_URI });
        await obtainTokens(app, alice);
        const other = 'http://127.0.0.1:51005/callback';
        documents.serve('/apps/renamed.json', { client_name: 'Notes CLI 2', redirect_uris: [REDIRECT_URI, other] });
        server.advance(301); // past the shortest cache lifetime
        try {
          // An anonymous request reads the new document, and stores nothing.
          const anonymous = await fetch((await authorizationUrl(app)).url, { redirect: 'manual' });
          assert.equal(anonymous.status, 302);
          assert.equal((await findClient(server.store.db, url))?.name, 'Notes CLI', 'an anonymous request changes nothing');
          assert.equal((await events(url, 'client_document_changed')).length, 0);
          await obtainTokens(app, alice);
        } finally {
          server.advance(-301);
        }
        const row = await findClient(server.store.db, url);
        assert.equal(row?.name, 'Notes CLI 2');
        assert.deepEqual(JSON.parse(row!.redirect_uris), [REDIRECT_URI, other]);
        const changed = await events(url, 'client_document_changed');
        assert.equal(changed.length, 1);
        assert.deepEqual(changed[0]!.detail, {
          name_was: 'Notes CLI',
          name: 'Notes CLI 2',
          redirect_uris_was: REDIRECT_URI,
          redirect_uris: `${REDIRECT_URI} ${other}`,
        });
        assert.equal(changed[0]!.username, 'alice');
        assert.equal((await events(url, 'client_recorded')).length, 1);
      });

      test('unused metadata-document clients are purged like unused registrations; used and blocked ones stay', async () => {
        const unused = documents.serve('/purge/unused.json');
        const used = documents.serve('/purge/used.json');
        const blocked = documents.serve('/purge/blocked.json');
        await obtainCode(await discover(server, unused, { redirectUri: REDIRECT_URI }), alice); // a code, never exchanged
        await obtainTokens(await discover(server, used, { redirectUri: REDIRECT_URI }), alice);
        await obtainCode(await discover(server, blocked, { redirectUri: REDIRECT_URI }), alice);
        await blockClient(server.app.gatehouse, blocked, COMMAND_LINE);
        const registration = await fetch(new URL('/oauth/register', server.url), {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ redirect_uris: [REDIRECT_URI] }),
        });
        const registered = ((await registration.json()) as { client_id: string }).client_id;
        const now = server.app.gatehouse.now();
        await purgeOnce(server.store, now + 23 * HOUR * 1000, 0);
        assert.ok(await findClient(server.store.db, unused), 'kept during its first day');
        await purgeOnce(server.store, now + 25 * HOUR * 1000, 0);
        assert.equal(await findClient(server.store.db, unused), undefined, 'no token within a day: purged');
        assert.equal(await findClient(server.store.db, registered), undefined, 'the same rule for a registration');
        assert.ok(await findClient(server.store.db, used), 'it obtained a token: kept');
        assert.equal((await findClient(server.store.db, blocked))?.blocked, 1, 'a block is an administrator’s decision: kept');
      });

      test('the admin client list and `client list` show at most 100 rows a page, with pages that lead on and back', async () => {
        for (let i = 0; i < 130; i++) await server.createClient({ name: `Paged ${i}` });
        const all = (await server.store.db.selectFrom('clients').select('id').execute()).map((row) => row.id);
        assert.ok(all.length > 130);

        const seen: string[] = [];
        const pages: string[] = [];
        for (let path: string | null = '/admin/oauthclients'; path !== null;) {
          const page = await admin.visit(path);
          assert.equal(page.response.status, 200);
          const ids = listedIds(page.html);
          assert.ok(ids.length > 0 && ids.length <= 100, `${ids.length} rows on ${path}`);
          seen.push(...ids);
          pages.push(page.html);
          path = linkTo(page.html, /^Next/);
        }
        assert.deepEqual([...seen].sort(), [...all].sort(), 'every client once, across the pages');
        assert.ok(pages.length >= 2);
        const back = linkTo(pages[1]!, /^Previous/);
        assert.ok(back, 'the second page leads back');
        assert.deepEqual(listedIds((await admin.visit(back)).html), listedIds(pages[0]!));
        assert.equal(linkTo(pages[0]!, /^Previous/), null, 'the first page has no previous one');

        const first = JSON.parse((await cli([])).stdout) as Array<{ client_id: string }>;
        assert.equal(first.length, 100, '`client list` prints 100 by default');
        const rest = JSON.parse((await cli(['--after', first.at(-1)!.client_id, '--limit', '1000'])).stdout) as Array<{ client_id: string }>;
        assert.deepEqual([...first, ...rest].map((c) => c.client_id).sort(), [...all].sort());
        assert.equal((JSON.parse((await cli(['--limit', '5'])).stdout) as unknown[]).length, 5);
        const refused = await cli(['--limit', '0']);
        assert.notEqual(refused.code, 0);
        assert.match(refused.stderr, /--limit/);
      });
    });
  }
});
