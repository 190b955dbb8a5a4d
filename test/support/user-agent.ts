/**
 * A person at a browser, without the browser: keeps cookies, follows Gatehouse's own
 * redirects, and fills in the login and consent forms as they are served. The flow tests
 * use it for the user's part; the application's part is a real OAuth client library.
 */
import { PASSWORD } from './server.ts';

const ENTITIES: Record<string, string> = { '&amp;': '&', '&lt;': '<', '&gt;': '>', '&quot;': '"', '&#39;': "'" };
const unescape = (html: string) => html.replace(/&(amp|lt|gt|quot|#39);/g, (entity) => ENTITIES[entity]!);

/** The hidden and named inputs of the form posting to `action`, as the browser would send them. */
export function formFields(html: string, action: string): URLSearchParams {
  const form = new RegExp(`<form[^>]*action="${action}"[^>]*>([\\s\\S]*?)</form>`).exec(html);
  if (!form) throw new Error(`no form posting to ${action} in the page`);
  const fields = new URLSearchParams();
  for (const input of form[1]!.matchAll(/<input[^>]*type="hidden"[^>]*name="([^"]*)"[^>]*value="([^"]*)"/g)) {
    fields.append(unescape(input[1]!), unescape(input[2]!));
  }
  return fields;
}

/** The `data-*` attributes of the element with this id, decoded as the page's script reads them from `dataset`. */
export function dataAttributes(html: string, id: string): Record<string, string> {
  const element = new RegExp(`<[a-z]+[^>]*\\bid="${id}"[^>]*>`).exec(html);
  if (!element) throw new Error(`no element with id "${id}" in the page`);
  return Object.fromEntries([...element[0].matchAll(/\bdata-([a-z-]+)="([^"]*)"/g)].map((m) => [m[1]!, unescape(m[2]!)]));
}

export interface Outcome {
  /** The final response, when the flow ended on a Gatehouse page. */
  response: Response;
  /** Where Gatehouse sent the browser outside itself (the client's redirect URL), if anywhere. */
  redirect: URL | null;
  html: string;
}

export class UserAgent {
  readonly base: string;
  readonly cookies = new Map<string, string>();

  constructor(base: string) {
    this.base = base;
  }

  async fetch(path: string, init: RequestInit = {}): Promise<Response> {
    const headers = new Headers(init.headers);
    if (this.cookies.size > 0) headers.set('cookie', [...this.cookies].map(([k, v]) => `${k}=${v}`).join('; '));
    const response = await fetch(new URL(path, this.base), { ...init, headers, redirect: 'manual' });
    for (const cookie of response.headers.getSetCookie()) {
      const [pair] = cookie.split(';');
      const [name, value] = pair!.split('=');
      if (/expires=Thu, 01 Jan 1970/i.test(cookie) || value === '') this.cookies.delete(name!);
      else this.cookies.set(name!, value!);
    }
    return response;
  }

  /** Follows redirects while they stay on Gatehouse. */
  async visit(path: string, init: RequestInit = {}): Promise<Outcome> {
    let response = await this.fetch(path, init);
    for (let hops = 0; response.status >= 300 && response.status < 400; hops++) {
      const location = new URL(response.headers.get('location')!, this.base);
      if (location.origin !== new URL(this.base).origin) return { response, redirect: location, html: '' };
      if (hops > 10) throw new Error('redirect loop');
      response = await this.fetch(location.pathname + location.search);
    }
    return { response, redirect: null, html: await response.text() };
  }

  async submit(html: string, action: string, extra: Record<string, string> = {}): Promise<Outcome> {
    const fields = formFields(html, action);
    for (const [name, value] of Object.entries(extra)) fields.set(name, value);
    return this.visit(action, { method: 'POST', body: fields });
  }

  async login(username: string, password = PASSWORD): Promise<Outcome> {
    const page = await this.visit('/login');
    return this.submit(page.html, '/login', { username, password });
  }

  /**
   * Opens an authorization URL as the user would: logs in if asked, then answers the
   * consent page with `decision` if one is shown.
   */
  async authorize(url: string | URL, options: { username?: string; password?: string; decision?: 'approve' | 'deny' } = {}): Promise<Outcome> {
    const target = new URL(url, this.base);
    let outcome = await this.visit(target.pathname + target.search);
    if (outcome.redirect === null && outcome.html.includes('action="/login"')) {
      outcome = await this.submit(outcome.html, '/login', { username: options.username ?? 'alice', password: options.password ?? PASSWORD });
    }
    if (outcome.redirect === null && outcome.html.includes('action="/oauth/authorize"')) {
      outcome = await this.submit(outcome.html, '/oauth/authorize', { decision: options.decision ?? 'approve' });
    }
    return outcome;
  }
}
