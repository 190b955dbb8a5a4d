/**
 * A `next` target we may redirect to after login: a same-origin relative path only.
 * Anything else (absolute URLs, `//host`, backslashes, control characters) falls back to `/`.
 */
export function safeNext(next: string | undefined, publicUrl: string): string {
  if (next === undefined || !next.startsWith('/') || next.startsWith('//') || /[\\\x00-\x1f]/.test(next)) return '/';
  const base = new URL(publicUrl);
  const url = new URL(next, base);
  const path = url.pathname + url.search;
  // Parsing collapses dot segments ("/.//evil.example" becomes "//evil.example"), so the
  // result is checked again: a path starting with "//" is a URL on another host.
  return url.origin === base.origin && !path.startsWith('//') ? path : '/';
}
