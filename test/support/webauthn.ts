/**
 * A virtual WebAuthn authenticator in the test browser, through the DevTools protocol
 * (Chromium's `WebAuthn` domain): a platform authenticator (ctap2, internal) that keeps
 * discoverable credentials and verifies its user — or fails to, when told. And one in
 * software, for tests over HTTP (softwareAuthenticator).
 */
import { createHash, generateKeyPairSync, randomBytes } from 'node:crypto';
import { isoCBOR } from '@simplewebauthn/server/helpers';
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

/**
 * An authenticator made in software, for tests over HTTP without a browser: answers the
 * registration options of `/account/security/passkeys/options` as a platform authenticator
 * that verified its user would (ES256, attestation `none`), in the JSON the browser library
 * posts. It makes passkeys; it does not log in with them.
 */
export function softwareAuthenticator(origin: string) {
  return {
    /** The answer to `options`, as the `response` field of the form; and the new credential's ID. */
    register(options: { challenge: string; rp: { id?: string } }): { response: string; credentialId: string } {
      const { publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
      const jwk = publicKey.export({ format: 'jwk' });
      const cose = isoCBOR.encode(
        new Map<number, number | Uint8Array>([
          [1, 2], // kty: EC2
          [3, -7], // alg: ES256
          [-1, 1], // crv: P-256
          [-2, Buffer.from(jwk.x!, 'base64url')],
          [-3, Buffer.from(jwk.y!, 'base64url')],
        ]),
      );
      const credentialId = randomBytes(16);
      const length = Buffer.alloc(2);
      length.writeUInt16BE(credentialId.length);
      const authData = Buffer.concat([
        createHash('sha256')
          .update(options.rp.id ?? new URL(origin).hostname)
          .digest(),
        Buffer.from([0x45]), // user present, user verified, attested credential data
        Buffer.alloc(4), // sign count 0
        Buffer.alloc(16), // AAGUID: none
        length,
        credentialId,
        cose,
      ]);
      const attestationObject = isoCBOR.encode(
        new Map<string, string | Map<string, string> | Uint8Array>([
          ['fmt', 'none'],
          ['attStmt', new Map<string, string>()],
          ['authData', authData],
        ]),
      );
      const clientData = { type: 'webauthn.create', challenge: options.challenge, origin, crossOrigin: false };
      const id = credentialId.toString('base64url');
      const response = {
        id,
        rawId: id,
        type: 'public-key',
        response: {
          clientDataJSON: Buffer.from(JSON.stringify(clientData)).toString('base64url'),
          attestationObject: Buffer.from(attestationObject).toString('base64url'),
          transports: ['internal'],
        },
        authenticatorAttachment: 'platform',
        clientExtensionResults: {},
      };
      return { response: JSON.stringify(response), credentialId: id };
    },
  };
}
