/**
 * What makes a password acceptable (SPEC §4.16): 8 to 1024 characters, and none of the 10 000
 * most common, however it is capitalised or typed.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { passwordProblem } from '../../../src/accounts/passwords.ts';

describe('passwordProblem', () => {
  test('the 10 000 most common passwords are refused, in any case and as typed on any keyboard', async () => {
    for (const common of ['password', 'Password1', 'QWERTYUIOP', 'iloveyou1', 'sunshine1', 'ｐａｓｓｗｏｒｄ']) {
      assert.match(String(await passwordProblem(common)), /one of the most common passwords/, common);
    }
  });

  test('length: at least 8 and at most 1024 characters; an uncommon one of those is accepted', async () => {
    assert.match(String(await passwordProblem('abc123!')), /at least 8/);
    assert.match(String(await passwordProblem('x'.repeat(1025))), /at most 1024/);
    assert.equal(await passwordProblem('correct horse battery staple'), null);
    assert.equal(await passwordProblem('letmein123'), null, 'beyond the 10 000th: not refused');
  });
});
