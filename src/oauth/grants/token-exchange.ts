/**
 * `grant_type=urn:ietf:params:oauth:grant-type:token-exchange` (RFC 8693; SPEC §4.15), for
 * confidential clients, in three forms:
 * - **Delegation** (`requested_token_type` access_token, the default), for a client an
 *   administrator allowed (`--token-exchange`): the person's access token it holds becomes a
 *   narrower one that says who acts for the person (`act`). Never broader than the subject
 *   token — the same resource server, at most its scopes, at most its remaining life — and it
 *   belongs to the subject token's grant, so revoking the grant, the client or the person ends
 *   it with the rest. No refresh token.
 * - **An ID-JAG** (`requested_token_type` id-jag) for an authorization server the administrator
 *   listed for this client (`--id-jag-audience`): the person the client's ID token or access
 *   token speaks for, vouched for to that server (identity/id-jags.ts).
 * - **The person's provider token** (`audience` a connection's id): a resource server the
 *   administrator allowed for a connection that keeps the provider's tokens (`--keep-tokens
 *   --token-resource`) hands in a person's access token it was sent and gets the token the
 *   provider gave at the person's last login there (accounts/connections/kept-tokens.ts).
 *
 * Bad or unacceptable subject and actor tokens are `invalid_request` (RFC 8693 §2.2.2), an
 * audience or resource this client may not have `invalid_target`. A refusal changes nothing.
 */
import type { AppContext } from '../../context.ts';
import { accountUri } from '../../config.ts';
import { loginOf } from '../../login.ts';
import type { Client, Connection, User } from '../../store/schema.ts';
import { findConnection, isConnectionId, tokenResourcesOf } from '../../store/connections.ts';
import { findResourceOfClient } from '../../store/resources.ts';
import { findUserById } from '../../store/users.ts';
import { hasLiveGrant } from '../../store/grants.ts';
import { isSessionLive } from '../../store/sessions.ts';
import { addAccessToken } from '../../store/atomic-writes.ts';
import type { AccessTokenInfo } from '../../store/tokens.ts';
import { readIdToken } from '../../identity/id-tokens.ts';
import { idJagAudiencesOf, signIdJag, ID_JAG_LIFETIME_SECONDS, type IdJagAudience } from '../../identity/id-jags.ts';
import type { Actor } from '../../identity/jwt-access-tokens.ts';
import { OAuthError, invalidGrant, invalidRequest, invalidScope } from '../../protocol/errors.ts';
import { userOfSubject } from '../assertions/publisher.ts';
import type { DpopProof } from '../dpop.ts';
import { findPresentedAccessToken } from '../introspection.ts';
import { mintTokenResponse, proofBinding, scopesStillAllowed, secondsUntil, type TokenResponse } from '../issue.ts';
import {
  audienceById,
  checkSameAudience,
  invalidTarget,
  issuerKey,
  lacksRequiredSecondFactor,
  normalizeResourceUri,
  resourceDetail,
  type Audience,
} from '../resources.ts';
import { joinScopes, parseScope, quoted, scopesBeyond, splitScopes } from '../scopes.ts';
import { defineGrant, type Loaded, type ParamsOf } from './grant.ts';
import { ACCESS_TOKEN_URN, CLIENT_GRANT_TYPES, ID_JAG_URN, ID_TOKEN_URN, TOKEN_EXCHANGE_GRANT_TYPE } from './types.ts';

const parameters = {
  subject_token: {
    required: true,
    description: "the token exchanged: a person's access token this client holds (for an ID-JAG, also an ID token issued to it)",
  },
  subject_token_type: { required: true, description: `${ACCESS_TOKEN_URN}, or for an ID-JAG ${ID_TOKEN_URN}` },
  actor_token: { description: "the client's own client_credentials access token: the party that acts (RFC 8693 §1.1)" },
  actor_token_type: { description: `${ACCESS_TOKEN_URN}, with actor_token` },
  requested_token_type: { description: `${ACCESS_TOKEN_URN} (the default) or ${ID_JAG_URN}` },
  resource: {
    repeatable: true,
    description: "the resource server of the new token: the subject token's (RFC 8707); for an ID-JAG, the resource at its audience",
  },
  audience: {
    repeatable: true,
    description: "the resource server's URI; for an ID-JAG, the authorization server's issuer; for a provider token, the connection's id (RFC 8693 §2.1)",
  },
  scope: { description: "at most the subject token's scopes (an ID-JAG's: what to ask its audience for)" },
} as const;

