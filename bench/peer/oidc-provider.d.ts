/**
 * The little of oidc-provider's API the bench's peer uses (the package ships no types).
 */
declare module 'oidc-provider' {
  import type { IncomingMessage, ServerResponse } from 'node:http';

  export interface AdapterPayload {
    [key: string]: unknown;
    grantId?: string;
    userCode?: string;
    uid?: string;
    consumed?: number;
  }

  export interface Adapter {
    upsert(id: string, payload: AdapterPayload, expiresIn: number): Promise<void>;
    find(id: string): Promise<AdapterPayload | undefined>;
    findByUserCode(userCode: string): Promise<AdapterPayload | undefined>;
    findByUid(uid: string): Promise<AdapterPayload | undefined>;
    consume(id: string): Promise<void>;
    destroy(id: string): Promise<void>;
    revokeByGrantId(grantId: string): Promise<void>;
  }

  export interface Grant {
    jti: string;
    accountId: string;
    clientId: string;
    addResourceScope(resource: string, scope: string): void;
    getResourceScope(resource: string): string;
    save(): Promise<string>;
  }

  export interface AccessToken {
    accountId: string;
    clientId: string;
    scope?: string;
    aud?: string | string[];
    isExpired: boolean;
  }

  export interface DeviceCode {
    clientId: string;
    accountId?: string;
    grantId?: string;
    scope?: string;
    resource?: string | string[];
    authTime?: number;
    consumed?: number;
    isExpired: boolean;
    save(): Promise<string>;
  }

  export interface InteractionDetails {
    uid: string;
    grantId?: string;
    params: Record<string, string | undefined>;
    prompt: { name: string; details: { missingResourceScopes?: Record<string, string[]> } };
    session?: { accountId: string };
  }

  export interface KoaContextWithOIDC {
    oidc: {
      client: { clientId: string };
      account?: { accountId: string };
      session: { grantIdFor(clientId: string): string | undefined };
      result?: { consent?: { grantId?: string } };
    };
  }

  export default class Provider {
    constructor(issuer: string, configuration: Record<string, unknown>);
    callback(): (request: IncomingMessage, response: ServerResponse) => void;
    interactionDetails(request: IncomingMessage, response: ServerResponse): Promise<InteractionDetails>;
    interactionFinished(
      request: IncomingMessage,
      response: ServerResponse,
      result: Record<string, unknown>,
      options?: { mergeWithLastSubmission?: boolean },
    ): Promise<void>;
    Grant: { new (properties: { accountId: string; clientId: string }): Grant; find(id: string): Promise<Grant | undefined> };
    AccessToken: { find(token: string): Promise<AccessToken | undefined> };
    DeviceCode: { findByUserCode(userCode: string): Promise<DeviceCode | undefined> };
  }
}

declare module 'oidc-provider/lib/helpers/lru.js' {
  export default class LRU {
    constructor(options: { maxSize: number });
  }
}

declare module 'oidc-provider/lib/adapters/memory_adapter.js' {
  import type { Adapter } from 'oidc-provider';
  import type LRU from 'oidc-provider/lib/helpers/lru.js';
  export default class MemoryAdapter implements Adapter {
    constructor(model: string, store: LRU, clockTolerance?: number);
    upsert: Adapter['upsert'];
    find: Adapter['find'];
    findByUserCode: Adapter['findByUserCode'];
    findByUid: Adapter['findByUid'];
    consume: Adapter['consume'];
    destroy: Adapter['destroy'];
    revokeByGrantId: Adapter['revokeByGrantId'];
  }
}

declare module 'oidc-provider/lib/helpers/user_codes.js' {
  export function normalize(input: string): string;
}
