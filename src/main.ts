/**
 * The `gatehouse` command (SPEC §2), run by bin/gatehouse.js and `npm start`: the command
 * line (src/cli/) and its exit code. Bad input exits 2 with one line; anything else, 1.
 */
import { enableCompileCache } from 'node:module';

// Node keeps the compiled modules on disk (under the system's temporary directory) and the
// next start reads them instead of compiling again: a command starts in about half the time.
// Before anything else is imported, so that it covers everything.
enableCompileCache();

const [{ UsageError }, { runCommandLine }, { ConfigError }, { InputError }] = await Promise.all([
  import('./cli/command.ts'),
  import('./cli/index.ts'),
  import('./config.ts'),
  import('./input-error.ts'),
]);

runCommandLine(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    const known = error instanceof ConfigError || error instanceof UsageError || error instanceof InputError;
    console.error(`gatehouse: ${known ? (error as Error).message : `unexpected error: ${(error as Error).message}`}`);
    process.exit(known ? 2 : 1);
  },
);