type Params = ParamsOf<typeof parameters>;

/** A delegation: the person's token, and who acts for them now. */
interface Delegation {
  kind: 'delegation';
  subject: AccessTokenInfo;
  act: Actor;
}

/** An ID-JAG: for whom, and for which server. */
interface IdJagRequest {
  kind: 'id-jag';
  person: User;
  /** The key an access token given as the subject is bound to (DPoP), which the request must prove; null otherwise. */
  boundTo: string | null;
  audience: IdJagAudience;
}

/** A resource server asking for the person's provider token at a connection that keeps it. */
interface ProviderTokenRequest {
  kind: 'provider';
  connection: Connection;
  resourceUri: string;
  userId: string;
}

type Exchange = Delegation | IdJagRequest | ProviderTokenRequest;

export const tokenExchange = defineGrant({
  type: TOKEN_EXCHANGE_GRANT_TYPE,
  // Any confidential client may be allowed to (`--token-exchange`, `--id-jag-audience`): `load` checks that it was.
  usableBy: CLIENT_GRANT_TYPES,
  title: 'token exchange grant',
  parameters,
  client: 'credentials',
  redeems: 'subject_token',
  load,
  issue,
});

const invalidSubject = (detail: string) => invalidRequest('the subject_token is invalid, expired or revoked', detail);

async function load(params: Params, client: Client, ctx: AppContext): Promise<Loaded<Exchange>> {
  const requested = params.requested_token_type ?? ACCESS_TOKEN_URN;
  if (requested === ID_JAG_URN) return { clientId: client.id, redeemed: await loadIdJag(params, client, ctx) };
  if (requested !== ACCESS_TOKEN_URN) throw invalidRequest(`"requested_token_type" must be ${ACCESS_TOKEN_URN} or ${ID_JAG_URN}`);
  // A connection's id where a resource server's URI would be (SPEC §4.15): the provider's token it keeps.
  const audience = oneTarget('audience', params.audience);
  if (audience !== undefined && isConnectionId(audience)) return { clientId: client.id, redeemed: await loadProviderToken(params, client, ctx, audience) };
  if (client.token_exchange !== 1) {
    throw new OAuthError('unauthorized_client', 'this client may not exchange tokens: an administrator allows it with --token-exchange');
  }
  if (params.subject_token_type !== ACCESS_TOKEN_URN) throw invalidRequest(`"subject_token_type" must be ${ACCESS_TOKEN_URN}`);
  const subject = await personsTokenOf(ctx, client, params.subject_token);
  await requireOwnActorToken(ctx, client, params);
  const previous = subject.act === null ? null : (JSON.parse(subject.act) as Actor);
  if (previous !== null && depthOf(previous) >= MAX_ACTORS) {
    throw invalidRequest(`a token may be exchanged at most ${MAX_ACTORS} times over: this one has been already`);
  }
  return { clientId: client.id, redeemed: { kind: 'delegation', subject, act: { sub: client.id, ...(previous === null ? {} : { act: previous }) } } };
}

/** The most actors an `act` chain names: each exchange of an exchanged token adds one, written whole into the token, its row and its event. */
const MAX_ACTORS = 5;

function depthOf(act: Actor): number {
  return act.act === undefined ? 1 : 1 + depthOf(act.act);
}

/** The live access token `token`, issued to this client for a person; anything else is `invalid_request`. */
function personsTokenOf(ctx: AppContext, client: Client, token: string): Promise<AccessTokenInfo & { user_id: string }> {
  return livePersonsToken(ctx, token, (info) => info.client_id === client.id, "another client's token");
}

/**
 * The live access token `token` of a person, when `isTheirs` says the requesting client may
 * exchange it. One it may not is refused like an unknown one (`refusal` only in the log): whoever
 * holds it learns nothing.
 */
