/**
 * `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer` (RFC 7523 §2.1; SPEC §4.11). The
 * assertion's `iss` picks the profile (oauth/assertions): a jwt-bearer client's ID — h's
 * publisher grant tokens, signed with that client's secret, no client authentication; a
 * trusted issuer of profile `id-jag` — an enterprise IdP's identity assertion, presented by
 * the client it names, which authenticates; a trusted issuer of profile `workload` — a
 * platform's token for the client the issuer is configured with.
 *
 * `load` verifies everything about the assertion and changes nothing, so that a request
 * that merely names a client (anyone can write a publisher's client ID into `iss`) spends
 * only its address's budget; `issue` decides the audience and scopes, consumes the
 * assertion (one conditional write: of concurrent presentations exactly one gets on), and
 * writes the grant. A refusal consumes nothing. Every accepted or refused assertion is
 * audited by its issuer, subject and `jti` — never the assertion itself.
 */
import type { AppContext } from '../../context.ts';
import type { Client } from '../../store/schema.ts';
import { findTrustedIssuer } from '../../store/trusted-issuers.ts';
import { InvalidClient, isSwitchedOff, isUuid } from '../client-auth.ts';
import { OAuthError, invalidRequest } from '../../protocol/errors.ts';
import type { DpopProof } from '../dpop.ts';
import { mintTokenResponse, proofBinding, requireProofFor, type TokenResponse } from '../issue.ts';
import { allowedScopes, invalidTarget, requestScopes, requestedAudience, resourceDetail, type Audience } from '../resources.ts';
import { normalizeScopes, parseScope, splitScopes, isIdentityScope } from '../scopes.ts';
import { verifyIdJag } from '../assertions/id-jag.ts';
import { audited, readAssertion, refused, type ReadAssertion, type VerifiedAssertion } from '../assertions/profiles.ts';
import { verifyPublisherToken } from '../assertions/publisher.ts';
import { consumeAssertion } from '../assertions/replay.ts';
import { isLookupSafe } from '../assertions/trusted.ts';
import { verifyWorkload } from '../assertions/workload.ts';
import { defineGrant, notRegisteredFor, type Loaded, type ParamsOf } from './grant.ts';
import { CLIENT_GRANT_TYPES, JWT_BEARER_GRANT_TYPE } from './types.ts';
import { insertingGrant, writeGrant } from './write-grant.ts';

const parameters = {
  assertion: { description: "the JWT: a publisher's grant token, an ID-JAG, or a workload's token (RFC 7523 §2.1)" },
  scope: { description: 'narrows the scopes the assertion would give' },
  resource: { repeatable: true, description: "the resource server (RFC 8707): a workload's or ID-JAG's; a grant token's tokens are for the built-in resource" },
} as const;

type Params = ParamsOf<typeof parameters>;

/** What `issue` goes on with: the verified assertion, and the decoded one for the audit trail. */
interface Redeemed {
  verified: VerifiedAssertion;
  read: ReadAssertion;
}

/** As `unauthorized_client` names it. */
const TITLE = 'jwt-bearer grant';

export const jwtBearer = defineGrant({
  type: JWT_BEARER_GRANT_TYPE,
  // A client of any grant type, as far as the dispatcher goes: the assertion's profile says
  // which (`verify`). A publisher's grant token is only for a jwt-bearer client, refused
  // there as `iss` picks the profile — before its signature is checked, and with the refusal
  // audited; an ID-JAG is for a client its issuer names, a workload's token for the client
  // its issuer is configured with, whatever they are registered for.
  usableBy: CLIENT_GRANT_TYPES,
  title: TITLE,
  parameters,
  client: 'optional',
  redeems: 'assertion',
  load,
  issue,
});

async function load(params: Params, client: Client | null, ctx: AppContext, address: string): Promise<Loaded<Redeemed>> {
  // h's texts (SPEC §4.11): its client shows them as they are.
  if (params.assertion === undefined) throw invalidRequest('Missing assertion.');
  const read = readAssertion(params.assertion);
  try {
    const verified = await verify(read, client, ctx);
    return { clientId: verified.client.id, redeemed: { verified, read } };
  } catch (error) {
    if (error instanceof OAuthError) await auditRefusal(ctx, read, error, address, client);
    throw error;
  }
}

/** Picks the profile by `iss` and verifies the assertion by its rules. */
async function verify(read: ReadAssertion, client: Client | null, ctx: AppContext): Promise<VerifiedAssertion> {
  const iss = read.claims.iss;
  if (typeof iss !== 'string' || iss === '') throw refused("Missing claim 'iss' (issuer) from grant token.");
  const publisher = isUuid(iss) ? await ctx.clients.find(iss) : undefined;
  if (publisher && !isSwitchedOff(publisher)) {
    if (publisher.grant_type !== JWT_BEARER_GRANT_TYPE) throw notRegisteredFor(TITLE);
    return verifyPublisherToken(read, publisher, ctx);
  }
  const trusted = isLookupSafe(iss) ? await findTrustedIssuer(ctx.db, iss) : undefined;
  if (!trusted) throw new InvalidClient('Client authentication failed.', false, "the assertion's iss is neither a jwt-bearer client nor a trusted issuer");
  return trusted.profile === 'id-jag' ? verifyIdJag(read, trusted, client, ctx) : verifyWorkload(read, trusted, ctx);
}

async function issue(
  redeemed: Redeemed,
  params: Params,
  _client: Client | null,
  ctx: AppContext,
  address: string,
  proof: DpopProof | null,
): Promise<TokenResponse> {
  const { verified, read } = redeemed;
  try {
    return await issueFor(verified, params, ctx, address, proof);
  } catch (error) {
    if (error instanceof OAuthError) await auditRefusal(ctx, read, error, address, verified.client);
    throw error;
  }
}

