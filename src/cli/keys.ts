/** `gatehouse keys …`: list, rotate and revoke the signing keys (SPEC §2, §4.9). Kid, algorithm, state and dates only: never private material. */
import { COMMAND_LINE } from '../audit.ts';
import { listKeys, revokeKey, rotateKeys, type KeyView } from '../identity/key-schedule.ts';
import { command, noArguments, oneArgument, type Command } from './command.ts';

const iso = (at: number | null) => (at === null ? null : new Date(at).toISOString());

/** The `--json` form: `{"kid","alg","state","created_at","activates_at","retires_at"}`, times ISO 8601. */
const json = (key: KeyView) => ({
  kid: key.kid,
  alg: key.alg,
  state: key.state,
  created_at: iso(key.createdAt),
  activates_at: iso(key.activatesAt),
  retires_at: iso(key.retiresAt),
});

const text = (keys: readonly KeyView[]) =>
  keys
    .map((key) => {
      const when =
        key.state === 'next'
          ? `signs from ${iso(key.activatesAt)}`
          : key.state === 'active'
            ? `signing since ${iso(key.activatesAt)}`
            : `removed at ${iso(key.retiresAt)}`;
      return `${key.kid}\t${key.alg}\t${key.state}\t${when}`;
    })
    .join('\n');

const list = command({
  words: 'keys list',
  help: 'the signing keys: kid, algorithm, state (next, active, retiring) and dates',
  async run(ctx, args, _options, print) {
    noArguments(args);
    const keys = await listKeys(ctx);
    print(keys.map(json), text(keys));
    return 0;
  },
});

const rotate = command({
  words: 'keys rotate',
  usage: '[--now]',
  help: [
    'publish a new key per algorithm, signing after the publication lead (1 hour)',
    '--now: the new keys sign at once (after a suspected compromise, with keys revoke)',
  ],
  options: { now: { type: 'boolean', help: 'the new keys sign at once, not after the hour of publication' } },
  async run(ctx, args, options, print) {
    noArguments(args);
    const keys = await rotateKeys(ctx, { now: options.now === true }, COMMAND_LINE);
    print(
      keys.map(json),
      `${options.now ? 'New keys are signing from now on.' : 'New keys are published and sign after the publication lead.'}\n${text(keys)}`,
    );
    return 0;
  },
});

const revoke: Command = command({
  words: 'keys revoke',
  usage: '[--] <kid>',
  help: 'withdraw a key from the JWKS at once; everything it signed stops verifying (a kid may begin with "-": put -- before it)',
  async run(ctx, args, _options, print) {
    const kid = oneArgument(revoke, args);
    const key = await revokeKey(ctx, kid, COMMAND_LINE);
    print(
      { ...json(key), revoked: true },
      `Revoked ${key.alg} key ${key.kid}.${key.state === 'active' ? ` A new ${key.alg} key is signing from now on.` : ''}`,
    );
    return 0;
  },
});

export const KEYS_COMMANDS: readonly Command[] = [list, rotate, revoke];
