/**
 * h's publisher grant tokens (SPEC §4.11): a publisher's server signs, with HS256 under its
 * jwt-bearer client's secret, a short-lived token saying which of its users to sign in; h's
 * embedded client exchanges it at the token endpoint without any client authentication.
 *
 * The checks run in h's order (h/services/oauth/_jwt_grant_token.py, with PyJWT's own order
 * inside `jwt.decode`: algorithm, signature, iat, nbf, exp, aud; h's `LEEWAY` of 10 s is the
 * one leeway of protocol/received-jwt.ts, whose signature step and time rules these tokens
 * share) and every refusal carries h's description word for word, so that h's client
 * behaves as it does against h. Two
 * things are better than h: a malformed or unknown `sub` is a 400, never a 500, and a token
 * is accepted once (h takes it again until it expires).
 */
import { authority } from '../../config.ts';
import { ConfigError } from '../../config.ts';
import type { AppContext } from '../../context.ts';
import { RECEIVED_JWT_LEEWAY_SECONDS, ReceivedJwtRefused, verifyReceivedJwt } from '../../protocol/received-jwt.ts';
import { readGrantSecret } from './grant-secrets.ts';
import { findUserByUsername } from '../../store/users.ts';
import type { Client, User } from '../../store/schema.ts';
import { InvalidClient } from '../client-auth.ts';
import { assertionHash, audiences, numericDate, refused, type ReadAssertion, type VerifiedAssertion } from './profiles.ts';

/** h's `VerifiedJWTGrantToken.MAX_LIFETIME`: `exp − nbf` at most this. */
const MAX_LIFETIME_SECONDS = 600;

const missing = (claim: string, description: string) => refused(`Missing claim '${claim}' (${description}) from grant token.`);
const invalid = (claim: string, description: string) => refused(`Invalid claim '${claim}' (${description}) in grant token.`);

/** A time claim h requires: missing and malformed each have their own text. */
function requiredTime(read: ReadAssertion, claim: 'exp' | 'nbf', description: string): number {
  const value = numericDate(read.claims, claim);
  if (value === undefined) throw missing(claim, description);
  if (value === null) throw invalid(claim, description);
  return value;
}

/** What a publisher's grant token may name as its audience: h's domain (the host name of PUBLIC_URL), the issuer, or the token endpoint. */
function acceptedAudiences(ctx: AppContext): string[] {
  return [authority(ctx.config), ctx.config.publicUrl, `${ctx.config.publicUrl}/api/token`];
}

/** Verifies a grant token of the jwt-bearer client `client` (its `iss`); throws the OAuthError h would answer. */
export async function verifyPublisherToken(read: ReadAssertion, client: Client, ctx: AppContext): Promise<VerifiedAssertion> {
  const exp = requiredTime(read, 'exp', 'expiry');
  const nbf = requiredTime(read, 'nbf', 'start time');
  if (exp - nbf > MAX_LIFETIME_SECONDS) throw refused('Grant token lifetime is too long.');
  if (read.header.alg !== 'HS256') throw refused('Invalid grant token signature algorithm.', `alg ${String(read.header.alg).slice(0, 20)}`);
  // A sealed secret KEYS_SECRET does not open (a row changed or restored from elsewhere: start-up
  // has opened the signing keys under the same KEYS_SECRET) cannot check anything: as h answers a
  // client without a secret, "Client is invalid.", and the log says why.
  const secret = await readGrantSecret(ctx.db, client.id, ctx.config.keys.secret).catch((error: unknown) => {
    if (error instanceof ConfigError) throw new InvalidClient('Client is invalid.', false, `client ${client.id}: ${error.message}`);
    throw error;
  });
  if (secret === null) throw new InvalidClient('Client is invalid.', false, `no grant secret for client ${client.id}`);
  // The signature step every received JWT takes (protocol/received-jwt.ts); after it, the
  // verifier's own order is h's: iat (a number, not in the future), nbf, exp. The audience
  // and subject are checked here, after them, with h's texts.
  try {
    await verifyReceivedJwt(read.jws, new TextEncoder().encode(secret), { algorithms: ['HS256'], now: ctx.now() });
  } catch (error) {
    if (!(error instanceof ReceivedJwtRefused)) throw error;
    if (error.check === 'malformed' && error.claim === 'iat') throw invalid('iat', 'issue time');
    if (error.check === 'iat') throw refused('Grant token issue time (iat) is in the future.');
    if (error.check === 'nbf') throw refused('Grant token is not yet valid.');
    if (error.check === 'exp') throw refused('Grant token is expired.');
    throw refused('Invalid grant token signature.', error.reason);
  }
  if (read.claims.aud === undefined) throw missing('aud', 'audience');
  const aud = audiences(read.claims);
  const accepted = acceptedAudiences(ctx);
  if (aud === null || !aud.some((a) => accepted.includes(a))) throw invalid('aud', 'audience');
  const sub = read.claims.sub;
  if (sub === undefined || sub === '' || sub === null) throw missing('sub', 'subject');
  const user = typeof sub === 'string' ? await userOfSubject(ctx, sub) : undefined;
  if (!user) throw refused('Grant token subject (sub) could not be found.', 'sub names no enabled user of this authority');
  const jti = typeof read.claims.jti === 'string' && read.claims.jti !== '' ? read.claims.jti : null;
  return {
    profile: 'publisher',
    issuer: client.id,
    client,
    user,
    subject: sub,
    jti,
    replayId: jti ?? assertionHash(read.jws),
    // Kept until the token could no longer pass the expiry check, leeway included.
    replayUntil: (exp + RECEIVED_JWT_LEEWAY_SECONDS) * 1000,
    trusted: null,
    assertedScopes: null,
    assertedResource: null,
  };
}

/** The enabled user a userid (`acct:<username>@<authority>`, SPEC §3) names; undefined for anything else. */
export async function userOfSubject(ctx: AppContext, sub: string): Promise<User | undefined> {
  const match = /^acct:([^@\s\x00-\x1f]{1,200})@([^@\s\x00-\x1f]{1,255})$/.exec(sub);
  if (!match || match[2]!.toLowerCase() !== authority(ctx.config).toLowerCase()) return undefined;
  const user = await findUserByUsername(ctx.db, match[1]!);
  return user && user.disabled === 0 ? user : undefined;
}