async function issueFor(verified: VerifiedAssertion, params: Params, ctx: AppContext, address: string, proof: DpopProof | null): Promise<TokenResponse> {
  const { client, user } = verified;
  const audience = await audienceOf(verified, params, ctx);
  // Step-up (SPEC §4.12): a resource server that requires a second factor gets a person's
  // tokens only for a login that proved one. An assertion is no login here, and says nothing
  // Gatehouse can hold the issuer to about how the person authenticated there (a publisher's
  // grant token has no such claim; an IdP's amr and acr values are its own vocabulary), so a
  // person's tokens for such a resource server are never issued for an assertion. A workload
  // acts as its client, as client_credentials does, and no person is vouched for.
  if (audience.requireSecondFactor && user !== null) {
    throw refused('the resource server requires a login with a second factor, which an assertion cannot prove', 'step-up resource for an assertion');
  }
  const scopes = scopesOf(verified, params, audience);
  requireProofFor(audience.tokens, proof?.jkt ?? null);
  // Last of all, so that a refused request consumes nothing.
  if (verified.replayId !== null && !(await consumeAssertion(ctx, { issuer: verified.issuer, id: verified.replayId, expiresAt: verified.replayUntil }))) {
    throw refused(verified.profile === 'publisher' ? 'Grant token has already been used.' : 'the assertion has already been used', 'assertion replay');
  }
  // h's grant tokens give a refresh token; an ID-JAG and a workload's token do not (SPEC §4.11).
  const withRefresh = verified.profile === 'publisher';
  const subject = { clientId: client.id, userId: user?.id ?? null, username: user?.username ?? null, login: null };
  // A jwt-bearer client's refresh token counts as a public client's (store/clients.ts `clientConfidential`): bound with it.
  const pair = await mintTokenResponse(ctx, audience.tokens, subject, scopes, { withRefresh, binding: proofBinding(proof, false) });
  const grant = {
    grantType: JWT_BEARER_GRANT_TYPE,
    clientId: client.id,
    userId: subject.userId,
    resourceId: audience.id,
    clientScopes: client.scopes,
    login: null,
    detail: { ...resourceDetail(audience), ...assertionDetail(verified.profile, verified.issuer, verified.subject, verified.jti) },
  };
  if (!(await writeGrant(ctx, grant, pair.stored, ctx.now(), address, insertingGrant(ctx)))) {
    throw refused('the assertion is no longer valid', 'client deleted, blocked or changed, or user disabled, while the request ran');
  }
  return pair.response;
}

/**
 * The tokens' audience: the built-in resource for a grant token (as in h); an ID-JAG's
 * `resource` claim (a `resource` parameter must then agree); a workload's `resource`, else
 * its issuer's configured one. Unknown: `invalid_target`.
 */
async function audienceOf(verified: VerifiedAssertion, params: Params, ctx: AppContext): Promise<Audience> {
  if (verified.profile === 'publisher') {
    const audience = await requestedAudience(ctx, params.resource);
    if (!audience.builtin) throw invalidTarget("a grant token's tokens are for the built-in resource only");
    return audience;
  }
  if (verified.profile === 'id-jag') {
    const claimed = verified.assertedResource;
    if (claimed === null) return requestedAudience(ctx, params.resource);
    const audience = await requestedAudience(ctx, claimed);
    if (params.resource !== undefined && (await requestedAudience(ctx, params.resource)).id !== audience.id) {
      throw invalidTarget('"resource" is not the resource the assertion names');
    }
    return audience;
  }
  return requestedAudience(ctx, params.resource ?? verified.trusted?.resource ?? undefined);
}

/**
 * The scopes: a grant token's are the client's (or `scope`, narrowed), as for any request;
 * a trusted issuer's are the intersection of the requested ones (absent: all), the
 * assertion's own (ID-JAG), the client's on the audience and the issuer's (when it has a
 * list) — none left is `invalid_scope`.
 */
function scopesOf(verified: VerifiedAssertion, params: Params, audience: Audience): string[] {
  const person = verified.user !== null;
  if (verified.profile === 'publisher') return requestScopes(params.scope, verified.client, audience, person);
  let scopes = allowedScopes(verified.client, audience);
  // Identity scopes are never implied, as elsewhere (scopes.ts `grantableScopes`); a workload has no person to name.
  if (params.scope === undefined || !person) scopes = scopes.filter((s) => !isIdentityScope(s));
  const limits = [
    params.scope === undefined ? null : parseScope(params.scope),
    verified.assertedScopes,
    verified.trusted?.scopes == null ? null : splitScopes(verified.trusted.scopes),
  ];
  for (const limit of limits) if (limit !== null) scopes = scopes.filter((s) => limit.includes(s));
  if (scopes.length === 0) throw new OAuthError('invalid_scope', "no scope is left: the requested, asserted, client's and issuer's scopes have none in common");
  return normalizeScopes(scopes);
}

/** The assertion as the audit trail names it: profile, issuer, subject and jti, shortened; never the assertion. */
function assertionDetail(profile: string | null, issuer: unknown, subject: unknown, jti: unknown) {
  return { profile, issuer: audited(issuer), subject: audited(subject), jti: audited(jti) };
}

async function auditRefusal(ctx: AppContext, read: ReadAssertion, error: OAuthError, address: string, client: Client | null): Promise<void> {
  const claims = read.claims as Record<string, unknown>;
  await ctx.audit({
    type: 'assertion_refused',
    clientId: client?.id ?? null,
    address,
    detail: { ...assertionDetail(null, claims.iss, claims.sub ?? claims.email, claims.jti), error: error.error, reason: error.description.slice(0, 200) },
  });
}
