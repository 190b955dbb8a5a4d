/**
 * The token endpoint's grants, by `grant_type`: the one list of them. The token route's
 * dispatch and body schema and the metadata's `grant_types_supported` all derive from it.
 * What a grant is: grant.ts.
 */
import type { Client } from '../../store/schema.ts';
import type { AppContext } from '../../context.ts';
import type { Throttle } from '../../throttle.ts';
import { clientAssertionCheck, type ClientAssertionCheck } from '../assertions/client-assertion.ts';
import type { StoredCredentials } from '../../store/clients.ts';
import {
  authenticatedAsConfidential,
  confirmSecret,
  confirmingRefusals,
  identifyClient,
  requireOwnerAuthentication,
  secretRequired,
  type ClientLookup,
} from '../client-auth.ts';
import { requireStanding } from '../client-kinds.ts';
import { OAuthError, invalidGrant, invalidRequest } from '../../protocol/errors.ts';
import { mustProveKey } from '../client-rules.ts';
import { endpointProof, type DpopHeader } from '../dpop.ts';
import { proofRequired, type TokenResponse } from '../issue.ts';
import { single, type RawParams } from '../../protocol/params.ts';
import { authorizationCode } from './authorization-code.ts';
import { clientCredentials } from './client-credentials.ts';
import { deviceCode } from './device-code.ts';
import { readGrantParams, requireRegistered, type Grant } from './grant.ts';
import { jwtBearer } from './jwt-bearer.ts';
import { refreshToken } from './refresh-token.ts';
import { tokenExchange } from './token-exchange.ts';

export type { Grant } from './grant.ts';

export const GRANTS: ReadonlyMap<string, Grant> = grantMap([authorizationCode, refreshToken, clientCredentials, deviceCode, jwtBearer, tokenExchange]);

/** The `grant_type` values the token endpoint accepts (not what a client may be registered for: types.ts `CLIENT_GRANT_TYPES`). */
export const TOKEN_GRANT_TYPES: readonly string[] = [...GRANTS.keys()];

export function grantMap(grants: readonly Grant[]): ReadonlyMap<string, Grant> {
  return new Map(grants.map((grant) => [grant.type, grant]));
}

/** What the dispatcher asks, besides the grants: the budgets, the clients, and whether a client may still obtain tokens. */
export interface Gate {
  throttle: Pick<Throttle, 'tokenRequestFrom' | 'tokenRequestOf'>;
  clients: ClientLookup;
  /**
   * Throws when the client may no longer obtain tokens (client-kinds.ts `requireStanding`); else
   * the client as it stands now (a metadata document's settings as the document says them).
   * `withAssertion`: the request authenticated with a client assertion (a metadata document may
   * ask for one since its row was recorded).
   */
  standing(client: Client, address: string, withAssertion?: boolean): Promise<Client>;
  /** Verifies a `private_key_jwt` client's assertion (assertions/client-assertion.ts); none: assertions are refused. */
  checkAssertion?: ClientAssertionCheck;
}

/** The token endpoint's path; its URL is what a DPoP proof names in `htu`. */
export const TOKEN_PATH = '/api/token';

export interface TokenRequest {
  params: RawParams;
  authorization?: string | undefined;
  /** The request's `DPoP` header. */
  dpop?: DpopHeader;
  /** The client's address: its budget, and the audit trail. */
  address: string;
}

/** `POST /api/token`, with the server's grants and gate. */
export function requestToken(request: TokenRequest, ctx: AppContext): Promise<TokenResponse> {
  const gate: Gate = {
    throttle: ctx.services.throttle,
    clients: ctx.clients,
    standing: (client, address, withAssertion) => requireStanding(ctx, client, address, withAssertion),
    checkAssertion: clientAssertionCheck(ctx, TOKEN_PATH, request.address),
  };
  return dispatchToken(GRANTS, gate, request, ctx);
}

