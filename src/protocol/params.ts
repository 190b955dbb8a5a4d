/**
 * Reading protocol parameters. A repeated parameter is an error, never "first wins"
 * (RFC 6749 §3.1, §3.2), and a parameter sent with an empty value counts as omitted.
 */
import { invalidRequest } from './errors.ts';

/** A parsed query string or form body: repeated names become arrays. */
export type RawParams = Readonly<Record<string, string | string[] | undefined>>;

/**
 * The one parser for query strings and `application/x-www-form-urlencoded` bodies (the
 * server's, and the login page's reading of a pending authorization request). Repeated
 * names become arrays, so the readers below can refuse them instead of silently picking
 * one. Bytes that are not valid UTF-8 (raw or percent-encoded) decode to U+FFFD.
 */
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

/**
 * U+FFFD stands where the request had bytes that are not UTF-8 (see parseForm). NUL is valid
 * UTF-8 but never part of a parameter, and PostgreSQL refuses it in text: refused here, it
 * cannot turn a search or a lookup into a server error.
 */
function checkEncoding(name: string, value: string): string {
  if (value.includes('\uFFFD')) throw invalidRequest(`the "${name}" parameter is not valid UTF-8`);
  if (value.includes('\0')) throw invalidRequest(`the "${name}" parameter contains a NUL character`);
  return value;
}

/**
 * Picks the named parameters, rejecting repeats, and reports every missing required one in
 * one message.
 */
export function readParams<R extends string, O extends string>(
  raw: RawParams,
  required: readonly R[],
  optional: readonly O[],
): Record<R, string> & Partial<Record<O, string>> {
  const result: Record<string, string> = {};
  const missing: string[] = [];
  for (const name of [...required, ...optional]) {
    const value = raw[name];
    if (Array.isArray(value)) throw invalidRequest(`the "${name}" parameter is repeated`);
    if (value === undefined || value === '') {
      if ((required as readonly string[]).includes(name)) missing.push(name);
      continue;
    }
    result[name] = checkEncoding(name, value);
  }
  if (missing.length === 1) throw invalidRequest(`the "${missing[0]}" parameter is missing`);
  if (missing.length > 1) throw invalidRequest(`these parameters are missing: ${missing.map((m) => `"${m}"`).join(', ')}`);
  return result as Record<R, string> & Partial<Record<O, string>>;
}

/** One optional parameter, rejecting repeats. */
export function single(raw: RawParams, name: string): string | undefined {
  const value = raw[name];
  if (Array.isArray(value)) throw invalidRequest(`the "${name}" parameter is repeated`);
  return value === '' || value === undefined ? undefined : checkEncoding(name, value);
}
