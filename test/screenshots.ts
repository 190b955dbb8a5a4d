/**
 * `npm run screenshots`: saves a picture of every page people use into docs/screenshots/,
 * for the README. Drives Debian's Chromium (/usr/bin/chromium) through a throw-away server
 * with made-up data, its clock set to a fixed date; rerun it whenever a page changes.
 */
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { BrowserContext, Page } from 'playwright-core';
import { createConnection } from '../src/accounts/connections/connections.ts';
import { firstRunSetupLink } from '../src/accounts/setup.ts';
import { COMMAND_LINE } from '../src/audit.ts';
import { registerResource } from '../src/clients/resources.ts';
import { createIssuer } from '../src/oauth/assertions/issuers.ts';
import { insertIdentity } from '../src/store/connections.ts';
import { sqlite } from './support/backends.ts';
import { deviceApp, requestCodes } from './support/device.ts';
import { launchBrowser, logIn, startClientSite } from './support/browser.ts';
import { authorizationUrl, discover, obtainTokens } from './support/oauth-client.ts';
import { totpCode } from './support/second-factors.ts';
import { PASSWORD, startServer } from './support/server.ts';
import { UserAgent } from './support/user-agent.ts';
import { addVirtualAuthenticator, withoutAutofill } from './support/webauthn.ts';

const folder = fileURLToPath(new URL('../docs/screenshots/', import.meta.url));
mkdirSync(folder, { recursive: true });

const [server, site, browser] = await Promise.all([startServer(sqlite, { DYNAMIC_CLIENT_REGISTRATION: 'true' }), startClientSite(), launchBrowser()]);
const clockOffset = Date.parse('2026-11-22T09:30:00Z') - Date.now();
server.advance(clockOffset / 1000);
const at = (path: string) => new URL(path, server.url).href;
const contexts: BrowserContext[] = [];

async function browse(size: { width: number; height: number } = { width: 1000, height: 700 }): Promise<Page> {
  const context = await browser.browser.newContext({ viewport: size });
  contexts.push(context);
  return context.newPage();
}

async function shoot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: `${folder}${name}.png`, fullPage: true });
  console.log(`docs/screenshots/${name}.png`);
}

/** The page at a desktop's width and a phone's: `<name>-1280.png` and `<name>-390.png`. */
async function shootWidths(page: Page, name: string): Promise<void> {
  for (const width of [1280, 390]) {
    await page.setViewportSize({ width, height: 760 });
    await shoot(page, `${name}-${width}`);
  }
  await page.setViewportSize({ width: 1000, height: 700 });
}