async function livePersonsToken(
  ctx: AppContext,
  token: string,
  isTheirs: (info: AccessTokenInfo) => boolean,
  refusal: string,
): Promise<AccessTokenInfo & { user_id: string }> {
  const found = await findPresentedAccessToken(ctx, token, ctx.now());
  if (!found || !isTheirs(found.info)) throw invalidSubject(found ? refusal : 'unknown, expired or revoked token');
  const { info } = found;
  if (info.user_id === null) throw invalidRequest("the subject_token must be a person's access token, not a client's own");
  return { ...info, user_id: info.user_id };
}

/** The actor token, when sent: this client's own live client_credentials token (it says no more than the client's authentication, and no less). */
async function requireOwnActorToken(ctx: AppContext, client: Client, params: Params): Promise<void> {
  if (params.actor_token === undefined) {
    if (params.actor_token_type !== undefined) throw invalidRequest('"actor_token_type" was sent without "actor_token"');
    return;
  }
  if (params.actor_token_type !== ACCESS_TOKEN_URN) throw invalidRequest(`"actor_token_type" must be ${ACCESS_TOKEN_URN}`);
  const actor = await findPresentedAccessToken(ctx, params.actor_token, ctx.now());
  if (!actor || actor.info.client_id !== client.id || actor.info.user_id !== null) {
    throw invalidRequest(
      "the actor_token must be this client's own live client_credentials access token",
      actor ? "another party's actor token" : 'unknown actor token',
    );
  }
}

/** The one value of a parameter that may be repeated on the wire (`resource`, `audience`): several are `invalid_target`. */
function oneTarget(name: string, value: string | string[] | undefined): string | undefined {
  if (Array.isArray(value)) throw invalidTarget(`only one "${name}" may be requested`);
  return value;
}

/**
 * The vault (SPEC §4.15): a resource server an administrator allowed for the connection
 * (`--token-resource`), authenticated as its own client, presents a person's access token it
 * was sent — one for itself — and gets the person's provider token.
 */
async function loadProviderToken(params: Params, client: Client, ctx: AppContext, connectionId: string): Promise<ProviderTokenRequest> {
  // The resource server first: no other client learns which connections keep tokens.
  const resource = await findResourceOfClient(ctx.db, client.id);
  if (!resource || resource.uri === null) {
    throw new OAuthError('unauthorized_client', "only a resource server's own client may exchange a person's token for their provider token");
  }
  const connection = await findConnection(ctx.db, connectionId);
  // Tokens are kept only sealed under KEYS_SECRET (accounts/connections/kept-tokens.ts): without it, none are.
  const keeps = connection?.keep_tokens === 1 && connection.enabled === 1 && ctx.config.keys.secret !== null;
  if (!connection || !keeps) throw invalidTarget('no connection keeps provider tokens under that audience');
  if (!tokenResourcesOf(connection).some((allowed) => allowed.id === resource.id)) {
    throw invalidTarget("this resource server may not have that connection's provider tokens: an administrator allows it with --token-resource");
  }
  if (params.subject_token_type !== ACCESS_TOKEN_URN) throw invalidRequest(`"subject_token_type" must be ${ACCESS_TOKEN_URN}`);
  // Only a token the person sent this resource server: one for another audience is not its to exchange.
  const subject = await livePersonsToken(ctx, params.subject_token, (info) => info.resource_id === resource.id, 'a token for another resource server');
  return { kind: 'provider', connection, resourceUri: resource.uri, userId: subject.user_id };
}

async function loadIdJag(params: Params, client: Client, ctx: AppContext): Promise<IdJagRequest> {
  const issuer = oneTarget('audience', params.audience);
  if (issuer === undefined) throw invalidRequest('"audience" must name the authorization server the ID-JAG is for, by its issuer');
  const audience = idJagAudiencesOf(client).find((listed) => issuerKey(listed.issuer) === issuerKey(issuer));
  if (!audience) throw invalidTarget('this client may not get ID-JAGs for that audience: an administrator lists them with --id-jag-audience');
  return { kind: 'id-jag', ...(await idJagSubject(ctx, client, params)), audience };
}

/**
 * The person an ID-JAG speaks for: the one the client's current ID token (what MCP clients
 * send, SEP-990) or live access token names, still enabled and still with a live grant of this
 * client — a person who revoked the client's access is not vouched for again — and, for an ID
 * token, still in the login session it names (a person who logged out is not either).
 */