/**
 * Picks the grant, throttles, authenticates the client, and runs the grant's two steps with
 * the client charged and checked between them. Whether the client may use the grant at all
 * (its `usableBy`) is checked once, before `load` for a client the request named or
 * authenticated, else right after it for the client what it redeems belongs to; either way
 * before a client that did not authenticate is charged.
 *
 * Every request counts against its address (TOKEN_REQUESTS_PER_ADDRESS). A client's own
 * budget (TOKEN_REQUESTS_PER_CLIENT) is charged only for requests that prove they come from
 * it: a confidential client's, once its secret is confirmed; a public client's, once the grant
 * has found the code or refresh token it carries and seen it was issued to that client — the
 * request is charged then, whether the grant goes on to succeed or to refuse it (expired,
 * replayed, wrong verifier). A request that merely names a client spends only its address's
 * budget, so nobody can lock a client out by flooding the endpoint with its client_id. Either
 * way the client is charged once, and its standing checked (not blocked; a metadata document
 * that still resolves) before the grant issues anything.
 *
 * A grant whose load reads its client with what it redeems (`loadsClientCredentials`: a code, a
 * device code, a refresh token) has a presented secret checked against the client cache, then
 * confirmed by the client's credentials as stored that load read — one round trip fewer —
 * before the client is charged or anything is decided by what the load found; any refusal
 * before then has the secret confirmed by a read of its own first, and the client charged. So
 * a secret replaced, or a client switched off, is refused at once with `invalid_client` whatever
 * else is wrong, as when the stored row is read before `load`, and spends nothing of its
 * client's budget; a confirmed secret spends it on every request, refused or not. The same
 * read says whether that client is confidential now: if so, a request that did not
 * authenticate as it is refused, whatever the cache's copy says (`requireOwnerAuthentication`).
 */
export async function dispatchToken(grants: ReadonlyMap<string, Grant>, gate: Gate, request: TokenRequest, ctx: AppContext): Promise<TokenResponse> {
  const { params: raw, authorization, address } = request;
  const grantType = single(raw, 'grant_type');
  if (grantType === undefined) throw invalidRequest('the "grant_type" parameter is missing');
  const grant = grants.get(grantType);
  if (!grant) throw new OAuthError('unsupported_grant_type', `supported grant types are ${[...grants.keys()].join(', ')}`);
  await gate.throttle.tokenRequestFrom(address);
  const proof = await endpointProof(ctx, request.dpop, TOKEN_PATH);
  const authentication = await identifyClient(gate.clients, authorization, raw, gate.checkAssertion, { secretByCopy: grant.loadsClientCredentials === true });
  const client = authentication?.client ?? null;
  // A client assertion that got this far was verified (identifyClient).
  const withAssertion = authentication?.withAssertion ?? false;
  const authenticated = client !== null && authenticatedAsConfidential(authentication);
  const unconfirmed = authentication !== null && authentication.unconfirmedSecretHash !== null;
  let standing = authenticated && !unconfirmed ? await admit(gate, client.id, client, address, withAssertion) : undefined;
  /** A secret checked against the client cache: confirmed by `stored` (or a read), and only then its client charged. */
  const confirm = async (stored?: StoredCredentials) => {
    if (!unconfirmed) return;
    await confirmSecret(gate.clients, authentication, stored);
    standing = await admit(gate, authentication.client.id, authentication.client, address);
  };
  const { params, loaded } = await confirmingRefusals(confirm, async () => {
    const params = readGrantParams(grant, raw, client);
    // A missing client_id was reported with the missing parameters; credentials are asked for here.
    if (client === null && grant.client !== 'optional')
      throw grant.client === 'credentials' ? secretRequired() : invalidRequest('the "client_id" parameter is missing');
    if (client !== null) requireRegistered(grant, client);
    return { params, loaded: await grant.load(params, client, ctx, address) };
  });
  // The type says every load names its client; a grant that does not anyway issues nothing.
  if (typeof loaded.clientId !== 'string' || loaded.clientId === '') throw new Error(`the ${grant.type} grant did not say whose client it redeems for`);
  // A load that reads the client with what it redeems says whether that client is confidential: the check below stands on it.
  if (grant.loadsClientCredentials === true && loaded.clientConfidential === undefined)
    throw new Error(`the ${grant.type} grant did not say whether its client is confidential`);
  if (client !== null && loaded.clientId !== client.id) {
    await confirm();
    throw invalidGrant(`the ${grant.redeems} is invalid`, `${grant.redeems} issued to another client`);
  }
  requireOwnerAuthentication(
    client,
    authenticated,
    { client_id: loaded.clientId, client_confidential: loaded.clientConfidential ?? 0 },
    authentication?.usedBasic,
  );
  await confirm(loaded.storedCredentials);
  const owner = client ?? (await gate.clients.find(loaded.clientId));
  if (!authenticated) {
    // Named by what the request redeems (a public client's refresh token, a publisher's grant token): registered for the grant before it is charged.
    if (client === null && owner) requireRegistered(grant, owner);
    standing = await admit(gate, loaded.clientId, owner, address);
  }
  if (standing && mustProveKey(standing) && proof === null) throw proofRequired('this client');
  return grant.issue(loaded.redeemed, params, client, ctx, address, proof);
}

/** Charges the client's budget, throwing `Throttled` beyond it, and checks its standing: the client as it stands. */
async function admit(gate: Gate, clientId: string, client: Client | undefined, address: string, withAssertion = false): Promise<Client | undefined> {
  await gate.throttle.tokenRequestOf(clientId);
  return client && gate.standing(client, address, withAssertion);
}
