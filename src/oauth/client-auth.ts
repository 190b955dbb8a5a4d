/**
 * Client identification and authentication at the token, revocation, introspection and
 * device authorization endpoints: `client_secret_basic`, `client_secret_post`,
 * `private_key_jwt` (a client assertion, SPEC §4.11), or `none` (a public client that sends
 * only `client_id`). A client uses exactly its registered method. @see RFC 6749 §2.3.1,
 * §3.2.1; RFC 7523 §2.2, §3
 */
import type { Kysely } from 'kysely';
import { findClient as findClientById, isSwitchedOff, type StoredCredentials } from '../store/clients.ts';

export { isSwitchedOff };
import type { Client, Database } from '../store/schema.ts';
import { constantTimeEqual, hashToken } from '../tokens.ts';
import { CLIENT_ASSERTION_TYPE, ClientAssertionRefused, assertedClientId, type ClientAssertionCheck } from './assertions/client-assertion.ts';
import { authMethodOf, isConfidential } from './assertions/client-keys.ts';
import { isMetadataDocumentUrl } from './client-metadata.ts';
import { OAuthError, invalidRequest } from '../protocol/errors.ts';
import { single, type RawParams } from '../protocol/params.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/**
 * Whether `value` is shaped like the IDs Gatehouse hands out (lowercase UUIDs): client and
 * user IDs. Checked before a lookup, so a malformed ID is simply unknown.
 */
export function isUuid(value: string): boolean {
  return UUID.test(value);
}

/**
 * Whether `value` is shaped like a client ID of any kind: a UUID (registered or dynamically
 * registered clients) or a metadata document's URL. Every path that takes a client ID checks
 * this one predicate, so that none of them refuses a kind of client the others accept.
 */
export function isClientId(value: string): boolean {
  return isUuid(value) || isMetadataDocumentUrl(value);
}

/**
 * The client with an id a person typed or a form sent (a UUID, or a metadata document's
 * URL); undefined for an unknown or malformed one, which is never looked up.
 */
export async function lookupClient(db: Kysely<Database>, id: string): Promise<Client | undefined> {
  return isClientId(id) ? findClientById(db, id) : undefined;
}

/** How the log names a switched-off client. */
export function switchedOffDetail(client: Pick<Client, 'id' | 'blocked'>): string {
  return `${client.blocked === 1 ? 'blocked' : 'disabled'} client ${client.id}`;
}

/** `invalid_client`, with a flag telling the route to answer 401 with a Basic challenge. */
export class InvalidClient extends OAuthError {
  readonly usedBasic: boolean;
  constructor(description: string, usedBasic: boolean, detail?: string) {
    super('invalid_client', description, detail);
    this.usedBasic = usedBasic;
  }
}

/**
 * `invalid_client` for a request that needed the client's secret and did not carry it
 * (RFC 6749 §5.2: "no client authentication included").
 */
export function secretRequired(usedBasic = false, detail?: string): InvalidClient {
  return new InvalidClient('this client must authenticate with its secret', usedBasic, detail);
}

/**
 * Whether the request authenticated as a confidential client: with the secret or keys its
 * client has (by the copy it was checked against), or with an assertion — a metadata-document
 * client's keys are its document's, which its stored row may lag behind.
 */
export function authenticatedAsConfidential(authentication: ClientAuthentication | null): boolean {
  return authentication !== null && (isConfidential(authentication.client) || authentication.withAssertion);
}

/**
 * `secretRequired` when the client a code or token belongs to, or a pushed request names, is
 * confidential now (`owner`: read with the code or token, or as the push read the client) and
 * the request did not authenticate as a confidential client (`authenticated`): it named no
 * client, or named that client by a copy in the client cache that predates its first secret or
 * keys — a copy may be up to a second old on an instance that has not heard of the change; what
 * was read with the request is not. A request by another client is refused as such by its caller.
 */
export function requireOwnerAuthentication(
  client: Client | null,
  authenticated: boolean,
  owner: { client_id: string; client_confidential: number },
  usedBasic = false,
): void {
  if (owner.client_confidential !== 1 || authenticated || (client !== null && client.id !== owner.client_id)) return;
  throw secretRequired(usedBasic, `client ${owner.client_id} is confidential as stored now; the request did not authenticate as it`);
}

interface Credentials {
  clientId: string;
  secret: string | undefined;
  /** A client assertion (private_key_jwt), not yet verified. */
  assertion?: string;
  usedBasic: boolean;
}

/** The one answer to every refused client assertion: which check failed goes to the log only. */
const assertionRefused = (detail: string) => new InvalidClient('client authentication failed', false, detail);

