/**
 * What README.md and docs/*.md quote, checked against the running server and the real
 * command line, so the docs cannot drift from them again: the commands of the README's
 * table, the metadata fields the docs name, the form of a user's `acct:` id, and the log
 * line a troubleshooting row tells people to look for.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFile, readdir } from 'node:fs/promises';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import * as oidc from 'openid-client';
import { SETTINGS } from '../src/config.ts';
import { BACKENDS, backendOptions } from './support/backends.ts';
import { discover, obtainTokens, profile } from './support/oauth-client.ts';
import { startServer, type TestServer } from './support/server.ts';
import { UserAgent } from './support/user-agent.ts';

const REPOSITORY = new URL('..', import.meta.url);
const README = await readFile(new URL('README.md', REPOSITORY), 'utf8');
const DOCS = Object.fromEntries(
  await Promise.all(
    (await readdir(new URL('docs', REPOSITORY)))
      .filter((name) => name.endsWith('.md'))
      .map(async (name) => [name, await readFile(new URL(`docs/${name}`, REPOSITORY), 'utf8')] as const),
  ),
);
const EVERY_DOC = [README, ...Object.values(DOCS)].join('\n');

test('every command in the README table is one the command line knows, with its own --help', async () => {
  // `| \`gatehouse user create <username> …\` | …`: the words before the first argument or option.
  const commands = [...README.matchAll(/^\| `gatehouse ([a-z-]+(?: [a-z-]+)?)[ `]/gm)].map((match) => match[1]!);
  assert.ok(commands.length >= 10, `only ${commands.length} commands found in the table`);
  await Promise.all(
    commands.map(async (words) => {
      const { stdout } = await promisify(execFile)(process.execPath, ['bin/gatehouse.js', ...words.split(' '), '--help'], {
        cwd: REPOSITORY,
        env: { PATH: process.env.PATH },
      });
      assert.match(stdout.split('\n')[0]!, new RegExp(`^Usage: gatehouse ${words}( |$)`), `gatehouse ${words} --help`);
    }),
  );
});

test("every setting config.ts reads is in the README's table of settings", () => {
  const table = README.slice(README.indexOf('\n## Settings'), README.indexOf('\n## Command line'));
  for (const { name } of SETTINGS) assert.ok(table.includes(`\`${name}\``), `the README's settings table leaves out ${name}`);
});

for (const backend of BACKENDS) {
  describe(`what the docs quote, against a server (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    before(async () => {
      server = await startServer(backend, { DYNAMIC_CLIENT_REGISTRATION: 'true' });
      await server.createUser('alice');
    });
    after(() => server?.close());
    const metadata = async () => (await (await fetch(new URL('/.well-known/oauth-authorization-server', server.url))).json()) as Record<string, string>;

    test('every metadata field the docs name (…_endpoint, …_supported) is in the metadata document', async () => {
      const document = await metadata();
      // bearer_methods_supported is an MCP server's own (protected resource) metadata, which docs/mcp.md shows too.
      const named = new Set([...EVERY_DOC.matchAll(/\b([a-z]+(?:_[a-z]+)*_(?:endpoint|supported))\b/g)].map((match) => match[1]!));
      named.delete('bearer_methods_supported');
      // …_not_supported are error codes (request_not_supported), not metadata fields.
      for (const name of named) if (name.endsWith('_not_supported')) named.delete(name);
      assert.ok(named.size >= 10);
      for (const field of named) assert.ok(field in document, `the docs name ${field}, the metadata document has no such field`);
    });

    test('a user id is acct:<username>@<host name of PUBLIC_URL>, as every acct: example shows', async () => {
      const { client } = await server.createClient({ scope: 'annotation:read' });
      const tokens = await obtainTokens(await discover(server, client.id), new UserAgent(server.url));
      const { userid } = (await (await profile(server, tokens.access_token)).json()) as { userid: string };
      const host = new URL(server.url).hostname;
      assert.equal(userid, `acct:alice@${host}`);
      // The docs' examples run against PUBLIC_URL http://localhost:5000.
      const examples = [...EVERY_DOC.matchAll(/acct:alice@localhost[^\s"`,)]*/g)].map((match) => match[0]);
      assert.ok(examples.length > 0);
      for (const example of examples) assert.equal(example, userid.replace(host, 'localhost'));
    });

    test('every label docs/oidc.md names on the admin page for registering a client is on that page, word for word', async () => {
      const paragraph = /^The admin page does the same:[\s\S]*?\n\n/m.exec(DOCS['oidc.md']!)?.[0];
      assert.ok(paragraph, 'docs/oidc.md no longer describes the admin page');
      const named = [...paragraph.matchAll(/\*\*([^*]+)\*\*/g)].map((match) => match[1]!.replace(/\s+/g, ' '));
      assert.ok(named.length >= 8, `only ${named.length} labels named`);
      await server.createUser('root', { admin: true });
      const admin = new UserAgent(server.url);
      await admin.login('root');
      // What a person reads on the list and on the form, tags and entities aside.
      const text = (html: string) =>
        html
          .replace(/<[^>]*>/g, ' ')
          .replace(/&amp;/g, '&')
          .replace(/\s+/g, ' ');
      const pages = text((await admin.visit('/admin/oauthclients')).html) + text((await admin.visit('/admin/oauthclients/new')).html);
      for (const label of named) assert.ok(pages.includes(label), `docs/oidc.md names "${label}", the admin pages do not show it`);
    });

    test('docs/oidc.md: openid-client refuses a Gatehouse on plain http with the error it quotes, and discovers it with allowInsecureRequests', async () => {
      const [, quoted] = /\| openid-client: "([^"]+)" \|/.exec(DOCS['oidc.md']!)!;
      await assert.rejects(oidc.discovery(new URL(server.url), 'any-client'), (error: Error) => error.message === quoted);
      assert.match(DOCS['oidc.md']!, /execute: \[oidc\.allowInsecureRequests\]/);
      const config = await oidc.discovery(new URL(server.url), 'any-client', undefined, undefined, { execute: [oidc.allowInsecureRequests] });
      assert.equal(config.serverMetadata().issuer, server.url);
    });

    test('a refused metadata document is logged under the name docs/mcp.md gives', async () => {
      const [, name] = /log line for that request \(`"([^"]+)"`, in `detail`\)/.exec(DOCS['mcp.md']!)!;
      const authorize = new URL((await metadata()).authorization_endpoint!);
      // A private address: refused unless CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES=true.
      authorize.search = new URLSearchParams({
        client_id: 'https://127.0.0.1:9/client.json',
        response_type: 'code',
        redirect_uri: 'http://127.0.0.1:8765/callback',
        code_challenge: 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM',
        code_challenge_method: 'S256',
      }).toString();
      const page = await fetch(authorize, { redirect: 'manual' });
      assert.match(await page.text(), /metadata document was refused/);
      const line = server.logs.map((log) => JSON.parse(log) as { msg: string; detail?: string }).find((log) => log.msg === name);
      assert.ok(line?.detail, `no "${name}" log line with a detail`);
    });
  });
}
