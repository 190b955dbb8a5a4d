/** `gatehouse migrate` and `gatehouse purge`: the database's upkeep. */
import { purge } from '../maintenance.ts';
import { command } from './command.ts';

/** The migrations themselves run before every command (src/cli/index.ts): this one only says so. */
export const MIGRATE = command({
  words: 'migrate',
  help: 'apply pending database migrations',
  async run(_ctx, _args, _options, print) {
    print({ migrated: true }, 'Database is up to date.');
    return 0;
  },
});

export const PURGE = command({
  words: 'purge',
  help: 'delete expired codes, tokens, sessions, consents and audit events',
  async run(ctx, _args, _options, print) {
    const counts = await purge(ctx);
    if (counts === null) {
      print({ skipped: 'another instance is purging right now' }, 'Another instance is purging right now; nothing to do.');
      return 0;
    }
    print(
      counts,
      Object.entries(counts)
        .map(([table, n]) => `${table}: ${n} deleted`)
        .join('\n'),
    );
    return 0;
  },
});
