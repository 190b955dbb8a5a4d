/**
 * Client administration: registering, changing, re-keying and deleting OAuth clients,
 * shared by the CLI and the admin pages. Each change records its own audit event, made by
 * the given actor.
 */
import { InputError, cut } from '../input-error.ts';
import { randomUUID } from 'node:crypto';
import type { Kysely } from 'kysely';
import { madeBy, type Actor } from '../audit.ts';
import { SCOPES } from '../config.ts';
import type { AppContext } from '../context.ts';
import { lookupClient } from '../oauth/client-auth.ts';
import { authMethodOf, isConfidential, jwksProblem, jwksShapeProblem, jwksUriProblem } from '../oauth/assertions/client-keys.ts';
import {
  AUTHORIZATION_CODE_GRANT_TYPE,
  CLIENT_CREDENTIALS_GRANT_TYPE,
  CLIENT_GRANT_TYPES,
  JWT_BEARER_GRANT_TYPE,
  type ClientGrantType,
} from '../oauth/grants/types.ts';
import { storeGrantSecret } from '../oauth/assertions/grant-secrets.ts';
import { OAuthError } from '../protocol/errors.ts';
import { SIGNING_ALGS } from '../identity/key-schedule.ts';
import { postLogoutRedirectUrisOf, redirectUriProblem, redirectUrisOf } from '../protocol/redirect-uri.ts';
import { revoke } from '../oauth/revocation.ts';
import { issuerKey, unknownScopesProblem } from '../oauth/resources.ts';
import { idJagAudiencesOf, type IdJagAudience } from '../identity/id-jags.ts';
import { IDENTITY_SCOPE_NAMES, isScopeToken, isSubset, joinScopes, quoted, splitScopes } from '../oauth/scopes.ts';
import { voidCodes } from '../store/codes.ts';
import {
  deleteClient,
  deleteClientBlock,
  insertClient,
  insertClientBlock,
  listClients as listClientPage,
  liveGrantsOfClient,
  setClientBlocked,
  setClientDisabled,
  updateClient,
  PAGE_SIZE,
  type Page,
  type PageCursor,
} from '../store/clients.ts';
import type { Client, ClientProfile, Database } from '../store/schema.ts';
import { FAPI2 } from '../oauth/client-rules.ts';
import { mintToken } from '../tokens.ts';

export { PAGE_SIZE };
export type { Client, Page, PageCursor };

/** A problem with what was asked for, naming the field at fault. */
export class ClientInputError extends InputError {
  override name = 'ClientInputError';
}

export interface ClientInput {
  name: string;
  grantType: string;
  /** Empty only for client_credentials clients. */
  redirectUris: readonly string[];
  confidential: boolean;
  trusted: boolean;
  requirePkce: boolean;
  /** Space-separated, of any resource servers; empty means the built-in scopes. */
  scope: string;
  /** OpenID Connect (SPEC §4.10): where RP-initiated logout may return to, matched exactly; none when absent. */
  postLogoutRedirectUris?: readonly string[];
  /** Where back-channel logout tokens are POSTed; none when absent or null. */
  backchannelLogoutUri?: string | null;
  /** `id_token_signed_response_alg`: RS256 (the default) or ES256. */
  idTokenAlg?: string;
  /**
   * `private_key_jwt` (SPEC §4.11): the client's public keys, as a JWK Set in JSON text, or the
   * https URL of one — at most one of them. Either makes a confidential client without a
   * secret. Absent: as it was (a change), or none (a registration).
   */
  jwks?: string | null;
  jwksUri?: string | null;
  /**
   * SPEC §4.14: tokens only with a DPoP proof; authorization requests only pushed (PAR); the
   * FAPI 2.0 profile. Absent: as it was (a change), or off (a registration).
   */
  requireDpop?: boolean;
  requirePar?: boolean;
  profile?: ClientProfile | null;
  /**
   * SPEC §4.15: whether it may exchange a person's access token for a narrower one, and the
   * authorization servers it may get ID-JAGs for. Absent: as it was (a change), or none.
   */
  tokenExchange?: boolean;
  idJagAudiences?: readonly IdJagAudience[];
}

/** At most this many ID-JAG audiences per client. */
const MAX_ID_JAG_AUDIENCES = 20;

