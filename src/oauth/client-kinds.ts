/**
 * Clients that no administrator registered (SPEC §3, §4.8), where the endpoints meet them.
 * A `client_id` that is a URL names a client by its metadata document: the document is
 * resolved (client-metadata.ts: fetched safely, validated, cached), and the authorization
 * request goes on with the client it describes. The client is recorded as a `clients` row
 * only once a person approves it (`recordClient`), so that their consent, the code and the
 * grant can reference it: an anonymous request stores nothing (SPEC §4.8). Dynamically
 * registered clients are ordinary rows of their own kind. Either kind can be blocked, and any
 * kind disabled.
 */
import { SCOPES } from '../config.ts';
import type { PendingAuditEvent } from '../audit.ts';
import type { AppContext } from '../context.ts';
import { findClient, metadataClientRow, recordMetadataClient } from '../store/clients.ts';
import type { Client, User } from '../store/schema.ts';
import { Throttled } from '../throttle.ts';
import { InvalidClient, isSwitchedOff, isUuid, switchedOffDetail } from './client-auth.ts';
import { isAdministratorsClientName } from './client-names.ts';
import { AUTHORIZATION_CODE_GRANT_TYPE } from './grants/types.ts';
import { invalidRequest } from '../protocol/errors.ts';
import { joinScopes } from './scopes.ts';

/**
 * The client an authorization request names, known to be allowed to ask: a refusal is the
 * error page, never a redirect (its reason goes to the log, not to the page). Read from the
 * database, not the client cache: the consent and the code stored next reference the client,
 * and a client deleted where no fan-out reaches would fail those inserts (a 500) for as long
 * as a cached copy lived.
 */
export async function requestingClient(ctx: AppContext, clientId: string, address: string): Promise<Client> {
  const client = clientId.includes(':')
    ? await metadataDocumentClient(ctx, clientId, address)
    : isUuid(clientId)
      ? await findClient(ctx.db, clientId)
      : undefined;
  if (!client) throw invalidRequest('unknown client: check the "client_id" parameter');
  if (client.blocked === 1) throw invalidRequest('an administrator has blocked this application', switchedOffDetail(client));
  if (client.disabled === 1) throw invalidRequest('an administrator has disabled this application', switchedOffDetail(client));
  return client;
}

/**
 * The client as its metadata document describes it now; a refused document is an unknown
 * client, and so is one that takes the name of an administrator's client (asked of the
 * database each time: an administrator may have taken the name since the document was
 * cached). Nothing is stored: the row, if the client was recorded before, lends its standing
 * (blocked, disabled) and creation time; otherwise the client is a value made from the document alone.
 * A fetch (not a cached document) counts against the requesting address's budget
 * (TOKEN_REQUESTS_PER_ADDRESS a minute, like registrations): over it, 429.
 */
async function metadataDocumentClient(ctx: AppContext, url: string, address: string): Promise<Client> {
  const resolution = await ctx.clientMetadata.resolve(url, { address, beforeFetch: () => ctx.services.throttle.tokenRequestFrom(address) });
  if (!resolution.ok && resolution.unavailable) throw new Throttled(resolution.unavailable.retryAfterMs, 503);
  if (!resolution.ok) throw invalidRequest('unknown client: its client ID metadata document was refused', resolution.reason);
  const { client: document } = resolution;
  if (await isAdministratorsClientName(ctx.db, document.name)) {
    throw invalidRequest(
      'unknown client: its client ID metadata document was refused',
      "the metadata document's client_name is the name of an administrator's client",
    );
  }
  const described = {
    name: document.name,
    redirect_uris: JSON.stringify(document.redirectUris),
    post_logout_redirect_uris: JSON.stringify(document.postLogoutRedirectUris),
    backchannel_logout_uri: document.backchannelLogoutUri,
    id_token_alg: document.idTokenAlg,
    jwks: document.jwks,
    jwks_uri: document.jwksUri,
    require_dpop: document.requireDpop ? 1 : 0,
    require_par: document.requirePar ? 1 : 0,
    profile: null,
  };
  const known = await findClient(ctx.db, url);
  if (known) return { ...known, ...described };
  return {
    id: url,
    ...described,
    kind: 'metadata_document',
    grant_type: AUTHORIZATION_CODE_GRANT_TYPE,
    blocked: 0,
    disabled: 0,
    secret_hash: null,
    trusted: 0,
    require_pkce: 1,
    scopes: joinScopes(SCOPES),
    created_at: ctx.now(),
    // An administrator's permissions (SPEC §4.15): a client that registered itself has none.
    token_exchange: 0,
    id_jag_audiences: '[]',
  };
}

