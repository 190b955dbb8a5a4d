/**
 * The names of clients that no administrator registered (SPEC §4.8): a metadata document's
 * and a dynamic registration's `client_name`, which the login and consent pages show. Such
 * a name is the application's own claim, so it must read as what it is stored as, and must
 * not pass for the name of a client an administrator checked.
 */
import type { Kysely } from 'kysely';
import { registeredClientNames } from '../store/clients.ts';
import type { Database } from '../store/schema.ts';

/** The same bound as for clients an administrator registers (clients/clients.ts). */
export const MAX_NAME_LENGTH = 100;

/**
 * Characters a name must not hold: every `Other` (control, format — zero-width characters,
 * the soft hyphen, bidirectional controls —, surrogate, private-use and unassigned), the
 * line and paragraph separators, the default-ignorable code points (which fonts draw as
 * nothing: the Hangul fillers U+115F, U+1160, U+3164 and U+FFA0, variation selectors,
 * joiners), and the braille blank U+2800, which is drawn as nothing yet is none of these —
 * outside emoji sequences.
 */
const INVISIBLE = '[\\p{C}\\p{Zl}\\p{Zp}\\p{Default_Ignorable_Code_Point}\\u2800]';
/**
 * Emoji sequences (ZWJ sequences such as 👩‍💻, ❤️ with its variation selector, keycaps, tag
 * flags): each is drawn as one visible picture, so the joiners and selectors inside are not
 * hidden characters.
 */
const EMOJI = '\\p{RGI_Emoji}';

/** Made on first use: compiling these Unicode sets took 34 ms of every process's start-up. */
let patterns: { invisible: RegExp; invisibleAll: RegExp; emoji: RegExp } | undefined;
const compiled = () => (patterns ??= { invisible: new RegExp(INVISIBLE, 'u'), invisibleAll: new RegExp(INVISIBLE, 'gu'), emoji: new RegExp(EMOJI, 'gv') });

/**
 * The name as stored and shown — NFKC (full-width and other compatibility forms become the
 * characters they stand for), trimmed, runs of spaces of any kind one space — or why it is
 * refused. Empty is refused too: the caller decides whether a name may be absent. Users'
 * display names (accounts/users.ts) follow the same rules with their own bound.
 */
export function normalizeClientName(raw: string, maxLength = MAX_NAME_LENGTH): { name: string } | { problem: string } {
  const trimmed = raw.normalize('NFKC').trim();
  // Before the spaces are collapsed: line and paragraph separators count as spaces there.
  const { invisible, emoji } = compiled();
  if (invisible.test(trimmed.replace(emoji, ''))) return { problem: 'must not hold control, format or invisible characters' };
  const name = trimmed.replace(/\s+/gu, ' ');
  if (name === '' || name.length > maxLength) return { problem: `must be 1-${maxLength} characters` };
  return { name };
}

/**
 * What two names are compared by: NFKC, without invisible characters or extra spaces (an
 * administrator's own names are not restricted), case folded — upper then lower case, so
 * that `ß` meets `SS` and the dotless `ı` meets `I`.
 */
function comparable(name: string): string {
  return name.normalize('NFKC').replace(compiled().invisibleAll, '').replace(/\s+/gu, ' ').trim().toUpperCase().toLowerCase();
}

/**
 * Whether `name` reads as the name of a client an administrator registered. The names are
 * compared here, not in SQL: neither database normalises Unicode the same way, and
 * administrators register few clients.
 */
export async function isAdministratorsClientName(db: Kysely<Database>, name: string): Promise<boolean> {
  const wanted = comparable(name);
  return (await registeredClientNames(db)).some((registered) => comparable(registered) === wanted);
}
