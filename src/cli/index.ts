/**
 * The `gatehouse` command line (SPEC §2): every noun's commands, one file each, parsed and
 * dispatched here. Every command honours DATABASE_URL and the other settings, prints JSON
 * with --json, and exits non-zero with one clear line on bad input.
 */
import { isDeepStrictEqual, parseArgs, type ParseArgsOptionsConfig } from 'node:util';
import { loadConfig } from '../config.ts';
import { type ContextLogger } from '../context.ts';
import { openContext } from '../open-context.ts';
import { migrate, openStore } from '../store/database.ts';
import { AUDIT } from './audit.ts';
import { CLIENT_COMMANDS } from './client.ts';
import { UsageError, type Command } from './command.ts';
import { MIGRATE, PURGE } from './database.ts';
import { GROUP_COMMANDS } from './group.ts';
import { helpText } from './help.ts';
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
  PURGE,
  AUDIT,
];

const HELP = helpText([SERVE, ...COMMANDS]);

/** The options every command takes. */
const GLOBAL_OPTIONS = {
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const satisfies ParseArgsOptionsConfig;

/**
 * Every command's options, for one parse of the whole command line: an option is accepted
 * whatever the command (as ever); two commands that take the same option must mean the same.
 */
function allOptions(commands: readonly Command[]): ParseArgsOptionsConfig {
  const options: ParseArgsOptionsConfig = { ...GLOBAL_OPTIONS };
  for (const { words, options: own } of commands) {
    for (const [name, option] of Object.entries(own)) {
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

/** Runs the command line `argv` (without node and the script); resolves to the exit code. */
export async function runCommandLine(argv: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({ args: argv, options: OPTIONS, allowPositionals: true, allowNegative: true, strict: true });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  const { values: options, positionals } = parsed;
  const [first, second, ...rest] = positionals;
  if (options.help || first === undefined || first === 'help') {
    console.log(HELP);
    return first === undefined && !options.help ? 2 : 0;
  }
  const config = loadConfig();
  if (first === SERVE.words) return serve(config);

  // A mistyped command is refused before anything is opened: no database file is created for it.
  const words = `${first} ${second ?? ''}`.trim();
  const command = COMMANDS.find((c) => c.words === words);
  if (command === undefined) throw new UsageError(`unknown command "${[first, second].filter(Boolean).join(' ')}"; see gatehouse --help`);

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
