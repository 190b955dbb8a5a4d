/** Reading protocol parameters (src/protocol/params.ts): missing, repeated and empty parameters. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { holdsNul, parseForm, readParams, single } from '../../src/protocol/params.ts';

describe('readParams', () => {
  test('returns the named parameters that are present, and ignores unknown ones', () => {
    const params = readParams({ grant_type: 'refresh_token', refresh_token: 'grt_x', extra: 'ignored' }, ['refresh_token'], ['scope']);
    assert.deepEqual(params, { refresh_token: 'grt_x' });
  });

  test('a missing required parameter is invalid_request, naming it', () => {
    assert.throws(() => readParams({}, ['token'], []), { error: 'invalid_request', description: 'the "token" parameter is missing' });
  });

  test('several missing parameters are reported together', () => {
    assert.throws(() => readParams({}, ['code', 'redirect_uri'], []), {
      error: 'invalid_request',
      description: 'these parameters are missing: "code", "redirect_uri"',
    });
  });

  test('an empty value counts as omitted (RFC 6749 §3.1)', () => {
    assert.throws(() => readParams({ token: '' }, ['token'], []), { description: 'the "token" parameter is missing' });
    assert.deepEqual(readParams({ token: 't', scope: '' }, ['token'], ['scope']), { token: 't' });
  });

  test('a repeated parameter is refused, never "first wins" — optional ones too', () => {
    assert.throws(() => readParams({ token: ['a', 'b'] }, ['token'], []), { error: 'invalid_request', description: 'the "token" parameter is repeated' });
    assert.throws(() => readParams({ token: 'a', scope: ['x', 'x'] }, ['token'], ['scope']), { description: 'the "scope" parameter is repeated' });
  });

  test('a repeated unknown parameter does not matter', () => {
    assert.deepEqual(readParams({ token: 'a', utm: ['1', '2'] }, ['token'], []), { token: 'a' });
  });

  test('a value that was not UTF-8 (decoded to U+FFFD) is refused, naming the parameter', () => {
    assert.throws(() => readParams({ token: 'a\uFFFDb' }, ['token'], []), {
      error: 'invalid_request',
      description: 'the "token" parameter is not valid UTF-8',
    });
  });
});

describe('single', () => {
  test('one value is returned as is; absent and empty are undefined', () => {
    assert.equal(single({ state: ' x ' }, 'state'), ' x ');
    assert.equal(single({}, 'state'), undefined);
    assert.equal(single({ state: '' }, 'state'), undefined);
  });

  test('a repeated or non-UTF-8 value is invalid_request', () => {
    assert.throws(() => single({ state: ['a', 'b'] }, 'state'), { error: 'invalid_request', description: /repeated/ });
    assert.throws(() => single({ state: '\uFFFD' }, 'state'), { error: 'invalid_request', description: /UTF-8/ });
  });
});

describe('NUL characters', () => {
  test('a parameter holding NUL is refused (PostgreSQL would refuse it as text)', () => {
    assert.throws(() => single(parseForm('q=a%00b'), 'q'), /the "q" parameter contains a NUL character/);
    assert.throws(() => readParams(parseForm('code=%00'), ['code'], []), /the "code" parameter contains a NUL character/);
  });

  test('JSON from outside holds NUL anywhere: in a string, deep down, in an array, in a key', () => {
    assert.equal(holdsNul(JSON.parse('{"id": "a", "response": {"transports": ["usb", "nfc"]}, "n": 1, "b": null}')), false);
    assert.equal(holdsNul('\\u0000 is six characters, not NUL'), false);
    assert.equal(holdsNul('a\u0000'), true);
    assert.equal(holdsNul(JSON.parse('{"response": {"transports": ["usb", "n\\u0000fc"]}}')), true);
    assert.equal(holdsNul(JSON.parse('{"x\\u0000": 1}')), true);
    // 100,000 levels deep: walked without recursion.
    const deep = JSON.parse(`${'['.repeat(100_000)}"\\u0000"${']'.repeat(100_000)}`) as unknown;
    assert.equal(holdsNul(deep), true);
  });
});
