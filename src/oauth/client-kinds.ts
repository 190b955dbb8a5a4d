/**
 * Clients that no administrator registered (SPEC §3, §4.8), where the endpoints meet them.
 * A `client_id` that is a URL names a client by its metadata document: the document is
 * resolved (client-metadata.ts: fetched safely, validated, cached) and the client recorded,
 * or refreshed, as a `clients` row so that codes and grants can reference it. Dynamically
 * registered clients are ordinary rows of their own kind. Either kind can be blocked.
 */
import { SCOPES } from '../config.ts';
import type { AppContext } from '../context.ts';
import { findClient, upsertMetadataClient } from '../store/clients.ts';
import type { Client } from '../store/schema.ts';
import { Throttled } from '../throttle.ts';
import { InvalidClient, isUuid } from './client-auth.ts';
import { isAdministratorsClientName } from './client-names.ts';
import { invalidRequest } from './errors.ts';
import { joinScopes } from './scopes.ts';

/**
 * The client an authorization request names, known to be allowed to ask: a refusal is the
 * error page, never a redirect (its reason goes to the log, not to the page). Read from the
 * database, not the client cache: the consent and the code stored next reference the client,
 * and a client deleted where no fan-out reaches would fail those inserts (a 500) for as long
 * as a cached copy lived.
 */
export async function requestingClient(ctx: AppContext, clientId: string, address: string): Promise<Client> {
  const client = clientId.includes(':') ? await metadataDocumentClient(ctx, clientId, address) : isUuid(clientId) ? await findClient(ctx.db, clientId) : undefined;
  if (!client) throw invalidRequest('unknown client: check the "client_id" parameter');
  if (client.blocked === 1) throw invalidRequest('an administrator has blocked this application', `blocked client ${client.id}`);
  return client;
}

/**
 * The client as its metadata document describes it now, recorded; a refused document is an
 * unknown client, and so is one that takes the name of an administrator's client (asked of
 * the database each time: an administrator may have taken the name since the document was
 * cached). A fetch (not a cached document) counts against the requesting address's
 * budget (TOKEN_REQUESTS_PER_ADDRESS a minute, like registrations): over it, 429.
 */
async function metadataDocumentClient(ctx: AppContext, url: string, address: string): Promise<Client> {
  const resolution = await ctx.clientMetadata.resolve(url, () => ctx.services.throttle.tokenRequestFrom(address));
  if (!resolution.ok && resolution.busy) throw new Throttled(1000, 503);
  if (!resolution.ok) throw invalidRequest('unknown client: its client ID metadata document was refused', resolution.reason);
  const { client: document } = resolution;
  if (await isAdministratorsClientName(ctx.db, document.name)) {
    throw invalidRequest('unknown client: its client ID metadata document was refused', "the metadata document's client_name is the name of an administrator's client");
  }
  const redirectUris = JSON.stringify(document.redirectUris);
  const known = await findClient(ctx.db, url);
  if (known && known.name === document.name && known.redirect_uris === redirectUris) return known;
  await upsertMetadataClient(ctx.db, { id: url, name: document.name, redirect_uris: redirectUris, scopes: joinScopes(SCOPES), created_at: ctx.now() });
  ctx.onClientsChanged([url]);
  const recorded = await findClient(ctx.db, url);
  if (!recorded) throw invalidRequest('unknown client: check the "client_id" parameter', 'metadata-document client deleted while it was recorded');
  return recorded;
}

/**
 * At the token endpoint, once a request has proven which client it comes from (SPEC §4.2,
 * §4.8): that client is not blocked, and a metadata-document client's document still
 * resolves (from the cache, or fetched again once it expired). Else `invalid_client`.
 */
export async function requireStanding(ctx: AppContext, client: Client): Promise<void> {
  if (client.blocked === 1) throw new InvalidClient('this client has been blocked', false, `blocked client ${client.id}`);
  if (client.kind !== 'metadata_document') return;
  const resolution = await ctx.clientMetadata.resolve(client.id);
  if (!resolution.ok && resolution.busy) throw new Throttled(1000, 503);
  if (!resolution.ok) throw new InvalidClient('unknown client: its client ID metadata document was refused', false, resolution.reason);
}