async function idJagSubject(ctx: AppContext, client: Client, params: Params): Promise<Pick<IdJagRequest, 'person' | 'boundTo'>> {
  const now = ctx.now();
  if (params.subject_token_type === ACCESS_TOKEN_URN) {
    const token = await personsTokenOf(ctx, client, params.subject_token);
    const user = await findUserById(ctx.db, token.user_id);
    // A live token's person was enabled when it was read (store/tokens.ts `liveToken`); disabled or deleted since, they are vouched for no more.
    if (!user || user.disabled !== 0) throw invalidSubject('person disabled or deleted meanwhile');
    return { person: user, boundTo: token.dpop_jkt };
  }
  if (params.subject_token_type !== ID_TOKEN_URN) throw invalidRequest(`"subject_token_type" must be ${ID_TOKEN_URN} or ${ACCESS_TOKEN_URN}`);
  const idToken = await readIdToken(ctx, params.subject_token, { acceptExpired: false });
  if (idToken === null || idToken.clientId !== client.id) throw invalidSubject(idToken ? "another client's ID token" : 'not a current ID token of ours');
  const user = await userOfSubject(ctx, idToken.sub);
  if (!user || !(await hasLiveGrant(ctx.db, { clientId: client.id, userId: user.id, now }))) {
    throw invalidSubject(user ? 'no live grant of the client for the person' : 'unknown or disabled person');
  }
  // The login it tells of has ended (logged out, every session ended): nobody is there to vouch for.
  if (idToken.sid !== null && !(await isSessionLive(ctx.db, { userId: user.id, sid: idToken.sid, now }))) throw invalidSubject('the login session ended');
  return { person: user, boundTo: null };
}

async function issue(redeemed: Exchange, params: Params, client: Client, ctx: AppContext, address: string, proof: DpopProof | null): Promise<TokenResponse> {
  switch (redeemed.kind) {
    case 'id-jag':
      requireSubjectKey(redeemed.boundTo, proof);
      return issueIdJag(redeemed, params, client, ctx, address);
    case 'provider':
      return handOverProviderToken(redeemed, client, ctx, address);
    case 'delegation':
      return delegate(redeemed, params, client, ctx, address, proof);
  }
}

async function handOverProviderToken(request: ProviderTokenRequest, client: Client, ctx: AppContext, address: string): Promise<TokenResponse> {
  const { connection, resourceUri, userId } = request;
  const tokens = await ctx.providerTokens.current(connection, userId);
  if (tokens === 'none_kept') throw invalidGrant(`no ${connection.name} token is kept for this person: they log in with ${connection.name} first`);
  if (tokens === 'refresh_failed') {
    throw invalidGrant(`the person's ${connection.name} token has expired and could not be renewed: they log in with ${connection.name} again`);
  }
  await ctx.audit({ type: 'provider_token_issued', userId, clientId: client.id, address, detail: { connection: connection.id, resource: resourceUri } });
  return {
    issued_token_type: ACCESS_TOKEN_URN,
    access_token: tokens.access_token,
    token_type: 'Bearer',
    ...(tokens.expires_at === null ? {} : { expires_in: secondsUntil(tokens.expires_at, ctx.now()) }),
    ...(tokens.scope === null ? {} : { scope: tokens.scope }),
  };
}

/**
 * A subject token bound to a key is exchanged only by whoever holds the key (RFC 9449 §7): the
 * request's proof must be by it. (A resource server asking for a provider token cannot prove the
 * client's key, and need not: it authenticates as itself, and the token was sent to it.)
 */
function requireSubjectKey(boundTo: string | null, proof: DpopProof | null): void {
  if (boundTo !== null && proof?.jkt !== boundTo) {
    throw new OAuthError('invalid_dpop_proof', 'the subject_token is bound to a DPoP key: prove that key', 'exchange without the subject key');
  }
}

/** Throws `invalid_target` unless each of `resource` and `audience`, when sent, names the subject token's resource server. */
async function requireSameAudience(ctx: AppContext, params: Params, audience: Audience): Promise<void> {
  for (const name of ['resource', 'audience'] as const) {
    const refusal = `an exchange keeps the subject_token's audience: "${name}" must be ${audience.uri}`;
    await checkSameAudience(ctx, oneTarget(name, params[name]), audience.id, refusal);
  }
}

