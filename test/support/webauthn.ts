/**
 * A virtual WebAuthn authenticator in the test browser, through the DevTools protocol
 * (Chromium's `WebAuthn` domain): a platform authenticator (ctap2, internal) that keeps
 * discoverable credentials and verifies its user — or fails to, when told.
 */
import type { BrowserContext, CDPSession, Page } from 'playwright-core';
import type { User } from '../../src/store/schema.ts';
import type { TestBrowser } from './browser.ts';
import type { TestServer } from './server.ts';

export interface VirtualCredential {
  credentialId: string;
  isResidentCredential: boolean;
  rpId?: string;
  privateKey: string;
  userHandle?: string;
  signCount: number;
}

export interface VirtualAuthenticator {
  cdp: CDPSession;
  id: string;
  credentials(): Promise<VirtualCredential[]>;
  /** Puts a credential in (say, one taken from it, with a lower sign count). */
  addCredential(credential: VirtualCredential): Promise<void>;
  removeCredential(credentialId: string): Promise<void>;
  setUserVerified(verified: boolean): Promise<void>;
}

export async function addVirtualAuthenticator(page: Page, options: { isUserVerified?: boolean } = {}): Promise<VirtualAuthenticator> {
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('WebAuthn.enable', { enableUI: false });
  const { authenticatorId: id } = await cdp.send('WebAuthn.addVirtualAuthenticator', {
    options: {
      protocol: 'ctap2',
      transport: 'internal',
      hasResidentKey: true,
      hasUserVerification: true,
      isUserVerified: options.isUserVerified ?? true,
      automaticPresenceSimulation: true,
    },
  });
  return {
    cdp,
    id,
    credentials: async () => (await cdp.send('WebAuthn.getCredentials', { authenticatorId: id })).credentials as VirtualCredential[],
    addCredential: async (credential) => void (await cdp.send('WebAuthn.addCredential', { authenticatorId: id, credential })),
    removeCredential: async (credentialId) => void (await cdp.send('WebAuthn.removeCredential', { authenticatorId: id, credentialId })),
    setUserVerified: async (verified) => void (await cdp.send('WebAuthn.setUserVerified', { authenticatorId: id, isUserVerified: verified })),
  };
}

/**
 * A browser context whose browser offers no passkey autofill. Chromium's virtual
 * authenticator answers a conditional (autofill) request at once, with no one picking the
 * passkey: every login page would log in by itself. Without autofill, the page's script
 * waits for the button, as in a browser without conditional mediation.
 */
export async function withoutAutofill(browser: TestBrowser): Promise<BrowserContext> {
  const context = await browser.newContext();
  await context.addInitScript({ content: "Object.defineProperty(PublicKeyCredential, 'isConditionalMediationAvailable', { value: async () => false });" });
  return context;
}

/**
 * A new user with a passkey row as registration stores it, but no real key behind it: for
 * tests of what happens before any signature is checked (throttles, the second step offered).
 */
export async function userWithStoredPasskey(server: TestServer, username: string): Promise<{ user: User; credentialId: string }> {
  const user = await server.createUser(username);
  const credentialId = Buffer.from(`credential of ${username}`).toString('base64url');
  await server.store.db
    .insertInto('passkeys')
    .values({
      id: credentialId,
      user_id: user.id,
      public_key: Buffer.from('a key').toString('base64url'),
      sign_count: 0,
      transports: '[]',
      name: 'Key',
      created_at: Date.now(),
      last_used_at: null,
    })
    .execute();
  return { user, credentialId };
}
