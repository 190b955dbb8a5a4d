/**
 * Client administration: registering, changing, re-keying and deleting OAuth clients,
 * shared by the CLI and the admin pages. Each change records its own audit event, made by
 * the given actor.
 */
import { randomUUID } from 'node:crypto';
import type { Kysely } from 'kysely';
import { madeBy, type Actor } from '../audit.ts';
import { SCOPES } from '../config.ts';
import type { AppContext } from '../context.ts';
import { isUuid } from '../oauth/client-auth.ts';
import { DEVICE_CODE_GRANT_TYPE } from '../oauth/device.ts';
import { OAuthError } from '../oauth/errors.ts';
import { redirectUriProblem } from '../oauth/redirect-uri.ts';
import { revoke } from '../oauth/revocation.ts';
import { isScopeToken, isSubset, joinScopes, splitScopes } from '../oauth/scopes.ts';
import { voidCodes } from '../store/codes.ts';
import { takenScopeNames } from '../store/resources.ts';
import { deleteClient, findClient as findClientById, insertClient, listClients as listAllClients, liveGrantsOfClient, updateClient } from '../store/clients.ts';
import type { Client, Database } from '../store/schema.ts';
import { mintToken } from '../tokens.ts';

export type { Client };

export const GRANT_TYPES = ['authorization_code', 'client_credentials', DEVICE_CODE_GRANT_TYPE] as const;
export type GrantType = (typeof GRANT_TYPES)[number];

/** A problem with what was asked for, naming the field at fault. */
export class ClientInputError extends Error {
  override name = 'ClientInputError';
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
  /** Space-separated, of any resource servers; empty means the built-in scopes. */
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
  // Only the authorization code grant redirects: the other grants' clients need no redirect URL.
  if (input.grantType === 'authorization_code' || input.redirectUri !== '') {
    const problem = input.redirectUri.length > 2000 ? 'is too long' : redirectUriProblem(input.redirectUri);
    if (problem) problems.redirect_uri = `Redirect URL ${problem}`;
  }
  const malformed = input.scope.split(' ').filter((s) => s !== '' && !isScopeToken(s));
  if (malformed.length > 0) problems.scope = `Unknown scope ${malformed.join(', ')}`;
  return problems;
}

/** The scopes asked for, which must all exist (on any resource server); empty means the built-in ones. */
async function existingScopes(db: Kysely<Database>, scope: string): Promise<string> {
  const requested = scope.split(' ').filter((s) => s !== '');
  if (requested.length === 0) return joinScopes(SCOPES);
  const known = await takenScopeNames(db, requested);
  const unknown = requested.filter((s) => !known.includes(s));
  if (unknown.length > 0) throw new ClientInputError('scope', `Unknown scope ${unknown.join(', ')}: see gatehouse scope list`);
  return joinScopes(requested);
}

function firstProblem(problems: Record<string, string>): ClientInputError | null {
  const [field, message] = Object.entries(problems)[0] ?? [];
  return field === undefined || message === undefined ? null : new ClientInputError(field, message);
}

/** The client with this id; undefined for an unknown or malformed one. */
export async function findClient(ctx: AppContext, id: string): Promise<Client | undefined> {
  return isUuid(id) ? findClientById(ctx.db, id) : undefined;
}

export async function listClients(ctx: AppContext): Promise<Client[]> {
  return listAllClients(ctx.db);
}

/** Registers the client (a ClientInputError names the field at fault) and records who did. */
export async function registerClient(ctx: AppContext, input: ClientInput, actor: Actor): Promise<RegisteredClient> {
  const registered = await createClient(ctx.db, input, ctx.now());
  const { client, secret } = registered;
  await ctx.audit({ type: 'client_created', ...madeBy(actor), clientId: client.id, detail: { grant_type: client.grant_type, confidential: secret !== null } });
  return registered;
}

/** Validates and stores a new client, recording nothing: for test fixtures. Everyone else calls `registerClient`. */
export async function createClient(db: Kysely<Database>, input: ClientInput, now: number): Promise<RegisteredClient> {
  const problem = firstProblem(clientInputProblems(input));
  if (problem) throw problem;
  const scopes = await existingScopes(db, input.scope);
  const secret = input.confidential ? mintToken('clientSecret') : null;
  const client: Client = {
    id: randomUUID(),
    name: input.name.trim(),
    grant_type: input.grantType as GrantType,
    redirect_uri: input.redirectUri === '' ? null : input.redirectUri,
    secret_hash: secret?.hash ?? null,
    trusted: input.trusted ? 1 : 0,
    require_pkce: input.requirePkce ? 1 : 0,
    scopes,
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
 * Changes the client's settings. Taking a scope away also voids every code the client has
 * not exchanged yet and revokes the grants that hold the scope, so that no token keeps a
 * scope the client may no longer have (their users are asked again next time).
 */
export async function changeClient(ctx: AppContext, client: Client, changes: ClientChanges, actor: Actor): Promise<void> {
  const problem = firstProblem(clientChangeProblems(client, changes));
  if (problem) throw problem;
  const scopes = await existingScopes(ctx.db, changes.scope);
  await updateClient(ctx.db, client.id, {
    name: changes.name.trim(),
    redirect_uri: changes.redirectUri === '' ? null : changes.redirectUri,
    trusted: changes.trusted ? 1 : 0,
    require_pkce: changes.requirePkce ? 1 : 0,
    scopes,
  });
  const kept = scopes.split(' ');
  // After the update: an exchange or refresh that read the old scopes is refused from then on
  // (store/grants.ts), and one that committed before it made a grant revoked below.
  if (!isSubset(splitScopes(client.scopes), kept)) await voidCodes(ctx.db, { clientId: client.id });
  for (const grant of await liveGrantsOfClient(ctx.db, client.id)) {
    if (!isSubset(grant.scopes.split(' '), kept)) await revoke(ctx, { grantId: grant.id }, 'revoked');
  }
  await ctx.audit({ type: 'client_updated', ...madeBy(actor), clientId: client.id });
}

/** Replaces a confidential client's secret and returns the new one; the old one stops working at once. */
export async function rotateClientSecret(ctx: AppContext, client: Client, actor: Actor): Promise<string> {
  if (client.secret_hash === null) throw new OAuthError('invalid_request', 'This is a public client: it has no secret.');
  const secret = mintToken('clientSecret');
  await updateClient(ctx.db, client.id, { secret_hash: secret.hash });
  await ctx.audit({ type: 'client_secret_rotated', ...madeBy(actor), clientId: client.id });
  return secret.token;
}

/** Deletes the client and everything issued to it; false when there was no such client. */
export async function removeClient(ctx: AppContext, clientId: string, actor: Actor): Promise<boolean> {
  const { deleted, grantIds } = await deleteClient(ctx.db, clientId);
  if (grantIds.length > 0) ctx.onGrantsRevoked(grantIds, 'client_deleted');
  if (deleted) await ctx.audit({ type: 'client_deleted', ...madeBy(actor), clientId });
  return deleted;
}
