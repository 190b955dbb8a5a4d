/**
 * The `gatehouse` command line (SPEC §2): every noun's commands, one file each, parsed and
 * dispatched here. Every command honours DATABASE_URL and the other settings, prints JSON
 * with --json, and exits non-zero with one clear line on bad input.
 */
import { isDeepStrictEqual, parseArgs, type ParseArgsOptionsConfig } from 'node:util';
import pkg from '../../package.json' with { type: 'json' };
import { loadConfig } from '../config.ts';
import { type ContextLogger } from '../context.ts';
import { openContext } from '../open-context.ts';
import { migrate, openStore } from '../store/database.ts';
import { AUDIT } from './audit.ts';
import { CLIENT_COMMANDS } from './client.ts';
import { GLOBAL_OPTIONS, UsageError, closest, noArguments, parseOptions, type Command, type HelpEntry } from './command.ts';
import { CONNECTION_COMMANDS } from './connection.ts';
import { MIGRATE, PURGE } from './database.ts';
import { GROUP_COMMANDS } from './group.ts';
import { commandHelp, helpText, nounHelp } from './help.ts';
import { ISSUER_COMMANDS } from './issuer.ts';
import { KEYS_COMMANDS } from './keys.ts';
import { RESOURCE_COMMANDS } from './resource.ts';
import { SCOPE_COMMANDS } from './scope.ts';
import { SERVE, serve } from './serve.ts';
import { USER_COMMANDS } from './user.ts';

/** Every command but `serve`, in the order --help lists them. */
const COMMANDS: readonly Command[] = [
  MIGRATE,
  ...USER_COMMANDS,
  ...GROUP_COMMANDS,
  ...CLIENT_COMMANDS,
  ...RESOURCE_COMMANDS,
  ...SCOPE_COMMANDS,
  ...KEYS_COMMANDS,
  ...ISSUER_COMMANDS,
  ...CONNECTION_COMMANDS,
  PURGE,
  AUDIT,
];

const HELP = helpText([SERVE, ...COMMANDS]);

/**
 * Every command's options, for one parse of the whole command line: an option is accepted
 * whatever the command (as ever); two commands that take the same option must read it the
 * same way (each says in its own words what it does there).
 */
function allOptions(commands: readonly Command[]): ParseArgsOptionsConfig {
  const options: ParseArgsOptionsConfig = parseOptions(GLOBAL_OPTIONS);
  for (const { words, options: flags } of commands) {
    for (const [name, option] of Object.entries(parseOptions(flags))) {
      if (name in options && !isDeepStrictEqual(options[name], option))
        throw new Error(`gatehouse ${words}: --${name} is declared differently by another command`);
      options[name] = option;
    }
  }
  return options;
}

const OPTIONS = allOptions(COMMANDS);

/** The CLI's own diagnostics go to stderr; routine events (a revocation's fan-out) stay quiet. */
const cliLog: ContextLogger = {
  info: () => {},
  warn: (object, message) => console.error(`gatehouse: ${message}`, object),
  error: (object, message) => console.error(`gatehouse: ${message}`, object),
};

/** Every command, `serve` included, for looking one up by its words (and for the tests of their help). */
export const ALL: readonly HelpEntry[] = [SERVE, ...COMMANDS];

/** The nouns whose commands take a second word: user, client, …. */
const NOUNS = new Set(ALL.filter((c) => c.words.includes(' ')).map((c) => c.words.split(' ')[0]!));

/** The command the first words name (and how many words that took); else a refusal, or for a bare noun its commands. */
function findCommand(first: string, second: string | undefined, help: boolean): HelpEntry | number {
  const command = ALL.find((c) => c.words === first) ?? ALL.find((c) => c.words === `${first} ${second}`);
  if (command) return command;
  if (NOUNS.has(first) && second === undefined) {
    console.log(
      nounHelp(
        first,
        ALL.filter((c) => c.words.startsWith(`${first} `)),
      ),
    );
    return help ? 0 : 2;
  }
  const typed = [first, second].filter((word) => word !== undefined).join(' ');
  const noun = NOUNS.has(first) ? first : undefined;
  const names = [...ALL.map((c) => c.words), ...NOUNS];
  const meant = closest(typed, names) ?? (noun ? undefined : closest(first, names));
  throw new UsageError(`unknown command "${typed}"; ${meant ? `did you mean "${meant}"?` : `see gatehouse ${noun ? `${noun} ` : ''}--help`}`);
}

/** Parses `argv` with only `command`'s options (and --json, --help): an option another command takes is refused, with the closest it takes. */
function parseFor(command: HelpEntry, argv: string[]) {
  const options = parseOptions({ ...GLOBAL_OPTIONS, ...command.options });
  try {
    return parseArgs({ args: argv, options, allowPositionals: true, allowNegative: true, strict: true });
  } catch (error) {
    const { tokens } = parseArgs({ args: argv, options, allowPositionals: true, allowNegative: true, strict: false, tokens: true });
    const unknown = tokens.find((token) => token.kind === 'option' && !(token.name in options));
    if (unknown?.kind !== 'option') throw new UsageError((error as Error).message);
    const meant = closest(unknown.name, Object.keys(options));
    // A value that begins with "-" (a kid may) reads as short options unless it follows "--".
    const typed = argv[unknown.index]!;
    const asValue = typed.startsWith('--') ? '' : ` (a value that begins with "-" goes after --: gatehouse ${command.words} -- ${typed})`;
    throw new UsageError(
      `unknown option ${unknown.rawName} for "${command.words}"; ${meant ? `did you mean --${meant}?` : `see gatehouse ${command.words} --help`}${asValue}`,
    );
  }
}

/** Runs the command line `argv` (without node and the script); resolves to the exit code. */
export async function runCommandLine(argv: string[]): Promise<number> {
  // First only the words that name the command: which options are valid depends on it.
  const { values, positionals } = parseArgs({ args: argv, options: OPTIONS, allowPositionals: true, allowNegative: true, strict: false });
  const [first, second] = positionals;
  const help = values.help === true;
  // `gatehouse --version`: the package's version, whatever else is on the line; nothing is opened.
  if (values.version === true) {
    console.log(pkg.version);
    return 0;
  }
  if (first === undefined || first === 'help') {
    console.log(HELP);
    return first === undefined && !help ? 2 : 0;
  }
  // A mistyped command is refused before anything is opened: no database file is created for it.
  const found = findCommand(first, second, help);
  if (typeof found === 'number') return found;
  if (help) {
    console.log(commandHelp(found));
    return 0;
  }
  const parsed = parseFor(found, argv);
  const options = parsed.values;
  const rest = parsed.positionals.slice(found.words.split(' ').length);

  const config = loadConfig();
  if (found === SERVE) {
    noArguments(rest);
    return serve(config);
  }
  const command = COMMANDS.find((c) => c === found)!;

  const store = openStore(config.database);
  let closeContext = async () => {};
  try {
    await migrate(store);
    // Revocations made here reach running instances' WebSockets through the same fan-out, and
    // changes are audited like the admin pages' ones, made by COMMAND_LINE: no user, no address.
    const ctx = await openContext(config, store, cliLog);
    closeContext = () => ctx.close();
    const print = (json: unknown, text: string) => console.log(options.json ? JSON.stringify(json) : text);
    return await command.run(ctx, rest, options, print);
  } finally {
    await closeContext();
    await store.close();
  }
}
