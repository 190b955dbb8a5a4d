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
 * Whether text from outside — a string, or JSON parsed from one (a WebAuthn response, a
 * registration, a fetched metadata document), keys included — holds NUL. NUL is valid UTF-8
 * but never part of anything Gatehouse reads, and PostgreSQL's text type cannot hold it (the
 * driver throws: a 500) while SQLite stores it: whatever holds one is refused where it enters,
 * so that both backends give the same 4xx and no lookup or write ever sees it. Query strings
 * and form fields are checked by the readers below, path parameters by app.ts, JSON where it
 * is parsed; the claims of others' JWTs are looked up only once their shape is checked
 * (oauth/assertions: `isClientId`, `isLookupSafe`, `userOfSubject`). Iterative: a deeply
 * nested document cannot exhaust the stack.
 */
export function holdsNul(value: unknown): boolean {
  const pending = [value];
  while (pending.length > 0) {
    const item = pending.pop();
    if (typeof item === 'string') {
      if (item.includes('\0')) return true;
    } else if (typeof item === 'object' && item !== null) {
      for (const [key, member] of Object.entries(item)) {
        if (key.includes('\0')) return true;
        pending.push(member);
      }
    }
  }
  return false;
}

/** U+FFFD stands where the request had bytes that are not UTF-8 (see parseForm); NUL: see holdsNul. */
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

/** A parameter that may be repeated (RFC 8707 `resource`, RFC 8693 `audience`), each value checked like any other; empty is absent. */
export function repeatable(raw: RawParams, name: string): string | string[] | undefined {
  const value = raw[name];
  if (value === undefined || value === '') return undefined;
  return Array.isArray(value) ? value.map((each) => checkEncoding(name, each)) : checkEncoding(name, value);
}

/** One optional parameter, rejecting repeats. */
export function single(raw: RawParams, name: string): string | undefined {
  const value = raw[name];
  if (Array.isArray(value)) throw invalidRequest(`the "${name}" parameter is repeated`);
  return value === '' || value === undefined ? undefined : checkEncoding(name, value);
}