/**
 * Records a metadata-document client as its document describes it now, when `user` approves
 * it or is about to get a code for it (SPEC §4.8): first recorded, or its name or redirect
 * URLs changed, each with its audit event (`client_recorded`, `client_document_changed`) in
 * the transaction of the change. Other kinds of client are rows already.
 *
 * Its own write, just before the consent and the code that reference it, rather than part of
 * the code's statement: the consent is written apart too, and the row must exist first for
 * either. What this costs is at most a row that no code came to reference (the code's write
 * failed): such a row holds no grant, and the purge removes it like any unused client. What
 * matters holds — only a signed-in person's approval stores a client, and the audit trail
 * names that person.
 */
export async function recordClient(ctx: AppContext, client: Client, user: User, address: string): Promise<void> {
  if (client.kind !== 'metadata_document') return;
  const { id, name, redirect_uris } = client;
  const uris = (json: string) => (JSON.parse(json) as string[]).join(' ');
  const about = { userId: user.id, clientId: id, address };
  let pending: PendingAuditEvent | undefined;
  const written = await recordMetadataClient(ctx.db, metadataClientRow(client), (previous) => {
    pending =
      previous === undefined
        ? ctx.audit.pending({ type: 'client_recorded', ...about, detail: { name, redirect_uris: uris(redirect_uris) } })
        : ctx.audit.pending({ type: 'client_document_changed', ...about, detail: changes(previous, client, uris) });
    return pending.row;
  });
  if (!written) return;
  pending?.committed();
  ctx.onClientsChanged([id]);
}

/** What changed between the recorded client and the document: the old and new value of each. */
function changes(previous: Client, now: Client, uris: (json: string) => string): Record<string, string | null> {
  const changed = (field: 'post_logout_redirect_uris' | 'backchannel_logout_uri' | 'id_token_alg' | 'jwks_uri', show: (value: string) => string) =>
    previous[field] === now[field] ? {} : { [`${field}_was`]: previous[field] && show(previous[field]), [field]: now[field] && show(now[field]) };
  return {
    ...(previous.name === now.name ? {} : { name_was: previous.name, name: now.name }),
    ...(previous.redirect_uris === now.redirect_uris ? {} : { redirect_uris_was: uris(previous.redirect_uris), redirect_uris: uris(now.redirect_uris) }),
    ...changed('post_logout_redirect_uris', uris),
    ...changed('backchannel_logout_uri', (value) => value),
    ...changed('id_token_alg', (value) => value),
    ...changed('jwks_uri', (value) => value),
    ...(previous.jwks === now.jwks ? {} : { jwks: now.jwks === null ? 'removed' : 'changed' }),
  };
}

/**
 * At the token endpoint, once a request has proven which client it comes from (SPEC §4.2,
 * §4.8): that client is not blocked nor disabled, and a metadata-document client's document still
 * resolves (from the cache, or fetched again once it expired). Else `invalid_client`. A
 * document that cannot be fetched right now (no slot, no answer) is not a refusal: the last
 * good copy stands in; with none, 503. Returns the client as it stands: a metadata-document
 * client's flags (`dpop_bound_access_tokens`, `require_pushed_authorization_requests`) as its document says them now.
 */
export async function requireStanding(ctx: AppContext, client: Client, address: string, withAssertion = false): Promise<Client> {
  if (isSwitchedOff(client)) throw new InvalidClient(`this client has been ${client.blocked === 1 ? 'blocked' : 'disabled'}`, false, switchedOffDetail(client));
  if (client.kind !== 'metadata_document') return client;
  const resolution = await ctx.clientMetadata.resolve(client.id, { address, lastGoodCopy: true });
  if (!resolution.ok && resolution.unavailable) throw new Throttled(resolution.unavailable.retryAfterMs, 503);
  if (!resolution.ok) throw new InvalidClient('unknown client: its client ID metadata document was refused', false, resolution.reason);
  // The document says how the client authenticates now, whatever its row recorded when it was
  // public: one that asks for private_key_jwt is refused a request without its assertion (a
  // refresh token it got as a public client, in other hands).
  if (!withAssertion && (resolution.client.jwks !== null || resolution.client.jwksUri !== null)) {
    throw new InvalidClient('this client must authenticate with a client assertion (private_key_jwt)', false, 'its metadata document asks for private_key_jwt');
  }
  // Its flags are the document's say now too (`dpop_bound_access_tokens`, …), not its row's.
  return { ...client, require_dpop: resolution.client.requireDpop ? 1 : 0, require_par: resolution.client.requirePar ? 1 : 0 };
}
