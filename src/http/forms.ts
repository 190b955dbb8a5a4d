/**
 * One parser for query strings and `application/x-www-form-urlencoded` bodies. Repeated
 * names become arrays, so the protocol layer can refuse them instead of silently picking
 * one. Bytes that are not valid UTF-8 (raw or percent-encoded) decode to U+FFFD, which the
 * parameter readers refuse.
 */
import type { RawParams } from '../oauth/params.ts';

export function parseForm(text: string): RawParams {
  const result: Record<string, string | string[]> = Object.create(null);
  for (const [name, value] of new URLSearchParams(text)) {
    const existing = result[name];
    if (existing === undefined) result[name] = value;
    else if (Array.isArray(existing)) existing.push(value);
    else result[name] = [existing, value];
  }
  return result;
}
