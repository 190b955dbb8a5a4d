/** Scopes (src/oauth/scopes.ts): how scope strings are read, and what a client may be granted. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { grantableScopes, isScopeToken, isSubset, joinScopes, normalizeScopes, parseScope, splitScopes } from '../../src/oauth/scopes.ts';

const READ = 'annotation:read';
const WRITE = 'annotation:write';

describe('parseScope (a requested scope string)', () => {
  test('known scopes come back sorted and without repeats, whatever the order and spacing', () => {
    assert.deepEqual(parseScope(`${WRITE} ${READ}`), [READ, WRITE]);
    assert.deepEqual(parseScope(`  ${READ}   ${READ} `), [READ]);
  });

  test('a name that is not a scope token (RFC 6749 §3.3) is invalid_scope, naming it', () => {
    assert.throws(() => parseScope(`${READ} "admin"`), { error: 'invalid_scope', description: /admin/ });
    assert.throws(() => parseScope(`${READ} caf\u00e9`), { error: 'invalid_scope' });
  });

  test('only the space separates scopes (RFC 6749 §3.3): a tab makes one malformed name', () => {
    assert.throws(() => parseScope(`${READ}\t${WRITE}`), { error: 'invalid_scope' });
  });

  test('a scope string naming no scope is invalid_scope', () => {
    assert.throws(() => parseScope(''), { error: 'invalid_scope', description: /names no scope/ });
    assert.throws(() => parseScope('   '), { error: 'invalid_scope', description: /names no scope/ });
  });
});

describe('splitScopes / joinScopes (the stored form)', () => {
  test('join sorts and removes repeats, so equal sets are stored as equal strings', () => {
    assert.equal(joinScopes([WRITE, READ, WRITE]), `${READ} ${WRITE}`);
    assert.equal(joinScopes([]), '');
  });

  test('split reads the stored form back', () => {
    assert.deepEqual(splitScopes(`${READ} ${WRITE}`), [READ, WRITE]);
    assert.deepEqual(splitScopes(''), []);
  });

  test('split normalizes a list that was not stored in normal form', () => {
    assert.deepEqual(splitScopes(`${WRITE} ${READ}`), [READ, WRITE]);
    assert.deepEqual(splitScopes(`${READ} ${READ}`), [READ]);
    assert.deepEqual(splitScopes(` ${READ}  ${WRITE} `), [READ, WRITE]);
  });

  test('normalizing drops empty names and repeats', () => {
    assert.deepEqual(normalizeScopes(['b', '', 'a', 'b']), ['a', 'b']);
  });

  test('isScopeToken accepts RFC 6749 scope tokens only', () => {
    assert.equal(isScopeToken(READ), true);
    assert.equal(isScopeToken('files:read,write'), true);
    assert.equal(isScopeToken('a b'), false);
    assert.equal(isScopeToken('"quoted"'), false);
    assert.equal(isScopeToken('back\\slash'), false);
    assert.equal(isScopeToken(''), false);
  });
});

describe('grantableScopes', () => {
  test('without a scope parameter the client gets everything it is allowed', () => {
    const allowed = [READ, WRITE] as const;
    const granted = grantableScopes(undefined, [...allowed]);
    assert.deepEqual(granted, [READ, WRITE]);
  });

  test('a requested subset of the allowed scopes is granted as requested', () => {
    assert.deepEqual(grantableScopes(READ, [READ, WRITE]), [READ]);
  });

  test('a scope the client is not allowed is invalid_scope, naming it', () => {
    assert.throws(() => grantableScopes(`${READ} ${WRITE}`, [READ], [READ, WRITE]), {
      error: 'invalid_scope',
      description: /"annotation:write" is not allowed/,
    });
  });

  test('a scope that the resource does not have is invalid_scope, naming it; so is one of another resource, or in another case', () => {
    assert.throws(() => grantableScopes(`${READ} admin`, [READ, WRITE]), { error: 'invalid_scope', description: 'unknown scope "admin"' });
    assert.throws(() => grantableScopes('Annotation:Read', [READ]), { error: 'invalid_scope' });
    assert.throws(() => grantableScopes(`${READ},${WRITE}`, [READ, WRITE]), { error: 'invalid_scope' });
  });

  test('a client with no scope on the resource and no scope asked for is invalid_scope', () => {
    assert.throws(() => grantableScopes(undefined, [], [READ]), { error: 'invalid_scope' });
  });

  test('an empty scope parameter is refused (readParams turns "" into absent before it gets here)', () => {
    assert.throws(() => grantableScopes(' ', [READ]), { error: 'invalid_scope' });
  });
});

describe('isSubset', () => {
  test('true when every requested scope is allowed, order and repeats aside', () => {
    assert.equal(isSubset([WRITE, READ, READ], [READ, WRITE]), true);
    assert.equal(isSubset([], [READ]), true);
    assert.equal(isSubset([READ, WRITE], [READ]), false);
    assert.equal(isSubset([READ], []), false);
  });
});
