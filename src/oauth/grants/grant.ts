/**
 * What a grant is, for the token endpoint's dispatcher (index.ts): its declared parameters,
 * then two steps the dispatcher runs in order. `load` parses nothing itself: it gets the
 * declared parameters read and typed, finds what the request redeems (a code, a refresh
 * token, an assertion) and says which client that belongs to. The dispatcher holds the
 * request to that client, checks that the client may use the grant (`usableBy`), charges the
 * client's budget and checks its standing; only then does `issue` decide and write. A load
 * that names no client does not type-check.
 */
import type { AppContext } from '../../context.ts';
import type { StoredCredentials } from '../../store/clients.ts';
import type { Client } from '../../store/schema.ts';
import { isConfidential } from '../assertions/client-keys.ts';
import type { DpopProof } from '../dpop.ts';
import type { TokenResponse } from '../issue.ts';
import { OAuthError } from '../../protocol/errors.ts';
import { readParams, repeatable, type RawParams } from '../../protocol/params.ts';
import type { ClientGrantType } from './types.ts';

/** One token request parameter a grant reads (besides `grant_type` and client authentication). */
export type Parameter =
  | {
      /** What it is, for the OpenAPI description. */
      readonly description: string;
      /** A request without it is refused, with every other missing one in the same message. */
      readonly required?: true;
      readonly repeatable?: never;
    }
  | {
      readonly description: string;
      /**
       * Handed to the grant as sent, several values as an array, for the grant to judge:
       * RFC 8707 `resource`, where several are `invalid_target`, not a repeated parameter.
       */
      readonly repeatable: true;
      readonly required?: never;
    };

export type Parameters = Readonly<Record<string, Parameter>>;

/** The declared parameters as `load` and `issue` get them: required ones present, repeats refused unless repeatable, an empty value absent. */
export type ParamsOf<P extends Parameters> = { readonly [K in keyof P]: ValueOf<P[K]> };

type ValueOf<D extends Parameter> = D extends { required: true } ? string : D extends { repeatable: true } ? string | string[] | undefined : string | undefined;

/**
 * What the request must say about its client before the grant looks at it:
 * - `client_id`: at least its `client_id` (RFC 6749 §4.1.3), reported missing together with
 *   the grant's own missing parameters;
 * - `credentials`: client authentication; none at all is `invalid_client`;
 * - `optional`: nothing; what it redeems says whose it is (a public client's refresh token).
 */
export type ClientPresence = 'client_id' | 'credentials' | 'optional';

/** The client the request authenticated or named, as `load` and `issue` get it. */
export type ClientOf<C extends ClientPresence> = C extends 'optional' ? Client | null : Client;

/** What `load` found. */
export interface Loaded<T> {
  /**
   * The client what the request redeems was issued to: the one the dispatcher holds the
   * request to (it must be the client that authenticated or was named, if any), charges and
   * checks before `issue`.
   */
  clientId: string;
  /**
   * That client's credentials as stored, read in the same statement as what the request
   * redeems, by a grant that `loadsClientCredentials`: what a secret checked against the client
   * cache is confirmed by (client-auth.ts `confirmSecret`).
   */
  storedCredentials?: StoredCredentials;
  /**
   * 1 when that client is confidential as stored now, read in the same statement (store/clients.ts
   * `clientConfidential`: a jwt-bearer client's tokens count as a public client's): what it
   * redeems is then good only with the client's secret or key, whatever the client cache's copy
   * says (RFC 6749 §4.1.3, §6; client-auth.ts `requireOwnerAuthentication`).
   */
  clientConfidential?: number;
  /** What `issue` goes on with. */
  redeemed: T;
}

export interface GrantOf<P extends Parameters, C extends ClientPresence, T> {
  /** Its `grant_type` value (types.ts). */
  type: string;
  /**
   * Who may use it: the clients registered for one of these grant types (and, for a grant
   * that takes `credentials`, only confidential ones). The dispatcher refuses any other with
   * `unauthorized_client` "this client is not registered for the ${title}": before `load`
   * when the request named or authenticated its client, else right after `load` — for the
   * client what it redeems belongs to — and in either case before that client is charged
   * (unless it authenticated: a client that proved itself spends its budget on any request).
   */
  usableBy: readonly ClientGrantType[];
  /** The grant as that refusal names it: `authorization_code grant`, `device authorization grant`. */
  title: string;
  /** Its own token request parameters: the only list of them that is read. */
  parameters: P;
  client: C;
  /** What it redeems as refusals name it: `the ${redeems} is invalid`. */
  redeems: string;
  /**
   * Its `load` reads the client's stored credentials with what the request redeems
   * (`Loaded.storedCredentials`): a presented secret is checked against the client cache, and
   * confirmed by that read — a read fewer. Otherwise a secret is checked against the stored
   * row before `load`.
   */
  loadsClientCredentials?: true;
  /** Finds what the request redeems and whose it is; changes nothing (but the audit trail). `address` is the client's, for the audit trail. */
  load(params: ParamsOf<P>, client: ClientOf<C>, ctx: AppContext, address: string): Promise<Loaded<T>>;
  /**
   * Decides and writes, once the client is charged and checked. `address` is the client's, for
   * the audit trail; `proof` the request's verified DPoP proof, if any, whose key the tokens are
   * bound to (SPEC §4.14).
   */
  issue(redeemed: T, params: ParamsOf<P>, client: ClientOf<C>, ctx: AppContext, address: string, proof: DpopProof | null): Promise<TokenResponse>;
}

/** A grant whatever its parameters and what it redeems: what the dispatcher holds. */
export type Grant = GrantOf<Parameters, ClientPresence, unknown>;

/** `unauthorized_client`: the client is not registered for the grant this title names. */
export function notRegisteredFor(title: string): OAuthError {
  return new OAuthError('unauthorized_client', `this client is not registered for the ${title}`);
}

/** Throws `notRegisteredFor` unless the client may use the grant (`usableBy`). */
export function requireRegistered(grant: Grant, client: Client): void {
  const registered = (grant.usableBy as readonly string[]).includes(client.grant_type) && (grant.client !== 'credentials' || isConfidential(client));
  if (!registered) throw notRegisteredFor(grant.title);
}

/** Checks a grant against the contract, with its own parameter and load types, and hands it to the dispatcher. */
export function defineGrant<P extends Parameters, C extends ClientPresence, T>(grant: GrantOf<P, C, T>): Grant {
  return grant;
}

/**
 * Reads the grant's declared parameters (params.ts: repeats refused, empty is absent), and
 * `client_id` along with the required ones when the grant needs the client named and the
 * request neither named nor authenticated one.
 */
export function readGrantParams(grant: Grant, raw: RawParams, client: Client | null): ParamsOf<Parameters> {
  const declared = Object.entries(grant.parameters);
  const required = declared.filter(([, p]) => p.required).map(([name]) => name);
  if (client === null && grant.client === 'client_id') required.push('client_id');
  const optional = declared.filter(([, p]) => !p.required && !p.repeatable).map(([name]) => name);
  const params: Record<string, string | string[] | undefined> = readParams(raw, required, optional);
  for (const [name, p] of declared) if (p.repeatable) params[name] = repeatable(raw, name);
  return params;
}
