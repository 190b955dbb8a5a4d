/**
 * `gatehouse --help`: every command's usage and help, from the commands themselves, then the
 * options and settings; `gatehouse <noun>` lists that noun's commands and `gatehouse <command>
 * --help` shows one command's usage, options and help.
 */
import { AUDIT_EVENT_TYPES } from '../audit.ts';
import { SETTINGS } from '../config.ts';
import { GLOBAL_OPTIONS, type Flags, type HelpEntry } from './command.ts';

/** The column a command's help starts at. */
const HELP_COLUMN = 42;

/** One command's lines: its usage, its help beside it when the usage leaves room, else below it. */
function entry(command: HelpEntry): string {
  const [first = '', ...more] = command.usage;
  const usage = [`  ${command.words}${first === '' ? '' : ` ${first}`}`, ...more.map((line) => `${' '.repeat(command.words.length + 3)}${line}`)];
  const help = [...command.help];
  const last = usage.length - 1;
  if (help.length > 0 && usage[last]!.length <= HELP_COLUMN - 2) usage[last] = usage[last]!.padEnd(HELP_COLUMN) + help.shift();
  return [...usage, ...help.map((line) => ' '.repeat(HELP_COLUMN) + line)].join('\n');
}

/** One setting's line: its name, what it is, and its default. */
function setting(s: (typeof SETTINGS)[number]): string {
  return `  ${s.name}`.padEnd(HELP_COLUMN) + s.help + (s.default === undefined ? '' : ` [default ${s.default}]`);
}

/**
 * Options as help lists them, one line each: the option (with `<value>` when it takes one),
 * then what it does, aligned; a repeatable one says so.
 */
function flagLines(flags: Flags, column: number): string[] {
  return Object.entries(flags).map(([name, flag]) => {
    const option = `  --${name}${flag.type === 'string' ? ' <value>' : ''}`;
    return `${option.padEnd(column)}${flag.help}${flag.multiple ? ' (repeat for several)' : ''}`;
  });
}

/** The column options' help starts at: after the longest option of `flags`, with two spaces. */
function flagColumn(...flags: Flags[]): number {
  return Math.max(...flags.flatMap((f) => Object.entries(f).map(([name, flag]) => `  --${name}${flag.type === 'string' ? ' <value>' : ''}`.length))) + 2;
}

/** The options every command takes, as help lists them. */
const GLOBAL_OPTIONS_HELP = flagLines(GLOBAL_OPTIONS, flagColumn(GLOBAL_OPTIONS)).join('\n');

export function helpText(commands: readonly HelpEntry[]): string {
  return `Usage: gatehouse <command> [options]

Commands:
${commands.map(entry).join('\n')}

Options:
${GLOBAL_OPTIONS_HELP}

Passwords are prompted for (without echo) unless --password-stdin is given, and so is a
connection's client secret unless --client-secret-stdin is.

Settings, from the environment (every command reads them; README.md says more):
${SETTINGS.map(setting).join('\n')}

Audit event types: ${AUDIT_EVENT_TYPES.join(', ')}.`;
}

/** `gatehouse user`: the commands whose words begin with the noun. */
export function nounHelp(noun: string, commands: readonly HelpEntry[]): string {
  return `Usage: gatehouse ${noun} <command> [options]

Commands:
${commands.map(entry).join('\n')}

See gatehouse ${noun} <command> --help.`;
}

/** `gatehouse user create --help`: its usage, what it does, and its options, each with what it does. */
export function commandHelp(command: HelpEntry): string {
  const column = flagColumn(command.options, GLOBAL_OPTIONS);
  return [
    `Usage: gatehouse ${[command.words, ...command.usage].join(' ')}`,
    ...(command.help.length > 0 ? ['', ...command.help] : []),
    '',
    'Options:',
    ...flagLines(command.options, column),
    ...flagLines(GLOBAL_OPTIONS, column),
  ].join('\n');
}
