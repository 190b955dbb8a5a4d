/** Registering and changing OAuth clients, shared by the CLI and the admin pages. */
import { randomUUID } from 'node:crypto';
import type { Kysely } from 'kysely';
import { SCOPES } from '../config.ts';
import { deleteClient, insertClient, liveGrantsOfClient, updateClient } from '../store/clients.ts';
import type { Client, Database } from '../store/schema.ts';
import { mintToken } from '../tokens.ts';
import type { AppContext } from '../context.ts';
import { redirectUriProblem } from './redirect-uri.ts';
import { revoke } from './revocation.ts';
import { isScope, isSubset, joinScopes, splitScopes } from './scopes.ts';

export const GRANT_TYPES = ['authorization_code', 'client_credentials'] as const;
export type GrantType = (typeof GRANT_TYPES)[number];

export class RegistrationError extends Error {
  override name = 'RegistrationError';
  readonly field: string;
  constructor(field: string, message: string) {
    super(message);
    this.field = field;
  }
}

export interface ClientInput {
  name: string;
  grantType: string;
  redirectUri: string;
  confidential: boolean;
  trusted: boolean;
  requirePkce: boolean;
  /** Space-separated; empty means every scope. */
  scope: string;
}

export interface RegisteredClient {
  client: Client;
  /** Only for confidential clients, and only now: it is stored hashed. */
  secret: string | null;
}

/** What may be shown of a client anywhere — the CLI, the admin pages: never its secret hash. */
export function describeClient(client: Client) {
  return {
    client_id: client.id,
    name: client.name,
    grant_type: client.grant_type,
    redirect_uri: client.redirect_uri,
    confidential: client.secret_hash !== null,
    trusted: client.trusted === 1,
    require_pkce: client.require_pkce === 1,
    scopes: splitScopes(client.scopes),
    created_at: client.created_at,
  };
}

/** Validates the input; returns every problem by field, or an empty object. */
export function clientInputProblems(input: ClientInput): Record<string, string> {
  const problems: Record<string, string> = {};
  const name = input.name.trim();
  if (name === '' || name.length > 100) problems.name = 'Name must be 1-100 characters';
  if (!(GRANT_TYPES as readonly string[]).includes(input.grantType)) problems.grant_type = `Grant type must be one of ${GRANT_TYPES.join(', ')}`;
  if (input.grantType === 'client_credentials' && !input.confidential) problems.client_type = 'A client_credentials client must be confidential';
  if (input.grantType !== 'client_credentials' || input.redirectUri !== '') {
    const problem = input.redirectUri.length > 2000 ? 'is too long' : redirectUriProblem(input.redirectUri);
    if (problem) problems.redirect_uri = `Redirect URL ${problem}`;
  }
  const unknown = input.scope.split(' ').filter((s) => s !== '' && !isScope(s));
  if (unknown.length > 0) problems.scope = `Unknown scope ${unknown.join(', ')}; known scopes are ${SCOPES.join(', ')}`;
  return problems;
}

function firstProblem(problems: Record<string, string>): RegistrationError | null {
  const [field, message] = Object.entries(problems)[0] ?? [];
  return field === undefined || message === undefined ? null : new RegistrationError(field, message);
}

export async function registerClient(db: Kysely<Database>, input: ClientInput, now: number): Promise<RegisteredClient> {
  const problem = firstProblem(clientInputProblems(input));
  if (problem) throw problem;
  const secret = input.confidential ? mintToken('clientSecret') : null;
  const scopes = input.scope.split(' ').filter((s) => s !== '');
  const client: Client = {
    id: randomUUID(),
    name: input.name.trim(),
    grant_type: input.grantType as GrantType,
    redirect_uri: input.redirectUri === '' ? null : input.redirectUri,
    secret_hash: secret?.hash ?? null,
    trusted: input.trusted ? 1 : 0,
    require_pkce: input.requirePkce ? 1 : 0,
    scopes: joinScopes(scopes.length === 0 ? SCOPES : scopes),
    created_at: now,
  };
  await insertClient(db, client);
  return { client, secret: secret?.token ?? null };
}

/** What an administrator may change after registration: not the grant type nor the client type. */
export type ClientChanges = Pick<ClientInput, 'name' | 'redirectUri' | 'trusted' | 'requirePkce' | 'scope'>;

/** Validates the changes against the client's own grant and client type; every problem by field. */
export function clientChangeProblems(client: Client, changes: ClientChanges): Record<string, string> {
  return clientInputProblems({ ...changes, grantType: client.grant_type, confidential: client.secret_hash !== null });
}

/**
 * Changes the client's settings. Taking a scope away also revokes the grants that hold it,
 * so that no token keeps a scope the client may no longer have (their users are asked
 * again next time).
 */
export async function changeClient(ctx: AppContext, client: Client, changes: ClientChanges): Promise<void> {
  const problem = firstProblem(clientChangeProblems(client, changes));
  if (problem) throw problem;
  const requested = changes.scope.split(' ').filter((s) => s !== '');
  const scopes = joinScopes(requested.length === 0 ? SCOPES : requested);
  await updateClient(ctx.db, client.id, {
    name: changes.name.trim(),
    redirect_uri: changes.redirectUri === '' ? null : changes.redirectUri,
    trusted: changes.trusted ? 1 : 0,
    require_pkce: changes.requirePkce ? 1 : 0,
    scopes,
  });
  const kept = scopes.split(' ');
  for (const grant of await liveGrantsOfClient(ctx.db, client.id)) {
    if (!isSubset(grant.scopes.split(' '), kept)) await revoke(ctx, { grantId: grant.id }, 'revoked');
  }
}

/** Replaces the client's secret; the old one stops working at once. */
export async function rotateClientSecret(db: Kysely<Database>, client: Client): Promise<string> {
  const secret = mintToken('clientSecret');
  await updateClient(db, client.id, { secret_hash: secret.hash });
  return secret.token;
}

/** Deletes the client and everything issued to it. */
export async function removeClient(ctx: AppContext, clientId: string): Promise<boolean> {
  const { deleted, grantIds } = await deleteClient(ctx.db, clientId);
  if (grantIds.length > 0) ctx.onGrantsRevoked(grantIds, 'client_deleted');
  return deleted;
}
