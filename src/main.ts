/**
 * The `gatehouse` command (SPEC §2), run by bin/gatehouse.js (`npm start`, `npm run
 * gatehouse`): the command line (src/cli/) and its exit code. Bad input exits 2 with one
 * line; anything else, 1.
 */
import { UsageError } from './cli/command.ts';
import { runCommandLine } from './cli/index.ts';
import { ConfigError } from './config.ts';
import { InputError } from './input-error.ts';

runCommandLine(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    const known = error instanceof ConfigError || error instanceof UsageError || error instanceof InputError;
    console.error(`gatehouse: ${known ? (error as Error).message : `unexpected error: ${(error as Error).message}`}`);
    process.exit(known ? 2 : 1);
  },
);
