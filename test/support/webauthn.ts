/**
 * A virtual WebAuthn authenticator in the test browser, through the DevTools protocol
 * (Chromium's `WebAuthn` domain): a platform authenticator (ctap2, internal) that keeps
 * discoverable credentials and verifies its user — or fails to, when told.
 */
import type { CDPSession, Page } from 'playwright-core';

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