/** What is wrong with a list of ID-JAG audiences, or null. */
function idJagAudiencesProblem(audiences: readonly IdJagAudience[]): string | null {
  if (audiences.length > MAX_ID_JAG_AUDIENCES) return `At most ${MAX_ID_JAG_AUDIENCES} ID-JAG audiences may be listed`;
  for (const { issuer, client_id } of audiences) {
    const problem = issuer.length > MAX_REDIRECT_URI_LENGTH ? 'is too long' : issuerUrlProblem(issuer);
    if (problem) return `ID-JAG audience ${cut(issuer, 100)} ${problem}`;
    if (client_id !== null && (client_id.length > MAX_REDIRECT_URI_LENGTH || !/^[\x21-\x7e]+$/.test(client_id)))
      return `The client ID for ${cut(issuer, 100)} must be printable characters without spaces`;
  }
  if (new Set(audiences.map((a) => issuerKey(a.issuer))).size !== audiences.length) return 'Each ID-JAG audience must be listed once';
  return null;
}

/** Why `issuer` cannot be an authorization server's issuer identifier (RFC 8414 §2): https (http on a loopback host), no query or fragment. */
function issuerUrlProblem(issuer: string): string | null {
  if (issuer.includes('?') || issuer.includes('#')) return 'must not have a query or a fragment';
  return redirectUriProblem(issuer, { publicClient: false });
}

/** The SPEC §4.15 settings as stored, from what was asked for: absent ones as they are (`current`), or none. */
function exchangeSettings(input: Pick<ClientInput, 'tokenExchange' | 'idJagAudiences'>, current?: Pick<Client, 'token_exchange' | 'id_jag_audiences'>) {
  return {
    token_exchange: input.tokenExchange === undefined ? (current?.token_exchange ?? 0) : input.tokenExchange ? 1 : 0,
    id_jag_audiences: input.idJagAudiences === undefined ? (current?.id_jag_audiences ?? '[]') : JSON.stringify(input.idJagAudiences),
  };
}

/** The SPEC §4.14 settings as stored, from what was asked for: absent ones as they are (`current`), or off. */
function senderSettings(
  input: Pick<ClientInput, 'requireDpop' | 'requirePar' | 'profile'>,
  current?: Pick<Client, 'require_dpop' | 'require_par' | 'profile'>,
) {
  const flag = (asked: boolean | undefined, now: number | undefined) => (asked === undefined ? (now ?? 0) : asked ? 1 : 0);
  return {
    require_dpop: flag(input.requireDpop, current?.require_dpop),
    require_par: flag(input.requirePar, current?.require_par),
    profile: input.profile === undefined ? (current?.profile ?? null) : input.profile,
  };
}

/**
 * The FAPI 2.0 Security Profile's rule for the client itself (SPEC §4.14): a confidential
 * client of the authorization code grant that authenticates with `private_key_jwt`. The rest —
 * PAR, PKCE S256, DPoP, short codes — is enforced on its requests (oauth/client-rules.ts).
 */
function profileProblems(profile: ClientProfile | null, grantType: string, keyed: boolean): Record<string, string> {
  if (profile !== FAPI2) return {};
  if (grantType !== AUTHORIZATION_CODE_GRANT_TYPE) return { profile: 'The FAPI 2.0 profile is for clients of the authorization code grant' };
  return keyed ? {} : { profile: 'The FAPI 2.0 profile needs a client that authenticates with private_key_jwt: give it a JWKS URL or a JWKS' };
}

/** The keys as stored, from what was asked for: absent ones stay as they are (`current`). */
function keySettings(input: Pick<ClientInput, 'jwks' | 'jwksUri'>, current?: Pick<Client, 'jwks' | 'jwks_uri'>) {
  const jwks = input.jwks === undefined ? (current?.jwks ?? null) : input.jwks === null ? null : JSON.stringify(JSON.parse(input.jwks));
  const jwksUri = input.jwksUri === undefined ? (current?.jwks_uri ?? null) : input.jwksUri;
  return { jwks, jwks_uri: jwksUri };
}

/** Whether the input registers keys (private_key_jwt). */
const hasKeys = (input: Pick<ClientInput, 'jwks' | 'jwksUri'>) => (input.jwks ?? null) !== null || (input.jwksUri ?? null) !== null;

