/** `gatehouse <command> --help` (src/cli/help.ts): every option of every command with a line saying what it does. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ALL } from '../../src/cli/index.ts';
import { commandHelp } from '../../src/cli/help.ts';
import { GLOBAL_OPTIONS } from '../../src/cli/command.ts';

test("every command's --help gives each of its options, the global ones (--json, --help, --version) included, a line saying what it does", () => {
  assert.ok(ALL.length >= 40, `only ${ALL.length} commands`);
  for (const command of ALL) {
    const help = commandHelp(command);
    const options = help.slice(help.indexOf('\nOptions:\n') + '\nOptions:\n'.length).split('\n');
    const names = [...Object.keys(command.options), ...Object.keys(GLOBAL_OPTIONS)];
    assert.equal(options.length, names.length, `gatehouse ${command.words} --help:\n${help}`);
    options.forEach((line, index) => {
      // The option, then at least two spaces, then words: aligned with the others.
      assert.match(line, new RegExp(`^ {2}--${names[index]}( <value>)? {2,}\\S.{10,}$`), `gatehouse ${command.words} --help: "${line}"`);
    });
    const starts = new Set(options.map((line) => /^ {2}--\S+(?: <value>)? +/.exec(line)![0].length));
    assert.equal(starts.size, 1, `gatehouse ${command.words} --help: the descriptions are not aligned`);
  }
});

test('a repeatable option says so', () => {
  const create = ALL.find((command) => command.words === 'client create')!;
  assert.match(commandHelp(create), /^ {2}--redirect-uri <value> +where the code comes back.*\(repeat for several\)$/m);
});
