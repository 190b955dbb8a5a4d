/**
 * How `gatehouse client block <URL prefix>` reads its prefix (SPEC §2, §4.8): canonical, so
 * that a block compares by scheme, host and port exactly and then by the start of the path,
 * whatever way the administrator wrote it — and a host written with a trailing dot or an
 * explicit default port cannot slip past it.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { blockedPrefix } from '../../src/clients/clients.ts';

test('a prefix is stored as the URL parser writes it, its origin always closed by a /', () => {
  const canonical: Record<string, string> = {
    'https://example.com': 'https://example.com/',
    'https://Example.COM.': 'https://example.com/',
    'https://example.com.:443/tenant/': 'https://example.com/tenant/',
    'https://example.com:443/tenant': 'https://example.com/tenant',
    'https://example.com:8443': 'https://example.com:8443/',
    'https://example.com/a/../tenant/': 'https://example.com/tenant/',
  };
  for (const [written, stored] of Object.entries(canonical)) assert.equal(blockedPrefix(written), stored, written);
});

test('a prefix that no metadata document URL could start with is refused', () => {
  for (const written of ['http://example.com/', 'example.com', 'https://example.com/x#y', 'https://user:pw@example.com/', 'https://./', 'not a url']) {
    assert.equal(blockedPrefix(written), null, written);
  }
});

test('a block on a host covers that origin only, not a longer host name or another port', () => {
  const prefix = blockedPrefix('https://example.com')!;
  const blocks = (clientId: string) => clientId.startsWith(prefix);
  assert.ok(blocks('https://example.com/client.json'));
  assert.ok(!blocks('https://example.com.evil.example/client.json'));
  assert.ok(!blocks('https://example.com:8443/client.json'));
});