/** The problems of the keys asked for, synchronously (the shape; clientKeysProblem also imports them). */
function keyProblems(input: Pick<ClientInput, 'jwks' | 'jwksUri'>): Record<string, string> {
  const jwks = input.jwks ?? null;
  const jwksUri = input.jwksUri ?? null;
  if (jwks !== null && jwksUri !== null) return { jwks: 'Give a JWKS URL or a JWKS, not both' };
  if (jwksUri !== null) {
    const problem = jwksUriProblem(jwksUri);
    return problem === null ? {} : { jwks_uri: `JWKS URL ${problem}` };
  }
  if (jwks !== null) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(jwks);
    } catch {
      return { jwks: 'JWKS is not JSON' };
    }
    const problem = jwksShapeProblem(parsed);
    return problem === null ? {} : { jwks: `JWKS ${problem}` };
  }
  return {};
}

/** Throws a ClientInputError when an inline JWKS holds a key jose cannot import. */
async function requireImportableKeys(input: Pick<ClientInput, 'jwks'>): Promise<void> {
  if (input.jwks === undefined || input.jwks === null) return;
  const problem = await jwksProblem(JSON.parse(input.jwks));
  if (problem !== null) throw new ClientInputError('jwks', `JWKS ${problem}`);
}

/** The OIDC settings as stored, from what was asked for: absent ones stay as they are (`current`), or take their defaults. */
function oidcSettings(
  input: Pick<ClientInput, 'postLogoutRedirectUris' | 'backchannelLogoutUri' | 'idTokenAlg'>,
  current?: Pick<Client, 'post_logout_redirect_uris' | 'backchannel_logout_uri' | 'id_token_alg'>,
) {
  return {
    post_logout_redirect_uris:
      input.postLogoutRedirectUris === undefined ? (current?.post_logout_redirect_uris ?? '[]') : JSON.stringify(input.postLogoutRedirectUris),
    backchannel_logout_uri: input.backchannelLogoutUri === undefined ? (current?.backchannel_logout_uri ?? null) : input.backchannelLogoutUri,
    id_token_alg: SIGNING_ALGS.find((alg) => alg === input.idTokenAlg) ?? current?.id_token_alg ?? 'RS256',
  };
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
    kind: client.kind,
    blocked: client.blocked === 1,
    disabled: client.disabled === 1,
    redirect_uris: redirectUrisOf(client),
    confidential: isConfidential(client),
    trusted: client.trusted === 1,
    require_pkce: client.require_pkce === 1,
    require_dpop: client.require_dpop === 1,
    require_par: client.require_par === 1,
    profile: client.profile,
    token_exchange: client.token_exchange === 1,
    id_jag_audiences: idJagAudiencesOf(client),
    scopes: splitScopes(client.scopes),
    token_endpoint_auth_method: authMethodOf(client),
    ...(client.jwks_uri === null ? {} : { jwks_uri: client.jwks_uri }),
    ...(client.jwks === null ? {} : { jwks: JSON.parse(client.jwks) as unknown }),
    post_logout_redirect_uris: postLogoutRedirectUrisOf(client),
    backchannel_logout_uri: client.backchannel_logout_uri,
    id_token_signed_response_alg: client.id_token_alg,
    created_at: client.created_at,
  };
}

/** Validates the input; returns every problem by field, or an empty object. */
export function clientInputProblems(input: ClientInput): Record<string, string> {
  const problems: Record<string, string> = {};
  const name = input.name.trim();
  if (name === '' || name.length > 100) problems.name = 'Name must be 1-100 characters';
  if (!(CLIENT_GRANT_TYPES as readonly string[]).includes(input.grantType)) problems.grant_type = `Grant type must be one of ${CLIENT_GRANT_TYPES.join(', ')}`;
  Object.assign(problems, keyProblems(input));
  if (input.grantType === CLIENT_CREDENTIALS_GRANT_TYPE && !input.confidential && !hasKeys(input))
    problems.client_type = 'A client_credentials client must be confidential';
  // Its secret signs its grant tokens (SPEC §4.11): a publisher client without one could not use its grant.
  if (input.grantType === JWT_BEARER_GRANT_TYPE && (!input.confidential || hasKeys(input)))
    problems.client_type = 'A jwt-bearer client must be confidential with a secret: its secret signs its grant tokens';
  const publicClient = !input.confidential && !hasKeys(input);
  const redirectProblem = redirectUrisProblem(input.redirectUris, { required: input.grantType === AUTHORIZATION_CODE_GRANT_TYPE, publicClient });
  if (redirectProblem) problems.redirect_uri = redirectProblem;
  const malformed = input.scope.split(' ').filter((s) => s !== '' && !isScopeToken(s));
  if (malformed.length > 0) problems.scope = `Unknown scope ${quoted(malformed)}`;
  const postLogoutProblem = redirectUrisProblem(input.postLogoutRedirectUris ?? [], { required: false, publicClient: false }, 'Post-logout redirect URL');
  if (postLogoutProblem) problems.post_logout_redirect_uri = postLogoutProblem;
  const backchannelProblem = backchannelLogoutUriProblem(input.backchannelLogoutUri ?? null);
  if (backchannelProblem) problems.backchannel_logout_uri = `Back-channel logout URL ${backchannelProblem}`;
  if (input.idTokenAlg !== undefined && !(SIGNING_ALGS as readonly string[]).includes(input.idTokenAlg))
    problems.id_token_alg = `ID token algorithm must be one of ${SIGNING_ALGS.join(', ')}`;
  // Token exchange authenticates the client (SPEC §4.15): a public client could not be told from anyone holding its tokens.
  const exchanging = input.tokenExchange === true || (input.idJagAudiences ?? []).length > 0;
  if (exchanging && publicClient) problems.token_exchange = 'Only a confidential client may exchange tokens or get ID-JAGs';
  const audiencesProblem = idJagAudiencesProblem(input.idJagAudiences ?? []);
  if (audiencesProblem) problems.id_jag_audiences = audiencesProblem;
  return problems;
}