/** Reads the client's credentials from the Authorization header or the body; null when none are sent. */
function readCredentials(authorization: string | undefined, params: RawParams): Credentials | null {
  const bodyId = single(params, 'client_id');
  const bodySecret = single(params, 'client_secret');
  const assertionType = single(params, 'client_assertion_type');
  const assertion = single(params, 'client_assertion');
  if (assertionType !== undefined || assertion !== undefined) {
    const basic = authorization !== undefined && /^basic /i.test(authorization);
    if (basic || bodySecret !== undefined) throw invalidRequest('use one client authentication method, not a client assertion and a secret');
    if (assertionType !== CLIENT_ASSERTION_TYPE) throw invalidRequest(`"client_assertion_type" must be ${CLIENT_ASSERTION_TYPE}`);
    if (assertion === undefined) throw invalidRequest('the "client_assertion" parameter is missing');
    const clientId = assertedClientId(assertion);
    if (clientId === null) throw assertionRefused('the client assertion is not a JWT whose iss and sub are one client ID');
    if (bodyId !== undefined && bodyId !== clientId) throw assertionRefused('"client_id" is not the client assertion\'s iss and sub');
    return { clientId, secret: undefined, assertion, usedBasic: false };
  }
  if (authorization !== undefined && /^basic /i.test(authorization)) {
    if (bodySecret !== undefined) throw invalidRequest('use one client authentication method, not both HTTP Basic and "client_secret"');
    const decoded = Buffer.from(authorization.slice(6).trim(), 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    if (colon < 0) throw new InvalidClient('malformed HTTP Basic credentials', true);
    let clientId: string, secret: string;
    try {
      // RFC 6749 §2.3.1: both parts are form-urlencoded before being joined.
      clientId = decodeURIComponent(decoded.slice(0, colon).replace(/\+/g, ' '));
      secret = decodeURIComponent(decoded.slice(colon + 1).replace(/\+/g, ' '));
    } catch {
      throw new InvalidClient('malformed HTTP Basic credentials', true);
    }
    if (bodyId !== undefined && bodyId !== clientId) throw invalidRequest('"client_id" does not match the HTTP Basic credentials');
    return { clientId, secret, usedBasic: true };
  }
  if (bodyId === undefined) {
    if (bodySecret !== undefined) throw invalidRequest('"client_secret" was sent without "client_id"');
    return null;
  }
  return { clientId: bodyId, secret: bodySecret, usedBasic: false };
}

/** Where a client is looked up by id: the client cache (AppContext `clients`), or the database itself. */
export type FindClient = (id: string) => Promise<Client | undefined>;

export interface ClientLookup {
  /** The client, from a copy that may be a second old (the client cache) or from the database. */
  find: FindClient;
  /** The client as stored now: what a presented secret is checked against, unless its caller confirms it so (`identifyClient`). */
  findStored: FindClient;
}

/** A client that authenticated (or, public, named itself), as `identifyClient` found it. */
export interface ClientAuthentication {
  client: Client;
  /** The credentials came in an HTTP Basic header: a refusal answers 401 with a Basic challenge. */
  usedBasic: boolean;
  /** A client assertion (private_key_jwt), verified, authenticated the client. */
  withAssertion: boolean;
  /**
   * The secret hash the presented secret matched in a copy of the client, which the stored row
   * must still have (`confirmSecret`); null when the stored row decided, or no secret was sent.
   */
  unconfirmedSecretHash: string | null;
}

/**
 * The client making the request, authenticated when it is confidential; null when the
 * request names no client (allowed where the caller says so). A secret is always checked
 * against the stored row, never against a cached copy: a rotated secret stops working at
 * once on every instance, whether or not the news of the rotation has reached it. A request
 * without a secret may be answered from the copy: the writes that issue tokens check the
 * client again themselves (store/grants.ts).
 */
export async function authenticateClient(
  clients: ClientLookup,
  authorization: string | undefined,
  params: RawParams,
  checkAssertion?: ClientAssertionCheck,
): Promise<Client | null> {
  return (await identifyClient(clients, authorization, params, checkAssertion, { secretByCopy: false }))?.client ?? null;
}

/**
 * Confirms a secret checked against a copy of the client: as stored, the client must still be
 * switched on and have the hash the secret matched, else `invalid_client` — the answer the
 * stored row would have given in the first place. `stored`: the client's credentials as read
 * with what the request is about (the same statement, so at the same moment); undefined: read
 * here. Nothing to do for no authentication, or one the stored row decided.
 */
export async function confirmSecret(clients: ClientLookup, authentication: ClientAuthentication | null, stored?: StoredCredentials): Promise<void> {
  if (authentication === null || authentication.unconfirmedSecretHash === null) return;
  const { client, usedBasic, unconfirmedSecretHash } = authentication;
  const credentials = requireInService(client.id, stored ?? (await clients.findStored(client.id)), usedBasic);
  if (credentials.secret_hash === null || !constantTimeEqual(credentials.secret_hash, unconfirmedSecretHash)) {
    throw new InvalidClient('client authentication failed', usedBasic, `secret of client ${client.id} replaced or removed`);
  }
}

/**
 * `step`, whose refusals (`OAuthError`) are preceded by `confirm` (`confirmSecret`): a secret the
 * stored row no longer has, or a client switched off, is refused as such, whatever else is wrong.
 */
export async function confirmingRefusals<T>(confirm: () => Promise<void>, step: () => T | Promise<T>): Promise<T> {
  try {
    return await step();
  } catch (error) {
    if (error instanceof OAuthError) await confirm();
    throw error;
  }
}

/**
 * `authenticateClient`, and how. With `secretByCopy`, a secret may be checked against the
 * client's copy in the client cache — a read fewer — for a caller that confirms it against the
 * stored row as it reads what the request is about (`confirmSecret`), before anything is
 * decided by it: the token endpoint's grants that read their client with what they redeem, and
 * revocation. A secret the copy refuses is checked against the stored row at once, so a new
 * secret works at once too. Registered keys (a client assertion) are always read from the stored row.
 */
export async function identifyClient(
  clients: ClientLookup,
  authorization: string | undefined,
  params: RawParams,
  checkAssertion: ClientAssertionCheck | undefined,
  { secretByCopy }: { secretByCopy: boolean },
): Promise<ClientAuthentication | null> {
  const credentials = readCredentials(authorization, params);
  if (credentials === null) return null;
  const { clientId, secret, assertion, usedBasic } = credentials;
  const withSecret = secret !== undefined && secret !== '';
  // Registered keys are read from the stored row; a secret too, unless its caller confirms it.
  const byCopy = assertion === undefined && (!withSecret || secretByCopy);
  const find = byCopy ? clients.find : clients.findStored;
  const found = isClientId(clientId) ? await find(clientId) : undefined;
  let client: Client;
  try {
    client = await checkCredentials(found, credentials, checkAssertion);
  } catch (error) {
    // A copy may predate a new secret, or the client's enabling: the stored row decides. (No
    // copy means the client was just read and not found: the cache keeps only clients that exist.)
    if (!(withSecret && byCopy && found !== undefined && error instanceof InvalidClient)) throw error;
    client = await checkCredentials(await clients.findStored(clientId), credentials, checkAssertion);
    return { client, usedBasic, withAssertion: false, unconfirmedSecretHash: null };
  }
  return { client, usedBasic, withAssertion: assertion !== undefined, unconfirmedSecretHash: withSecret && byCopy ? client.secret_hash : null };
}

/**
 * `client` as it is if it exists and is switched on; else `invalid_client` "unknown client". A
 * blocked or disabled client is unknown (SPEC §4.8, §4.16), and is refused as such before its
 * grant is looked at: whatever the request carries, the answer is the one a client that does
 * not exist gets.
 */
function requireInService<C extends Pick<Client, 'blocked' | 'disabled'>>(id: string, client: C | undefined, usedBasic: boolean): C {
  if (!client) throw new InvalidClient('unknown client', usedBasic);
  if (isSwitchedOff(client)) throw new InvalidClient('unknown client', usedBasic, switchedOffDetail({ id, blocked: client.blocked }));
  return client;
}

/** `client` when it exists, is switched on, and the credentials are its registered method's; else throws `InvalidClient`. */
async function checkCredentials(found: Client | undefined, credentials: Credentials, checkAssertion: ClientAssertionCheck | undefined): Promise<Client> {
  const { secret, assertion, usedBasic } = credentials;
  const client = requireInService(credentials.clientId, found, usedBasic);
  const method = authMethodOf(client);
  if (assertion !== undefined) {
    // A client uses exactly its registered method: a client with a secret cannot switch to an assertion.
    // A metadata-document client's method is its document's now (its keys are read from it: client-assertion.ts).
    if (method !== 'private_key_jwt' && client.kind !== 'metadata_document')
      throw assertionRefused(`client ${client.id} does not authenticate with private_key_jwt (${method})`);
    if (!checkAssertion) throw assertionRefused('client assertions are not accepted here');
    try {
      await checkAssertion(client, assertion);
    } catch (error) {
      if (error instanceof ClientAssertionRefused) throw assertionRefused(`client ${client.id}: ${error.detail}`);
      throw error;
    }
    return client;
  }
  if (method === 'private_key_jwt') {
    if (secret !== undefined && secret !== '')
      throw new InvalidClient('this client authenticates with a client assertion (private_key_jwt), not a secret', usedBasic);
    throw new InvalidClient('this client must authenticate with a client assertion (private_key_jwt)', usedBasic);
  }
  if (client.secret_hash === null) {
    if (secret !== undefined && secret !== '') throw new InvalidClient('this is a public client: it has no secret to send', usedBasic);
    return client;
  }
  if (secret === undefined || secret === '') throw secretRequired(usedBasic);
  if (!constantTimeEqual(hashToken(secret), client.secret_hash)) {
    throw new InvalidClient('client authentication failed', usedBasic, `wrong secret for client ${client.id}`);
  }
  return client;
}