try {
  // First start: no administrator yet.
  const setup = await browse();
  await setup.goto((await firstRunSetupLink(server.app.gatehouse))!);
  await shoot(setup, 'setup');
  await setup.getByLabel('Username').fill('admin');
  await setup.getByLabel('Email').fill('admin@example.com');
  await setup.getByLabel('Password', { exact: true }).fill(PASSWORD);
  await setup.getByLabel('Repeat the password').fill(PASSWORD);
  await setup.getByRole('button', { name: 'Create administrator' }).click();
  await setup.getByRole('heading', { name: 'OAuth clients' }).waitFor();
  const admin = setup;

  // Registering a client, with a mistake first.
  await admin.getByRole('link', { name: 'Register a new OAuth client' }).click();
  await admin.getByLabel('Name', { exact: true }).fill('Annotator');
  await admin.getByLabel('Redirect URL').fill('http://annotator.example.com/oauth/callback');
  await admin.getByLabel('Confidential').check();
  await admin.getByRole('button', { name: 'Register client' }).click();
  await admin.getByRole('alert').waitFor();
  await shoot(admin, 'admin-client-form');
  await admin.getByLabel('Redirect URL').fill(site.redirectUri);
  await admin.getByRole('button', { name: 'Register client' }).click();
  await admin.getByRole('heading', { name: 'Client registered' }).waitFor();
  await shoot(admin, 'admin-client-registered');
  const clientId = (await admin.locator('#client-id').textContent())!;
  const secret = (await admin.locator('#client-secret').textContent())!;

  const { client: spa } = await server.createClient({ name: 'Notes (single-page app)', redirectUris: [site.redirectUri], requirePkce: true });
  await server.createClient({ name: 'Nightly export', grantType: 'client_credentials', redirectUris: [], confidential: true, scope: 'annotation:read' });
  await admin.goto(at('/admin/oauthclients'));
  await shoot(admin, 'admin-clients');
  await admin.goto(at(`/admin/oauthclients/${clientId}`));
  await shoot(admin, 'admin-client-edit');
  await admin.goto(at(`/admin/oauthclients/${clientId}/delete`));
  await shoot(admin, 'admin-client-delete');

  for (const name of ['alice', 'bob', 'carol']) await server.createUser(name);
  await admin.goto(at('/admin/users'));
  await shoot(admin, 'admin-users');

  // A user authorizing the client: login, then consent.
  const app = await discover(server, clientId, { secret, redirectUri: site.redirectUri });
  const user = await browse();
  await user.goto((await authorizationUrl(app)).url.href);
  await shoot(user, 'login');
  await logIn(user, 'alice');
  await user.getByRole('button', { name: 'Authorize' }).waitFor();
  await shoot(user, 'consent');
  await user.getByRole('button', { name: 'Authorize' }).click();
  await user.getByText('Back at the application.').waitFor();
  await obtainTokens(await discover(server, spa.id, { redirectUri: site.redirectUri }), new UserAgent(server.url), 'alice', { scope: 'annotation:read' });
  await user.goto(at('/account/applications'));
  await shoot(user, 'account-applications');
  await user.goto(at('/admin/oauthclients'));
  await shoot(user, 'forbidden');

  // The popup flow, and a phone.
  const opener = await browse();
  await opener.goto(
    site.popupOpener((await authorizationUrl(await discover(server, spa.id, { redirectUri: site.redirectUri }), { response_mode: 'web_message' })).url),
  );
  const [popup] = await Promise.all([opener.waitForEvent('popup'), opener.getByRole('button', { name: 'Sign in with Gatehouse' }).click()]);
  await popup.setViewportSize({ width: 480, height: 560 });
  await popup.getByRole('button', { name: 'Log in', exact: true }).waitFor();
  await shoot(popup, 'login-popup');
  const phone = await browse({ width: 390, height: 760 });
  await phone.goto((await authorizationUrl(app, { prompt: 'consent' })).url.href);
  await logIn(phone, 'bob');
  await phone.getByRole('button', { name: 'Authorize' }).waitFor();
  await shoot(phone, 'consent-phone');

  // Pages at both widths: the admin lists (as cards on a phone), the applications page, the device page.
  await fetch(at('/oauth/register'), {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ client_name: 'MCP Inspector', redirect_uris: ['http://127.0.0.1:6274/oauth/callback'], token_endpoint_auth_method: 'none' }),
  });
  await registerResource(
    server.app.gatehouse,
    { uri: 'https://files.example.com/mcp', name: 'Files', scopes: [{ name: 'files:read', description: 'Read your files' }] },
    COMMAND_LINE,
  );
  const { client: sync } = await server.createClient({ name: 'Files sync', redirectUris: [site.redirectUri], scope: 'annotation:read files:read' });
  const syncApp = await discover(server, sync.id, { redirectUri: site.redirectUri });
  await obtainTokens(syncApp, new UserAgent(server.url), 'alice', { scope: 'annotation:read' });
  await obtainTokens(syncApp, new UserAgent(server.url), 'alice', { resource: 'https://files.example.com/mcp' });
  await createIssuer(
    server.app.gatehouse,
    { issuer: 'https://example.okta.com/oauth2/default', profile: 'id-jag', subjectClaim: 'email', clients: [sync.id], scope: 'files:read' },
    COMMAND_LINE,
  );
  // Connections to upstream identity providers: one added with the form, two more, and an identity of Alice's.
  await admin.goto(at('/admin/connections/new'));
  await admin.getByLabel('Name', { exact: true }).fill('Example Corp SSO');
  await admin.getByLabel('Provider', { exact: true }).selectOption({ label: 'Other OpenID Connect provider' });
  await admin.getByLabel('Issuer URL (other OpenID Connect provider)').fill('https://example.okta.com');
  await admin.getByLabel('Client ID').fill('0oa1b2c3d4e5f6g7h8i9');
  await admin.getByLabel('Client secret').fill('provider-secret');
  await admin.getByLabel('Email domains (optional)').fill('example.com');
  await admin.getByRole('button', { name: 'Add connection' }).click();
  await admin.getByRole('heading', { name: 'Connection added' }).waitFor();
  await shoot(admin, 'admin-connection-added');
  await createConnection(server.app.gatehouse, { name: 'GitHub', preset: 'github', clientId: 'Iv1.8a61f9b3a7aba766', clientSecret: 's' }, COMMAND_LINE);
  await createConnection(server.app.gatehouse, { name: 'ORCID', preset: 'orcid', clientId: 'APP-1234567890ABCDEF', clientSecret: 's' }, COMMAND_LINE);
  const aliceId = (await server.store.db.selectFrom('users').select('id').where('username', '=', 'alice').executeTakeFirstOrThrow()).id;
  await insertIdentity(server.store.db, {
    connectionId: 'github',
    subject: '583231',
    userId: aliceId,
    email: 'alice@users.noreply.github.com',
    now: Date.now() + clockOffset,
  });
  await admin.goto(at('/admin/connections/github/edit'));
  await shoot(admin, 'admin-connection-edit');
  for (const [path, name] of [
    ['/admin/connections', 'admin-connections'],
    ['/admin/oauthclients', 'admin-clients'],
    ['/admin/resources', 'admin-resources'],
    ['/admin/users', 'admin-users'],
    ['/admin/keys', 'admin-keys'],
    ['/admin/issuers', 'admin-issuers'],
    ['/admin/audit', 'admin-audit'],
  ]) {
    await admin.goto(at(path!));
    await shootWidths(admin, name!);
  }
  await user.goto(at('/account/applications'));
  await shootWidths(user, 'account-applications');
  // The login page with connections, and Alice's connected identities (after a fresh login: the buttons show).
  const visitor = await browse();
  await visitor.goto(at('/login?next=%2Faccount%2Fsecurity'));
  await shootWidths(visitor, 'login-connections');
  await logIn(visitor, 'alice');
  await visitor.getByRole('heading', { name: 'Connected identities' }).waitFor();
  await shootWidths(visitor, 'account-security-connections');
  const codes = await requestCodes(await deviceApp(server));
  await user.goto(codes.verification_uri_complete!);
  await user.getByRole('button', { name: 'Continue' }).click();
  await user.getByRole('button', { name: 'Authorize' }).waitFor();
  await shootWidths(user, 'device-consent');

  // Passkeys: a server on localhost (browsers refuse passkeys on an IP address), a virtual authenticator.
  const passkeyServer = await startServer(sqlite, {}, 'localhost');
  try {
    passkeyServer.advance((Date.parse('2026-11-22T09:30:00Z') - Date.now()) / 1000);
    await passkeyServer.createUser('alice');
    const context = await withoutAutofill(browser);
    contexts.push(context);
    const person = await context.newPage();
    await addVirtualAuthenticator(person);
    await person.goto(new URL('/login?next=%2Faccount%2Fsecurity', passkeyServer.url).href);
    await person.getByRole('button', { name: 'Log in with a passkey' }).waitFor();
    await shootWidths(person, 'login-passkey');
    await logIn(person, 'alice');
    await person.getByLabel('Passkey name').fill('Work laptop');
    await person.getByRole('button', { name: 'Add a passkey' }).click();
    await person.getByRole('status').getByText('Passkey added.').waitFor();
    // With a passkey, changes need a login with it: log out, and back in with the passkey.
    await person.getByRole('button', { name: 'Log out' }).click();
    await person.getByRole('button', { name: 'Log in with a passkey' }).click();
    await person.waitForURL((url) => url.pathname === '/');
    await person.goto(new URL('/account/security', passkeyServer.url).href);
    await shootWidths(person, 'account-security');
  } finally {
    await passkeyServer.close();
  }

  // Second factors: an authenticator app set up at /account/security, then the second step of a login.
  await server.createUser('dana');
  const dana = await browse();
  await dana.goto(at('/login?next=%2Faccount%2Fsecurity'));
  await logIn(dana, 'dana');
  await dana.getByRole('button', { name: 'Set up an authenticator app' }).click();
  await dana.getByLabel('Code from the app').waitFor();
  await shootWidths(dana, 'app-setup');
  const totpSecret = (await dana.locator('#totp-secret').textContent())!.replace(/\s/g, '');
  await dana.getByLabel('Code from the app').fill(totpCode(totpSecret, Date.now() + clockOffset));
  await dana.getByRole('button', { name: 'Confirm' }).click();
  await dana.getByRole('button', { name: 'Generate recovery codes' }).click();
  await dana.getByRole('link', { name: /back to your security page/ }).click();
  await shootWidths(dana, 'account-security-app');
  await dana.getByRole('button', { name: 'Log out' }).click();
  await logIn(dana, 'dana');
  await dana.getByLabel('Code', { exact: true }).waitFor();
  await shootWidths(dana, 'second-factor');
} finally {
  await Promise.all(contexts.map((context) => context.close()));
  await browser.close();
  await site.close();
  await server.close();
}
