/**
 * `private_key_jwt` (SPEC §4.11; RFC 7523 §2.2, §3; OIDC Core §9): a client proves who it is
 * with a JWS signed by one of its registered keys instead of a secret. The checks, in order:
 * a JWS signed with RS256, PS256, ES256 or EdDSA (never HS*, never `none` — the algorithm is
 * checked before any key is looked at, so a client's public key cannot be used as an HMAC
 * secret) by one of the client's keys; `iss` and `sub` its client ID; `aud` the issuer or the
 * URL of the endpoint called (a string, or an array holding one of them); `exp` present and
 * at most 300 s away; `iat` and `nbf`, when sent, not in the future; `jti` present — all by
 * the one verifier of received JWTs (protocol/received-jwt.ts, with its one leeway); then
 * `jti` usable; and last, the `jti` consumed (replay.ts), so that a refused assertion
 * consumes nothing and an accepted one is never accepted again.
 *
 * Every failure is the same `401 invalid_client` for the client; the log-only detail names
 * the check, never the assertion.
 */
import { createLocalJWKSet, decodeJwt, type JSONWebKeySet, type JWTVerifyGetKey } from 'jose';
import type { AppContext } from '../../context.ts';
import { RECEIVED_JWT_LEEWAY_SECONDS, ReceivedJwtRefused, verifyReceivedJwt } from '../../protocol/received-jwt.ts';
import type { Client } from '../../store/schema.ts';
import { Throttled } from '../../throttle.ts';
import { consumeAssertion } from './replay.ts';
import { ASSERTION_ALGS, RemoteKeysUnavailable } from './remote-keys.ts';
import { FAPI2 } from '../client-rules.ts';

export const CLIENT_ASSERTION_TYPE = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer';
/** The longest a client assertion may be valid for, counted from now (SPEC §4.11). */
export const MAX_CLIENT_ASSERTION_SECONDS = 300;
/** Longer assertions are refused unread: a JWS with a few claims is well under this. */
export const MAX_CLIENT_ASSERTION_LENGTH = 8192;
const MAX_JTI_LENGTH = 256;

/** Verifies a client's assertion; throws ClientAssertionRefused (or Throttled, when the client's document cannot be had now). */
export type ClientAssertionCheck = (client: Client, assertion: string) => Promise<void>;

/** Why an assertion was refused: the detail names the check, for the log only. */
export class ClientAssertionRefused extends Error {
  override name = 'ClientAssertionRefused';
  readonly detail: string;
  constructor(detail: string) {
    super(detail);
    this.detail = detail;
  }
}

/**
 * The client ID an assertion claims to come from (its `iss`, which must equal its `sub`),
 * read without verifying it: only to look the client up, whose keys then verify it. Null
 * when the assertion is not a JWT or the two differ.
 */
export function assertedClientId(assertion: string): string | null {
  if (assertion.length > MAX_CLIENT_ASSERTION_LENGTH) return null;
  try {
    const { iss, sub } = decodeJwt(assertion);
    return typeof iss === 'string' && iss !== '' && iss === sub ? iss : null;
  } catch {
    return null;
  }
}

/** The keys of `client`: inline, or at its `jwks_uri` (a metadata-document client's: as its document says now). */
async function keysOf(ctx: AppContext, client: Client, address: string): Promise<JWTVerifyGetKey> {
  let { jwks, jwks_uri: jwksUri } = client;
  if (client.kind === 'metadata_document') {
    const resolution = await ctx.clientMetadata.resolve(client.id, { address, lastGoodCopy: true });
    if (!resolution.ok && resolution.unavailable) throw new Throttled(resolution.unavailable.retryAfterMs, 503);
    if (!resolution.ok) throw new ClientAssertionRefused(`the client's metadata document was refused: ${resolution.reason}`);
    jwks = resolution.client.jwks;
    jwksUri = resolution.client.jwksUri;
  }
  if (jwks !== null) return createLocalJWKSet(JSON.parse(jwks) as JSONWebKeySet);
  if (jwksUri !== null) return ctx.remoteKeys.keySet(jwksUri, { allowPrivateAddress: false }).getKey;
  throw new ClientAssertionRefused('the client has no registered keys');
}

/**
 * The check for the endpoint at `path` (`/api/token`, `/oauth/revoke`, …): its URL and the
 * issuer are the audiences accepted — for a client held to the FAPI 2.0 profile, the issuer
 * alone (FAPI 2.0 Security Profile §5.3.2.1).
 */
export function clientAssertionCheck(ctx: AppContext, path: string, address: string): ClientAssertionCheck {
  const issuer = ctx.config.publicUrl;
  const audience = [issuer, `${issuer}${path}`];
  return async (client, assertion) => {
    if (assertion.length > MAX_CLIENT_ASSERTION_LENGTH) throw new ClientAssertionRefused('the client assertion is too long');
    const keys = await keysOf(ctx, client, address);
    let payload;
    try {
      ({ payload } = await verifyReceivedJwt(assertion, keys, {
        algorithms: ASSERTION_ALGS,
        issuer: client.id,
        subject: client.id,
        ...(client.profile === FAPI2 ? { audience: [issuer], exactAudience: true } : { audience }),
        requiredClaims: ['exp', 'jti'],
        maxExpiresInSeconds: MAX_CLIENT_ASSERTION_SECONDS,
        now: ctx.now(),
      }));
    } catch (error) {
      if (error instanceof RemoteKeysUnavailable) throw new ClientAssertionRefused(error.reason);
      if (error instanceof ReceivedJwtRefused) throw new ClientAssertionRefused(`the client assertion was refused (${error.message})`);
      throw error;
    }
    const exp = payload.exp!;
    const { jti } = payload;
    if (typeof jti !== 'string' || jti === '' || jti.length > MAX_JTI_LENGTH) throw new ClientAssertionRefused('the client assertion has no usable jti');
    const fresh = await consumeAssertion(ctx, { issuer: client.id, id: jti, expiresAt: (exp + RECEIVED_JWT_LEEWAY_SECONDS) * 1000 });
    if (!fresh) throw new ClientAssertionRefused('the client assertion was used before (its jti was consumed)');
  };
}