/**
 * Why `uri` cannot be a client's back-channel logout URL (Back-Channel Logout 1.0 §2.2), or
 * null when it can: an absolute URL without a fragment, https or http on loopback — the rule
 * for redirect URLs. An administrator's client may name a private address; the others are
 * held to public ones when the logout is delivered (src/identity/backchannel-logout.ts).
 */
export function backchannelLogoutUriProblem(uri: string | null): string | null {
  if (uri === null) return null;
  return uri.length > MAX_REDIRECT_URI_LENGTH ? 'is too long' : redirectUriProblem(uri, { publicClient: false });
}

/**
 * The scopes asked for, which must all exist (on any resource server, or be identity scopes);
 * empty means the built-in ones and the identity scopes (SPEC §3).
 */
async function existingScopes(db: Kysely<Database>, scope: string): Promise<string> {
  const requested = scope.split(' ').filter((s) => s !== '');
  if (requested.length === 0) return joinScopes([...SCOPES, ...IDENTITY_SCOPE_NAMES]);
  const problem = await unknownScopesProblem(db, requested);
  if (problem !== null) throw new ClientInputError('scope', problem);
  return joinScopes(requested);
}

/** At most this many redirect URLs per client, each at most MAX_REDIRECT_URI_LENGTH characters. */
export const MAX_REDIRECT_URIS = 20;
export const MAX_REDIRECT_URI_LENGTH = 2000;

/**
 * What is wrong with a client's list of redirect URLs (or of post-logout redirect URLs, named
 * by `label`), as a sentence naming the first bad one; null when nothing. `publicClient`: a
 * private-use scheme may be among them (protocol/redirect-uri.ts).
 */
export function redirectUrisProblem(
  uris: readonly string[],
  { required, publicClient }: { required: boolean; publicClient: boolean },
  label = 'Redirect URL',
): string | null {
  const named = label.charAt(0).toLowerCase() + label.slice(1);
  if (uris.length === 0) return required ? `${label} must be an absolute URL` : null;
  if (uris.length > MAX_REDIRECT_URIS) return `At most ${MAX_REDIRECT_URIS} ${named}s may be registered`;
  for (const uri of uris) {
    const problem = uri.length > MAX_REDIRECT_URI_LENGTH ? 'is too long' : redirectUriProblem(uri, { publicClient });
    if (problem) return uris.length === 1 ? `${label} ${problem}` : `${label} ${cut(uri, 100)} ${problem}`;
  }
  if (new Set(uris).size !== uris.length) return `Each ${named} must be listed once`;
  return null;
}

function firstProblem(problems: Record<string, string>): ClientInputError | null {
  const [field, message] = Object.entries(problems)[0] ?? [];
  return field === undefined || message === undefined ? null : new ClientInputError(field, message);
}

/** A page of at most `limit` clients of every kind, oldest first (SPEC §4.5: admin lists are paginated). */
export async function listClients(ctx: AppContext, cursor: PageCursor, limit: number): Promise<Page<Client>> {
  return listClientPage(ctx.db, cursor, limit);
}

