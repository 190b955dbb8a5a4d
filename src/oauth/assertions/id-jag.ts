/**
 * Identity assertions (ID-JAG, draft-ietf-oauth-identity-assertion-authz-grant; MCP's
 * enterprise-managed authorization; SPEC §4.11). A client the enterprise's IdP has issued an
 * ID-JAG to presents it here with its own authentication: the IdP vouches for the person, the
 * client proves it is the one the IdP issued it to (`client_id`), and the tokens go to it for
 * the resource the assertion names, without a consent page (the enterprise's policy is the
 * consent) and without a refresh token (the IdP decides again next time).
 */
import type { AppContext } from '../../context.ts';
import type { Client, TrustedIssuer, User } from '../../store/schema.ts';
import { findUserByEmail, findUserByUsername } from '../../store/users.ts';
import { secretRequired } from '../client-auth.ts';
import { OAuthError } from '../../protocol/errors.ts';
import { RECEIVED_JWT_LEEWAY_SECONDS } from '../../protocol/received-jwt.ts';
import { parseScope } from '../scopes.ts';
import { isConfidential } from './client-keys.ts';
import { userOfSubject } from './publisher.ts';
import { ID_JAG_LIFETIME_SECONDS, ID_JAG_TYPE } from '../../identity/id-jags.ts';
import { refused, type ReadAssertion, type VerifiedAssertion } from './profiles.ts';
import { isLookupSafe, stringClaim, verifyIssuerAssertion } from './trusted.ts';

export async function verifyIdJag(read: ReadAssertion, trusted: TrustedIssuer, client: Client | null, ctx: AppContext): Promise<VerifiedAssertion> {
  // The client first: an ID-JAG is only good in the hands of the client it was issued to.
  if (client === null || !isConfidential(client)) throw secretRequired();
  const named = JSON.parse(trusted.clients) as string[];
  if (named.length > 0 && !named.includes(client.id)) {
    throw new OAuthError(
      'unauthorized_client',
      "this client may not present this issuer's identity assertions",
      `client ${client.id} not named for ${trusted.issuer}`,
    );
  }
  // Exactly this issuer (SPEC §4.11): an assertion also meant for others could be presented there too.
  const claims: Record<string, unknown> = await verifyIssuerAssertion(
    read,
    trusted,
    ctx,
    { typ: ID_JAG_TYPE, audience: [ctx.config.publicUrl], exactAudience: true, requiredClaims: ['jti'], maxLifetimeSeconds: ID_JAG_LIFETIME_SECONDS },
    {
      typ: `the assertion's type (typ) must be ${ID_JAG_TYPE}`,
      aud: "the assertion's audience (aud) must be this authorization server's issuer",
      lifetime: `the assertion's lifetime (exp - iat) is longer than ${ID_JAG_LIFETIME_SECONDS} seconds`,
    },
  );
  if (claims.client_id !== client.id) throw refused("the assertion's client_id is not the authenticated client");
  const exp = claims.exp as number;
  const jti = stringClaim(claims, 'jti');
  if (jti === undefined) throw refused('the assertion has no jti');
  const subject = stringClaim(claims, trusted.subject_claim);
  if (subject === undefined) throw refused(`the assertion has no ${trusted.subject_claim}`);
  const user = await subjectUser(ctx, trusted, subject);
  const scope = claims.scope;
  if (scope !== undefined && typeof scope !== 'string') throw refused("the assertion's scope is not a string");
  const resource = claims.resource;
  if (resource !== undefined && typeof resource !== 'string') throw invalidTargetClaim();
  return {
    profile: 'id-jag',
    issuer: trusted.issuer,
    client,
    user,
    subject: stringClaim(claims, 'sub') ?? subject,
    jti,
    replayId: jti,
    replayUntil: (exp + RECEIVED_JWT_LEEWAY_SECONDS) * 1000,
    trusted,
    assertedScopes: scope === undefined ? null : parseScope(scope),
    assertedResource: resource ?? null,
  };
}

const invalidTargetClaim = () => new OAuthError('invalid_target', "the assertion's resource is not one resource URI");

/**
 * The enabled user the subject names: by `sub`, their userid (`acct:…`) or username; by
 * `email`, their e-mail address, which an administrator must have marked verified.
 */
async function subjectUser(ctx: AppContext, trusted: TrustedIssuer, subject: string): Promise<User> {
  let user: User | undefined;
  if (isLookupSafe(subject)) {
    if (trusted.subject_claim === 'email') {
      user = await findUserByEmail(ctx.db, subject);
      if (user && user.email_verified !== 1) throw refused("the user's e-mail address is not verified", 'email subject of an unverified address');
    } else {
      user = subject.startsWith('acct:') ? await userOfSubject(ctx, subject) : await findUserByUsername(ctx.db, subject);
    }
  }
  if (!user || user.disabled !== 0) throw refused("the assertion's subject is not a user of this server", 'unknown or disabled subject');
  return user;
}
