/**
 * `gatehouse --help`: every command's usage and help, from the commands themselves, then the
 * options and settings; `gatehouse <noun>` lists that noun's commands and `gatehouse <command>
 * --help` shows one command's usage, options and help.
 */
import { AUDIT_EVENT_TYPES } from '../audit.ts';
import type { HelpEntry } from './command.ts';

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

/** The options every command takes, as help lists them. */
const GLOBAL_OPTIONS_HELP = `  --json     print machine-readable JSON
  --help     show this help
  --version  print the version of Gatehouse`;

export function helpText(commands: readonly HelpEntry[]): string {
  return `Usage: gatehouse <command> [options]

Commands:
${commands.map(entry).join('\n')}

Options:
${GLOBAL_OPTIONS_HELP}

Passwords are prompted for (without echo) unless --password-stdin is given, and so is a
connection's client secret unless --client-secret-stdin is.
Settings come from the environment: DATABASE_URL (default sqlite:./data/gatehouse.db),
PORT, HOST, WORKERS, PUBLIC_URL, ACCESS_TOKEN_TTL, JWT_ACCESS_TOKEN_TTL, REFRESH_TOKEN_TTL, AUTH_CODE_TTL, DEVICE_CODE_TTL,
REFRESH_GRACE_SECONDS, REQUIRE_PKCE, SESSION_TTL, CONSENT_TTL, PURGE_INTERVAL_SECONDS,
AUDIT_RETENTION_DAYS, METRICS_TOKEN, REDIS_URL, TRUST_PROXY, LOG_LEVEL, CLIENT_METADATA_DOCUMENTS,
CLIENT_METADATA_ALLOWED_HOSTS, CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES, DYNAMIC_CLIENT_REGISTRATION,
REQUIRE_SECOND_FACTOR (none, admins or all), PASSWORD_LOGIN (all, admins or none), KEYS_SECRET.
See README.md.

Audit event types: ${AUDIT_EVENT_TYPES.join(', ')}.`;
}

/** `gatehouse user`: the commands whose words begin with the noun. */
export function nounHelp(noun: string, commands: readonly HelpEntry[]): string {
  return `Usage: gatehouse ${noun} <command> [options]

Commands:
${commands.map(entry).join('\n')}

See gatehouse ${noun} <command> --help.`;
}

/** `gatehouse user create --help`: its usage, what it does, and its options. */
export function commandHelp(command: HelpEntry): string {
  const own = Object.entries(command.options).map(([name, option]) => `  --${name}${option.type === 'string' ? ' <value>' : ''}`);
  return [
    `Usage: gatehouse ${[command.words, ...command.usage].join(' ')}`,
    ...(command.help.length > 0 ? ['', ...command.help] : []),
    '',
    'Options:',
    ...own,
    GLOBAL_OPTIONS_HELP,
  ].join('\n');
}