/** Registers the client (a ClientInputError names the field at fault) and records who did. */
export async function registerClient(ctx: AppContext, input: ClientInput, actor: Actor): Promise<RegisteredClient> {
  const registered = await createClient(ctx.db, input, ctx.now(), ctx.config.keys.secret);
  const { client } = registered;
  await ctx.audit({
    type: 'client_created',
    ...madeBy(actor),
    clientId: client.id,
    detail: {
      grant_type: client.grant_type,
      confidential: isConfidential(client),
      // Named only when it is not what `confidential` already says (a secret, or none).
      ...(authMethodOf(client) === 'private_key_jwt' ? { token_endpoint_auth_method: 'private_key_jwt' } : {}),
    },
  });
  return registered;
}

/**
 * Validates and stores a new client, recording nothing: for test fixtures. Everyone else calls
 * `registerClient`. A jwt-bearer client's secret is also kept readable, sealed under
 * `keysSecret` (KEYS_SECRET) when set (grant-secrets.ts).
 */
export async function createClient(db: Kysely<Database>, input: ClientInput, now: number, keysSecret: string | null = null): Promise<RegisteredClient> {
  const problem = firstProblem({ ...clientInputProblems(input), ...profileProblems(input.profile ?? null, input.grantType, hasKeys(input)) });
  if (problem) throw problem;
  await requireImportableKeys(input);
  const scopes = await existingScopes(db, input.scope);
  // Registered keys replace the secret: a private_key_jwt client has none (SPEC §4.11).
  const secret = input.confidential && !hasKeys(input) ? mintToken('clientSecret') : null;
  const client: Client = {
    id: randomUUID(),
    name: input.name.trim(),
    grant_type: input.grantType as ClientGrantType,
    kind: 'registered',
    blocked: 0,
    disabled: 0,
    redirect_uris: JSON.stringify(input.redirectUris),
    secret_hash: secret?.hash ?? null,
    ...keySettings(input),
    trusted: input.trusted ? 1 : 0,
    require_pkce: input.requirePkce ? 1 : 0,
    scopes,
    created_at: now,
    ...oidcSettings(input),
    ...senderSettings(input),
    ...exchangeSettings(input),
  };
  await insertClient(db, client);
  if (client.grant_type === JWT_BEARER_GRANT_TYPE && secret) await storeGrantSecret(db, client.id, secret.token, keysSecret);
  return { client, secret: secret?.token ?? null };
}

/** What an administrator may change after registration: not the grant type nor the client type. */
export type ClientChanges = Pick<
  ClientInput,
  | 'name'
  | 'redirectUris'
  | 'trusted'
  | 'requirePkce'
  | 'scope'
  | 'postLogoutRedirectUris'
  | 'backchannelLogoutUri'
  | 'idTokenAlg'
  | 'jwks'
  | 'jwksUri'
  | 'requireDpop'
  | 'requirePar'
  | 'profile'
  | 'tokenExchange'
  | 'idJagAudiences'
>;

/** Validates the changes against the client's own grant and client type; every problem by field. */
export function clientChangeProblems(client: Client, changes: ClientChanges): Record<string, string> {
  const problems = clientInputProblems({ ...changes, grantType: client.grant_type, confidential: isConfidential(client) });
  // The method stays as registered: a private_key_jwt client keeps keys (new ones, to rotate), others get none.
  const keys = keySettings(changes, client);
  const keyed = keys.jwks !== null || keys.jwks_uri !== null;
  if (authMethodOf(client) === 'private_key_jwt' && !keyed) problems.jwks ??= 'A private_key_jwt client needs a JWKS URL or a JWKS';
  if (authMethodOf(client) !== 'private_key_jwt' && keyed) problems.jwks ??= 'Only a client registered with keys (private_key_jwt) can have them';
  const profile = changes.profile === undefined ? client.profile : changes.profile;
  return { ...profileProblems(profile, client.grant_type, authMethodOf(client) === 'private_key_jwt'), ...problems };
}

/**
 * Changes the client's settings. Taking a scope away, changing the redirect URLs or the PKCE
 * requirement voids every code the client has not exchanged yet: a code is bound to what was
 * in force when it was issued, and must not outlive a change an administrator made to close
 * a hole (a redirect URL removed, PKCE required). Taking a scope away also revokes the grants
 * that hold the scope, so that no token keeps a scope the client may no longer have (their
 * users are asked again next time).
 */
