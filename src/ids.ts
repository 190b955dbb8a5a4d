/**
 * Identifiers that are keys, not secrets. A grant's id is never accepted from outside (a
 * client names a grant only through one of its tokens, whose hashes are the secrets), so it
 * may be predictable; what matters is where it lands in the B-trees keyed by it.
 */
import { drawRandomBytes } from './tokens.ts';

/**
 * A UUIDv7 (RFC 9562 §5.7): the 48-bit Unix time in milliseconds, then the version (7),
 * 12 random bits, the variant (10) and 62 random bits. Ids made later sort later, so
 * inserting one writes the rightmost leaf of the grants' primary key and of every index
 * that leads with a grant id (tokens, codes) — the page the previous insert wrote —
 * instead of a random leaf of each. 74 random bits keep ids made in the same millisecond,
 * by any number of instances, apart.
 */
export function timeOrderedUuid(now: number): string {
  const bytes = drawRandomBytes(16);
  bytes.writeUIntBE(now, 0, 6);
  bytes[6] = (bytes[6]! & 0x0f) | 0x70;
  bytes[8] = (bytes[8]! & 0x3f) | 0x80;
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
