/**
 * A real browser for the page suites: Debian's Chromium (`apt-get install -y chromium`)
 * driven by playwright-core. A browser is never downloaded. When /usr/bin/chromium is
 * missing, test/run.ts says so loudly and fails under CI; the suites then skip with the
 * reason shown.
 *
 * Also here: the application on another origin that the browser tests authorize — a tiny
 * HTTP server with a redirect URL (`/callback`) and a page that opens the popup flow.
 */
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import { chromium, type Browser, type BrowserContext, type BrowserContextOptions, type Locator, type Page } from 'playwright-core';
import { PASSWORD } from './server.ts';

export const CHROMIUM = '/usr/bin/chromium';

/** `describe` options that skip, with the reason shown, when Chromium is missing. */
export function browserOptions(): { skip?: string } {
  const missing = process.env.GATEHOUSE_TEST_CHROMIUM_MISSING;
  return missing ? { skip: `browser unavailable: ${missing}` } : {};
}

export interface TestBrowser {
  browser: Browser;
  /**
   * A fresh context: its own cookies, like a different person's browser. `options` add to or
   * replace the defaults (a 1000×800 viewport): a phone's viewport, say, or
   * `ignoreHTTPSErrors` for a context that visits the upstream providers' https pages, whose
   * certificates come from the test CA, which Chromium does not trust.
   */
  newContext(options?: BrowserContextOptions): Promise<BrowserContext>;
  close(): Promise<void>;
}

export async function launchBrowser(): Promise<TestBrowser> {
  // launch() gives every browser a fresh, throw-away --user-data-dir of its own (Playwright
  // refuses one passed in args), so no state carries over between suites.
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  return {
    browser,
    newContext: (options = {}) => browser.newContext({ viewport: { width: 1000, height: 800 }, ...options }),
    close: () => browser.close(),
  };
}

/** Fills in the login form shown on `page` and submits it. */
export async function logIn(page: Page, username: string, password = PASSWORD): Promise<void> {
  await page.getByLabel('Username or email').fill(username);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Log in', exact: true }).click();
}

/** Clicks a link or a GET form's button and waits until the page it leads to has loaded (a click returns when the navigation starts). */
export async function follow(page: Page, target: Locator): Promise<void> {
  const from = page.url();
  await target.click();
  await page.waitForURL((at) => at.href !== from);
}

export interface ClientSite {
  /** `http://127.0.0.1:<port>`: a different origin from Gatehouse (another port). */
  origin: string;
  /** Its redirect URL, `<origin>/callback`. */
  redirectUri: string;
  /** The query strings `/callback` received, or the forms POSTed to it (`response_mode=form_post`), newest last. */
  callbacks: URLSearchParams[];
  /** A page that opens `authorizeUrl` in a popup when its button is clicked and keeps every message it receives. */
  popupOpener(authorizeUrl: string | URL): string;
  close(): Promise<void>;
}

/** A page or script the site serves as it is, at its path. */
export interface SiteFile {
  type: string;
  body: string | Buffer;
}

/**
 * The application's own site. Its opener page records each `message` event with its origin
 * in `window.received`, as a single-page client listening for the popup's answer would.
 * `files` adds pages of the suite's own (a single-page application, say), by path.
 */
export async function startClientSite(files: Record<string, SiteFile> = {}): Promise<ClientSite> {
  const callbacks: URLSearchParams[] = [];
  const server: Server = createServer((request, response) => {
    const url = new URL(request.url ?? '/', 'http://localhost');
    const file = files[url.pathname];
    if (file) {
      response.writeHead(200, { 'content-type': file.type, 'cache-control': 'no-store' }).end(file.body);
      return;
    }
    if (url.pathname === '/callback') {
      const answer = (params: URLSearchParams) => {
        callbacks.push(params);
        response
          .writeHead(200, { 'content-type': 'text/html; charset=utf-8' })
          .end('<!doctype html><title>Callback</title><p id="done">Back at the application.</p>');
      };
      if (request.method !== 'POST') return answer(url.searchParams);
      let body = '';
      request.setEncoding('utf8').on('data', (chunk: string) => (body += chunk));
      request.on('end', () => answer(new URLSearchParams(body)));
      return;
    }
    if (url.pathname === '/popup') {
      const target = JSON.stringify(url.searchParams.get('authorize') ?? '');
      response.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(`<!doctype html>
<title>Client application</title>
<button id="sign-in">Sign in with Gatehouse</button>
<script>
  window.received = [];
  window.addEventListener('message', function (event) { window.received.push({ origin: event.origin, data: event.data }); });
  document.getElementById('sign-in').addEventListener('click', function () {
    window.open(${target}, 'gatehouse', 'popup,width=480,height=640');
  });
</script>`);
      return;
    }
    response.writeHead(404).end();
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  const origin = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  return {
    origin,
    redirectUri: `${origin}/callback`,
    callbacks,
    popupOpener: (authorizeUrl) => `${origin}/popup?${new URLSearchParams({ authorize: String(authorizeUrl) })}`,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/**
 * A fresh browser context (its own cookies, as another person's browser) on `url`, logged in
 * as `username` when Gatehouse asks. Closing the browser closes it.
 */
export async function openAs(browser: TestBrowser, url: string, username: string): Promise<Page> {
  const page = await (await browser.newContext()).newPage();
  await page.goto(url);
  if (new URL(page.url()).pathname === '/login') {
    await logIn(page, username);
    // The click returns once the login is posted; the page asked for may still be arriving.
    await page.waitForURL((at) => at.pathname !== '/login');
  }
  return page;
}