export async function changeClient(ctx: AppContext, client: Client, changes: ClientChanges, actor: Actor): Promise<void> {
  if (client.kind !== 'registered')
    throw new ClientInputError('client', 'only clients an administrator registered can be edited: disable or block this one instead');
  const problem = firstProblem(clientChangeProblems(client, changes));
  if (problem) throw problem;
  await requireImportableKeys(changes);
  const scopes = await existingScopes(ctx.db, changes.scope);
  await updateClient(ctx.db, client.id, {
    ...keySettings(changes, client),
    name: changes.name.trim(),
    redirect_uris: JSON.stringify(changes.redirectUris),
    trusted: changes.trusted ? 1 : 0,
    require_pkce: changes.requirePkce ? 1 : 0,
    scopes,
    ...oidcSettings(changes, client),
    ...senderSettings(changes, client),
    ...exchangeSettings(changes, client),
  });
  ctx.onClientsChanged([client.id]);
  const kept = scopes.split(' ');
  // After the update: an exchange or refresh that read the old scopes is refused from then on
  // (store/grants.ts), and one that committed before it made a grant revoked below.
  const redirectUrisChanged = JSON.stringify(changes.redirectUris) !== client.redirect_uris;
  const pkceChanged = changes.requirePkce !== (client.require_pkce === 1);
  if (!isSubset(splitScopes(client.scopes), kept) || redirectUrisChanged || pkceChanged) await voidCodes(ctx.db, { clientId: client.id });
  for (const grant of await liveGrantsOfClient(ctx.db, client.id)) {
    if (!isSubset(grant.scopes.split(' '), kept)) await revoke(ctx, { grantId: grant.id }, 'revoked');
  }
  await ctx.audit({ type: 'client_updated', ...madeBy(actor), clientId: client.id });
}

/** Replaces a confidential client's secret and returns the new one; the old one stops working at once. */
export async function rotateClientSecret(ctx: AppContext, client: Client, actor: Actor): Promise<string> {
  if (client.secret_hash === null)
    throw new OAuthError(
      'invalid_request',
      isConfidential(client) ? 'This client authenticates with its keys (private_key_jwt): it has no secret.' : 'This is a public client: it has no secret.',
    );
  const secret = mintToken('clientSecret');
  await updateClient(ctx.db, client.id, { secret_hash: secret.hash });
  if (client.grant_type === JWT_BEARER_GRANT_TYPE) await storeGrantSecret(ctx.db, client.id, secret.token, ctx.config.keys.secret);
  ctx.onClientsChanged([client.id]);
  await ctx.audit({ type: 'client_secret_rotated', ...madeBy(actor), clientId: client.id });
  return secret.token;
}

/** Deletes the client and everything issued to it; false when there was no such client. */
export async function removeClient(ctx: AppContext, clientId: string, actor: Actor): Promise<boolean> {
  const { deleted, grantIds } = await deleteClient(ctx.db, clientId);
  if (deleted) ctx.onClientsChanged([clientId]);
  if (grantIds.length > 0) ctx.onGrantsRevoked(grantIds, 'client_deleted');
  if (deleted) await ctx.audit({ type: 'client_deleted', ...madeBy(actor), clientId });
  return deleted;
}

/** The client with this id, of any kind; a ClientInputError when there is none. */
export async function clientNamed(ctx: AppContext, clientId: string): Promise<Client> {
  const client = await lookupClient(ctx.db, clientId);
  if (!client) throw new ClientInputError('client', `no client with id ${clientId}`);
  return client;
}

/**
 * Disables a client of any kind (SPEC §4.16): it is refused like a blocked one from now on,
 * at every endpoint, and everything issued to it is revoked — grants, tokens, codes not yet
 * exchanged. As for a block, the flag is set first: an exchange or refresh that commits
 * afterwards finds the client disabled (store/grants.ts), and one that committed before is
 * revoked here. Its settings, consents and secret stay, for `enableClient`. False when it
 * was disabled already (nothing is done then).
 */
export async function disableClient(ctx: AppContext, client: Client, actor: Actor): Promise<boolean> {
  if (!(await setClientDisabled(ctx.db, client.id, true))) return false;
  ctx.onClientsChanged([client.id]);
  await voidCodes(ctx.db, { clientId: client.id });
  await revoke(ctx, { clientId: client.id }, 'client_disabled');
  await ctx.audit({ type: 'client_disabled', ...madeBy(actor), clientId: client.id });
  return true;
}

