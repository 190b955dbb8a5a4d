/** Names of clients no administrator registered (src/oauth/client-names.ts): what is refused, and what is normalised. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { normalizeClientName } from '../../src/oauth/client-names.ts';

describe('normalizeClientName', () => {
  test('refuses control, format and invisible characters', () => {
    const refused: Array<[string, string]> = [
      ['bell', 'bell\u0007'],
      ['newline inside', 'two\nlines'],
      ['zero-width space', 'Git\u200BHub'],
      ['zero-width joiner between letters', 'Git\u200DHub'],
      ['soft hyphen', 'Note\u00ADs'],
      ['right-to-left override', 'Evil\u202Eeliforp'],
      ['byte order mark inside', 'No\uFEFFtes'],
      ['line separator', 'Notes\u2028Official'],
      ['paragraph separator', 'Notes\u2029Official'],
      ['Hangul filler', '\u3164'],
      ['Hangul choseong filler', 'A\u115FB'],
      ['Hangul jungseong filler', 'A\u1160B'],
      ['half-width Hangul filler', 'A\uFFA0B'],
      ['braille blank', 'Notes\u2800'],
      ['variation selector after a letter', 'Notes\uFE0F'],
      ['combining grapheme joiner', 'A\u034FB'],
      ['private use', 'A\uE000B'],
      ['lone surrogate', 'A\uD800B'],
    ];
    for (const [what, name] of refused) {
      assert.ok('problem' in normalizeClientName(name), what);
    }
  });

  test('refuses empty and over-long names', () => {
    for (const name of ['', '   ', 'x'.repeat(101), '\uFDFA'.repeat(10)]) assert.ok('problem' in normalizeClientName(name), JSON.stringify(name));
  });

  test('normalises: NFKC, trimmed, one space for any run of spaces', () => {
    assert.deepEqual(normalizeClientName('  Tidy \u00A0\u3000 Notes\t'), { name: 'Tidy Notes' });
    assert.deepEqual(normalizeClientName('\uFF27\uFF49\uFF54'), { name: 'Git' });
    assert.deepEqual(normalizeClientName('Cafe\u0301'), { name: 'Café' });
  });

  test('accepts other scripts and emoji, joined or with their variation selector', () => {
    for (const name of ['تطبيق الملاحظات', 'Notes 👩‍💻', '❤️ Notes', '🏳️‍🌈 Pride', 'メモ', 'Ελληνικά']) {
      assert.deepEqual(normalizeClientName(name), { name: name.normalize('NFKC') }, name);
    }
  });
});
