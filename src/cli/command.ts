/**
 * What a `gatehouse` command is (SPEC §2): the words that name it, its usage and help as
 * `gatehouse --help` shows them, the options it takes (node:util parseArgs) and what it runs.
 * Each noun's commands live in their own file here; src/cli/index.ts assembles them.
 */
import type { ParseArgsOptionDescriptor, ParseArgsOptionsConfig, parseArgs } from 'node:util';
import type { AppContext } from '../context.ts';

/** Bad input on the command line: one line on stderr, exit code 2. */
export class UsageError extends Error {}

/** Prints `json` under --json, else `text`. */
export type Print = (json: unknown, text: string) => void;

/** What parseArgs gives for these options. */
export type OptionValues<O extends ParseArgsOptionsConfig> = ReturnType<
  typeof parseArgs<{ options: O; allowPositionals: true; allowNegative: true }>
>['values'];

/** An option a command takes: how parseArgs reads it, and what it does, one line in the command's --help. */
export interface Flag extends ParseArgsOptionDescriptor {
  readonly help: string;
}

/** A command's options by name. */
export type Flags = Readonly<Record<string, Flag>>;

/** Options as parseArgs takes them: without their help. */
export function parseOptions(flags: Flags): ParseArgsOptionsConfig {
  return Object.fromEntries(Object.entries(flags).map(([name, { help: _, ...option }]) => [name, option]));
}

/** The options every command takes. */
export const GLOBAL_OPTIONS = {
  json: { type: 'boolean', help: 'print machine-readable JSON' },
  help: { type: 'boolean', short: 'h', help: 'show this help' },
  version: { type: 'boolean', help: 'print the version of Gatehouse' },
} as const satisfies Flags;

/** A command as --help lists it. */
export interface HelpEntry {
  /** The words that name it: `user create`. */
  readonly words: string;
  /** Its arguments, after the words; a long usage goes on in more lines, aligned under the first. */
  readonly usage: readonly string[];
  /** What it does, beside the usage; empty when the usage says it all. */
  readonly help: readonly string[];
  /** The options it takes, besides --json and --help, each with its help. */
  readonly options: Flags;
}

export interface Command extends HelpEntry {
  /** Runs with the database migrated and the context open, given the arguments after its words; resolves to the exit code. */
  run(ctx: AppContext, args: string[], options: OptionValues<ParseArgsOptionsConfig>, print: Print): Promise<number>;
}

/** A command whose `run` sees its own options typed. */
export function command<const O extends Flags = {}>(spec: {
  words: string;
  usage?: string | readonly string[];
  help?: string | readonly string[];
  options?: O;
  run(ctx: AppContext, args: string[], options: OptionValues<O>, print: Print): Promise<number>;
}): Command {
  const lines = (text: string | readonly string[] | undefined) => (text === undefined ? [] : typeof text === 'string' ? [text] : text);
  return { words: spec.words, usage: lines(spec.usage), help: lines(spec.help), options: spec.options ?? {}, run: spec.run as Command['run'] };
}

/** The refusal of a command given the wrong arguments: its usage line. */
export function usageError(command: HelpEntry): UsageError {
  return new UsageError(`usage: gatehouse ${[command.words, ...command.usage].join(' ')}`);
}

/** The command's one argument; its usage line when there is none or more than one. */
export function oneArgument(command: HelpEntry, args: string[]): string {
  const [only, ...extra] = args;
  if (only === undefined || extra.length > 0) throw usageError(command);
  return only;
}

export function noArguments(args: string[]): void {
  if (args.length > 0) throw new UsageError(`unexpected argument "${args[0]}"`);
}

/** Edit distance with adjacent transpositions (optimal string alignment): "confidentail" is one edit from "confidential". */
function editDistance(a: string, b: string): number {
  const rows = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      rows[i]![j] = Math.min(rows[i - 1]![j]! + 1, rows[i]![j - 1]! + 1, rows[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) rows[i]![j] = Math.min(rows[i]![j]!, rows[i - 2]![j - 2]! + 1);
    }
  }
  return rows[a.length]![b.length]!;
}

/** The candidate closest to what was typed, if one is close enough to be what was meant (a third of its letters wrong at most). */
export function closest(typed: string, candidates: Iterable<string>): string | undefined {
  let best: { candidate: string; distance: number } | undefined;
  for (const candidate of candidates) {
    const distance = editDistance(typed, candidate);
    if (distance <= Math.max(1, Math.floor(typed.length / 3)) && (best === undefined || distance < best.distance)) best = { candidate, distance };
  }
  return best?.candidate;
}
