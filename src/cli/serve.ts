/** `gatehouse serve`: migrates, then serves HTTP until stopped (SPEC §2). */
import { SETUP_LINK_TTL, firstRunSetupLink } from '../accounts/setup.ts';
import { isWorker, runPrimary, runsPurge } from '../cluster.ts';
import { ConfigError, type Config } from '../config.ts';
import { migrate, openStore, type Store } from '../store/database.ts';
import type { HelpEntry } from './command.ts';

/** Listed by --help like the others, but run without the context they share: it builds its own, in each process. */
export const SERVE: HelpEntry = { words: 'serve', usage: [], help: ['start the server (applies migrations first)'], options: {} };

/**
 * `gatehouse serve`: one process that serves, or with WORKERS=n a primary that migrates,
 * prints the setup link, closes the database and forks n workers (src/cluster.ts), each of
 * which serves like the single process.
 */
export async function serve(config: Config): Promise<number> {
  if (isWorker) return serveHere(config, null);
  const store = openStore(config.database);
  await migrate(store);
  if (config.workers === 1) return serveHere(config, store);
  const { pino } = await import('pino');
  const log = pino({ level: config.logLevel });
  try {
    await printSetupLink({ config, db: store.db, now: Date.now });
  } finally {
    await store.close();
  }
  log.info({ workers: config.workers }, `Gatehouse is starting ${config.workers} workers on ${config.publicUrl} (database: ${config.database.kind})`);
  return runPrimary(config.workers, log);
}

/** On stderr, apart from the JSON log on stdout: the link is for the person at the terminal, not a log event. */
async function printSetupLink(ctx: Parameters<typeof firstRunSetupLink>[0]): Promise<void> {
  const setupLink = await firstRunSetupLink(ctx);
  if (setupLink)
    console.error(
      `\nNo administrator exists yet. Open this link within ${SETUP_LINK_TTL / 60} minutes to create the first one (it works once):\n\n` +
        `  ${setupLink}\n\nOr from the command line: gatehouse user create <username> --email <email> --admin\n`,
    );
}

/** Serves from this process until SIGTERM or SIGINT; `store` is the migrated database, or null in a worker (which opens its own). */
async function serveHere(config: Config, migrated: Store | null): Promise<number> {
  const store = migrated ?? openStore(config.database);
  // Loaded here only: the HTTP stack is most of the start-up time of the other commands.
  const { buildApp } = await import('../app.ts');
  const app = await buildApp(config, store, { purges: runsPurge() }); // which also schedules the purge (src/http/ops.ts)
  try {
    await app.listen({ port: config.port, host: config.host });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw error;
    throw new ConfigError(`port ${config.port} is busy (another Gatehouse?): stop what listens there, or set PORT to another port`);
  }
  app.log.info(`Gatehouse is listening on ${config.publicUrl} (database: ${config.database.kind})`);
  if (migrated) await printSetupLink(app.gatehouse);

  return new Promise((resolve) => {
    let stopping = false;
    const stop = async (signal: string) => {
      // A worker gets Ctrl-C twice, from the terminal and passed on by the primary: the second changes nothing.
      if (stopping) return;
      stopping = true;
      app.log.info(`${signal}: finishing in-flight requests, then exiting`);
      try {
        await app.close(); // stops accepting, waits for in-flight requests
        await store.close();
        resolve(0);
      } catch (error) {
        // Logged like everything else (a JSON line), not thrown as a stack trace.
        app.log.error({ error: (error as Error).message }, 'shutdown failed');
        resolve(1);
      }
    };
    process.on('SIGTERM', () => void stop('SIGTERM'));
    process.on('SIGINT', () => void stop('SIGINT'));
  });
}
