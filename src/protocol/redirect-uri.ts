/**
 * Redirect URLs: what may be registered, and whether a request's `redirect_uri` is one of
 * the registered ones. Matching is exact, except that a registered `http://localhost`,
 * `http://127.0.0.1` or `http://[::1]` URL matches any port (RFC 8252 §7.3, native apps on
 * ephemeral ports; Claude Code and VS Code register localhost). A public client may also
 * register a private-use URI scheme (RFC 8252 §7.1: Cursor's `cursor://…`), matched exactly.
 */

const LOOPBACK_HOSTS = new Set(['127.0.0.1', '[::1]', 'localhost']);

/** Whether the URL sends the person back to their own computer: a native app on loopback, or one an operating system hands a private-use scheme to. */
export function redirectsToThisDevice(uri: string): boolean {
  return URL.canParse(uri) && (LOOPBACK_HOSTS.has(new URL(uri).hostname) || isPrivateUseRedirect(uri));
}

/** Schemes that run or read something where they are opened, or are no application's at all: never a redirect URL. */
const FORBIDDEN_SCHEMES = new Set(['javascript:', 'data:', 'file:', 'vbscript:', 'blob:', 'about:', 'ws:', 'wss:', 'ftp:', 'mailto:', 'tel:', 'sms:']);

/** Whether the URL is a private-use URI scheme's (RFC 8252 §7.1): an application on the person's device, not a web origin. */
export function isPrivateUseRedirect(uri: string): boolean {
  if (!URL.canParse(uri)) return false;
  const { protocol } = new URL(uri);
  return protocol !== 'http:' && protocol !== 'https:';
}

/** A list of URLs stored as a JSON array (store/schema.ts). */
function urlList(json: string): string[] {
  const parsed: unknown = JSON.parse(json);
  return Array.isArray(parsed) ? parsed.filter((uri): uri is string => typeof uri === 'string') : [];
}

/** A client's redirect URLs. */
export function redirectUrisOf(client: { redirect_uris: string }): string[] {
  return urlList(client.redirect_uris);
}

/** Where RP-initiated logout may send the person back to (SPEC §4.10): matched exactly, a loopback port included. */
export function postLogoutRedirectUrisOf(client: { post_logout_redirect_uris: string }): string[] {
  return urlList(client.post_logout_redirect_uris);
}

/**
 * Why `value` cannot be registered as a redirect URL, or null when it can. `publicClient`: a
 * client without a secret or keys, which may use a private-use scheme with a `//` authority
 * (RFC 8252 §7.1) — never one of FORBIDDEN_SCHEMES.
 */
export function redirectUriProblem(value: string, { publicClient }: { publicClient: boolean }): string | null {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return 'must be an absolute URL';
  }
  if (value.includes('#')) return 'must not contain a fragment';
  if (url.username || url.password) return 'must not contain a user name or password';
  if (url.protocol === 'https:') return null;
  if (url.protocol === 'http:') return LOOPBACK_HOSTS.has(url.hostname) ? null : 'must use https (http is allowed only for loopback hosts)';
  const privateUse = publicClient && !FORBIDDEN_SCHEMES.has(url.protocol) && value.startsWith(`${url.protocol}//`) && url.host !== '';
  return privateUse ? null : 'must use https (or http for loopback hosts, or a private-use scheme such as app://host/path for a public client)';
}

export function redirectUriMatches(registered: string, requested: string): boolean {
  if (registered === requested) return true;
  if (!URL.canParse(registered) || !URL.canParse(requested)) return false;
  const allowed = new URL(registered);
  if (allowed.protocol !== 'http:' || !LOOPBACK_HOSTS.has(allowed.hostname)) return false;
  // The registered URL with the requested port put in must then match to the letter.
  allowed.port = new URL(requested).port;
  return allowed.href === requested;
}

export function originOf(uri: string): string {
  return new URL(uri).origin;
}

/**
 * The origin a consent to a client no administrator checked is remembered for (SPEC §4.1):
 * the redirect URL's origin, but for a loopback redirect its scheme and host without the
 * port. A native app listens on a new port each run (RFC 8252 §7.3) and any port of a
 * registered loopback URL matches, so the port tells the person nothing: the consent page
 * says "this computer" whatever it is.
 */
export function consentOrigin(uri: string): string {
  const url = new URL(uri);
  // A private-use scheme's URL has no web origin ('null'): its scheme and host say which application.
  return redirectsToThisDevice(uri) ? `${url.protocol}//${url.hostname}` : url.origin;
}

/**
 * Everywhere a client's redirect URLs may send the person (SPEC §4.1): whether one leads to
 * their own computer, and the other hosts, each once, in the client's order.
 */
export function redirectDestinations(uris: readonly string[]): { thisComputer: boolean; hosts: string[] } {
  const remote = uris.filter((uri) => !redirectsToThisDevice(uri)).map((uri) => new URL(uri).host);
  return { thisComputer: remote.length < uris.length, hosts: [...new Set(remote)] };
}