async function delegate(
  exchange: Delegation,
  params: Params,
  client: Client,
  ctx: AppContext,
  address: string,
  proof: DpopProof | null,
): Promise<TokenResponse> {
  const { subject, act } = exchange;
  // Its lifetime bounds the new token's, in whole seconds: with less than one left, that token would be born expired.
  if (secondsUntil(subject.expires_at, ctx.now()) === 0) throw invalidSubject('expires within the second');
  requireSubjectKey(subject.dpop_jkt, proof);
  const audience = await audienceById(ctx, subject.resource_id);
  await requireSameAudience(ctx, params, audience);
  const login = loginOf(subject);
  // Step-up (SPEC §4.12): the subject's grant must have been approved as its resource server now asks.
  if (lacksRequiredSecondFactor({ require_second_factor: audience.requireSecondFactor ? 1 : 0 }, login)) {
    throw invalidGrant(
      'the resource server requires a login with a second factor, and this grant was approved without: ask the person again',
      'grant approved without a second factor',
    );
  }
  const held = splitScopes(subject.scopes);
  const requested = params.scope === undefined ? held : parseScope(params.scope);
  const wider = scopesBeyond(requested, held);
  if (wider.length > 0) throw invalidScope(`an exchange cannot widen the subject_token's scopes: ${quoted(wider)}`);
  const scopes = scopesStillAllowed(requested, client);
  if (scopes.length === 0) throw invalidScope('the scopes asked for are no longer allowed to this client');
  const person = { clientId: client.id, userId: subject.user_id, username: subject.username, login };
  const pair = await mintTokenResponse(ctx, audience.tokens, person, scopes, {
    withRefresh: false,
    binding: proofBinding(proof, true),
    exchange: { act, notAfter: subject.expires_at },
  });
  const issued = ctx.audit.pending({
    type: 'token_issued',
    userId: subject.user_id,
    clientId: client.id,
    address,
    detail: {
      grant_type: TOKEN_EXCHANGE_GRANT_TYPE,
      grant_id: subject.grant_id,
      scope: pair.stored.scopes,
      act: pair.stored.act!,
      ...resourceDetail(audience),
    },
  });
  const grant = { grantId: subject.grant_id, clientScopes: client.scopes };
  // Revoked (its grant, client or person) since it was read: nothing is stored.
  if (!(await addAccessToken(ctx.db, grant, pair.stored, ctx.now(), issued.row))) throw invalidSubject('grant revoked while the exchange ran');
  issued.committed();
  return { ...pair.response, issued_token_type: ACCESS_TOKEN_URN };
}

async function issueIdJag(request: IdJagRequest, params: Params, client: Client, ctx: AppContext, address: string): Promise<TokenResponse> {
  const asked = oneTarget('resource', params.resource);
  const normalized = asked === undefined ? null : normalizeResourceUri(asked);
  if (normalized !== null && !('uri' in normalized)) throw invalidTarget('"resource" must be an absolute https URL');
  const resource = normalized?.uri ?? null;
  const scope = params.scope === undefined ? null : joinScopes(parseScope(params.scope));
  const now = ctx.now();
  const { audience, person } = request;
  const clientId = audience.client_id ?? client.id;
  // The e-mail address only once verified: the audience may know the person by it (SPEC §4.11 `--subject-claim email`).
  const email = person.email_verified === 1 ? person.email : null;
  const idJag = await signIdJag(ctx, { sub: accountUri(person.username, ctx.config), email, aud: audience.issuer, clientId, resource, scope }, now);
  await ctx.audit({
    type: 'id_jag_issued',
    userId: person.id,
    clientId: client.id,
    address,
    detail: { audience: audience.issuer, client_id_there: clientId, ...(resource === null ? {} : { resource }), ...(scope === null ? {} : { scope }) },
  });
  // RFC 8693 §2.2.1: not an access token, so token_type N_A.
  return {
    issued_token_type: ID_JAG_URN,
    access_token: idJag,
    token_type: 'N_A',
    expires_in: ID_JAG_LIFETIME_SECONDS,
    ...(scope === null ? {} : { scope }),
  };
}
