/**
 * What an OAuth error says to clients (RFC 6749 §5.2's `error_description`) and to people (an
 * error page): the same words, the former kept to the characters the RFC allows.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { OAuthError } from '../../src/protocol/errors.ts';

const SECTION_5_2 = /^[\x20-\x21\x23-\x5b\x5d-\x7e]*$/;

describe('OAuthError', () => {
  test('what is sent keeps to RFC 6749 §5.2: quotes, backslashes, dashes and ellipses in ASCII, anything else a question mark', () => {
    const written = 'the “scope” — "a\\b" … exp − iat ’s Université 😀';
    const error = new OAuthError('invalid_scope', written);
    assert.equal(error.errorDescription, "the 'scope' - 'a/b' ... exp - iat 's Universit? ?");
    assert.match(error.errorDescription, SECTION_5_2);
    assert.deepEqual(error.toJSON(), { error: 'invalid_scope', error_description: error.errorDescription });
  });

  test('the description itself stays as written: an error page shows it to a person', () => {
    const written = 'Logging in with Connexion Université is not available right now.';
    assert.equal(new OAuthError('access_denied', written).description, written);
  });
});
