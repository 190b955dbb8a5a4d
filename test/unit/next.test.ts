/** Where login may send the browser afterwards (src/http/next.ts `safeNext`): same-origin paths only. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { safeNext } from '../../src/http/next.ts';

const next = (value: string | undefined) => safeNext(value, 'https://id.example');

describe('safeNext', () => {
  test('a same-origin path, with its query, is kept', () => {
    assert.equal(next('/account'), '/account');
    assert.equal(next('/oauth/authorize?client_id=x&scope=a%20b'), '/oauth/authorize?client_id=x&scope=a%20b');
  });

  test('nothing, or an empty value, goes home', () => {
    assert.equal(next(undefined), '/');
    assert.equal(next(''), '/');
  });

  test('absolute URLs go home, even to our own origin', () => {
    for (const value of ['https://evil.example/', 'https://id.example/account', 'javascript:alert(1)', 'data:text/html,x', 'account']) {
      assert.equal(next(value), '/', value);
    }
  });

  test('protocol-relative and backslash forms that browsers read as another host go home', () => {
    for (const value of ['//evil.example', '///evil.example', '/\\evil.example', '/\\/evil.example', '\\\\evil.example']) {
      assert.equal(next(value), '/', value);
    }
  });

  test('dot segments that collapse into "//host" go home, also when percent-encoded', () => {
    // new URL() removes "." and ".." segments (also %2e forms), so "/.//evil" would become "//evil".
    for (const value of ['/.//evil.example', '/..//evil.example', '/%2e//evil.example', '/%2E%2E//evil.example', '/a/..//evil.example']) {
      assert.equal(next(value), '/', value);
    }
  });

  test('control characters go home (browsers strip tabs and newlines, making "/\\t/evil" into "//evil")', () => {
    for (const value of ['/\t/evil.example', '/\n/evil.example', '/\r/evil.example', '/\x00', '/account\x1f']) {
      assert.equal(next(value), '/', JSON.stringify(value));
    }
  });

  test('percent-encoded slashes and backslashes stay encoded, so they stay a path on our host', () => {
    assert.equal(next('/%2F%2Fevil.example'), '/%2F%2Fevil.example');
    assert.equal(next('/%5Cevil.example'), '/%5Cevil.example');
  });

  test('a fragment is dropped; other characters come back percent-encoded', () => {
    assert.equal(next('/account#section'), '/account');
    assert.equal(next('/a b'), '/a%20b');
  });
});