/**
 * Enables a disabled client again: it may ask for new tokens; what was revoked when it was
 * disabled stays revoked. False when it was not disabled.
 */
export async function enableClient(ctx: AppContext, client: Client, actor: Actor): Promise<boolean> {
  if (!(await setClientDisabled(ctx.db, client.id, false))) return false;
  ctx.onClientsChanged([client.id]);
  await ctx.audit({ type: 'client_enabled', ...madeBy(actor), clientId: client.id });
  return true;
}

/** What a block or unblock applied to: one client, or a URL prefix of metadata documents. */
export type BlockTarget = { kind: 'client'; client: Client } | { kind: 'prefix'; prefix: string };

/**
 * Reads `target` (SPEC §2 `client block`): the id of a metadata-document or dynamically
 * registered client, else an https URL prefix of metadata documents.
 */
async function blockTarget(ctx: AppContext, target: string): Promise<BlockTarget> {
  const client = await lookupClient(ctx.db, target);
  if (client) {
    if (client.kind === 'registered')
      throw new ClientInputError('client', 'an administrator registered this client: disable it (gatehouse client disable) instead of blocking it');
    return { kind: 'client', client };
  }
  const prefix = blockedPrefix(target);
  if (prefix === null) throw new ClientInputError('client', 'name a client ID, or an https URL prefix of metadata documents');
  return { kind: 'prefix', prefix };
}

/**
 * A URL prefix as it is stored and compared: written as the URL parser writes it (lower-case
 * host, no default port, no trailing dot on the host), so that it is compared with the
 * canonical URLs metadata documents are known by. Its origin always ends with the `/` that
 * starts the path, so a prefix matches by scheme, host and port exactly, and then by the
 * start of the path: `https://example.com` stands for `https://example.com/` and matches
 * neither `https://example.com.evil.example/…` nor `https://example.com:8443/…`. Null when
 * `target` is not an https URL, or has a fragment or credentials (which no client ID has).
 */
export function blockedPrefix(target: string): string | null {
  if (!URL.canParse(target)) return null;
  const url = new URL(target);
  const host = url.hostname.replace(/\.$/, '');
  if (url.protocol !== 'https:' || target.includes('#') || url.username !== '' || url.password !== '' || host === '') return null;
  url.hostname = host;
  return url.href;
}

/**
 * Refuses a client that no administrator registered from now on — or every metadata document
 * under a URL prefix — and revokes everything issued to it: grants, tokens, codes not yet
 * exchanged. The flag is set first: an exchange or refresh that commits afterwards finds the
 * client blocked (store/grants.ts), and one that committed before is revoked here.
 */
export async function blockClient(ctx: AppContext, target: string, actor: Actor): Promise<BlockTarget> {
  const blocked = await blockTarget(ctx, target);
  const clientIds = blocked.kind === 'client' ? [blocked.client.id] : await insertClientBlock(ctx.db, blocked.prefix, ctx.now());
  if (blocked.kind === 'client') await setClientBlocked(ctx.db, blocked.client.id, true);
  ctx.onClientsChanged(clientIds);
  for (const clientId of clientIds) {
    await voidCodes(ctx.db, { clientId });
    await revoke(ctx, { clientId }, 'client_blocked');
  }
  await ctx.audit({ type: 'client_blocked', ...madeBy(actor), ...describeTarget(blocked) });
  return blocked;
}

/** Lifts a block made by `blockClient`; false when the client or prefix was not blocked. */
export async function unblockClient(ctx: AppContext, target: string, actor: Actor): Promise<boolean> {
  const blocked = await blockTarget(ctx, target);
  let unblocked: string[] | null; // the clients whose block was lifted; null: nothing was blocked
  if (blocked.kind === 'prefix') unblocked = await deleteClientBlock(ctx.db, blocked.prefix);
  else unblocked = blocked.client.blocked === 1 && (await setClientBlocked(ctx.db, blocked.client.id, false)) ? [blocked.client.id] : null;
  if (unblocked === null) return false;
  ctx.onClientsChanged(unblocked);
  await ctx.audit({ type: 'client_unblocked', ...madeBy(actor), ...describeTarget(blocked) });
  return true;
}

function describeTarget(target: BlockTarget) {
  return target.kind === 'client' ? { clientId: target.client.id } : { detail: { prefix: target.prefix } };
}
