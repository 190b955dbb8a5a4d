/**
 * Trusted issuers (SPEC §2 `gatehouse issuer`, §3, §4.5 `/admin/issuers`): the external
 * issuers whose signed assertions the jwt-bearer grant accepts. The CLI and the admin page
 * call these same functions, which validate, store and audit (`issuer_created`,
 * `issuer_deleted`, by the given actor).
 */
import type { AppContext } from '../../context.ts';
import { madeBy, type Actor } from '../../audit.ts';
import { InputError, cut } from '../../input-error.ts';
import { lookupClient } from '../../oauth/client-auth.ts';
import type { PageCursor, Page } from '../../store/clients.ts';
import type { TrustedIssuer, TrustedIssuerProfile } from '../../store/schema.ts';
import { deleteTrustedIssuer, insertTrustedIssuer, listTrustedIssuers } from '../../store/trusted-issuers.ts';
import { requestedAudience, unknownScopesProblem } from '../resources.ts';
import { isScopeToken, joinScopes, quoted } from '../scopes.ts';
import { OAuthError } from '../../protocol/errors.ts';
import { isLookupSafe } from './trusted.ts';

export const ISSUER_PROFILES: readonly TrustedIssuerProfile[] = ['id-jag', 'workload'];
export const SUBJECT_CLAIMS = ['sub', 'email'] as const;

/** A problem with what was asked for, naming the field at fault. */
export class IssuerInputError extends InputError {
  override name = 'IssuerInputError';
}

export interface IssuerInput {
  issuer: string;
  profile: string;
  jwksUri?: string | null;
  allowPrivateAddress?: boolean;
  subjectClaim?: string;
  subject?: string | null;
  clients?: readonly string[];
  /** Space-separated; empty or absent: no restriction of the issuer's own. */
  scope?: string | null;
  resource?: string | null;
}

/** What may be shown of an issuer: everything (it holds no secret). */
export function describeIssuer(row: TrustedIssuer) {
  return {
    issuer: row.issuer,
    profile: row.profile,
    jwks_uri: row.jwks_uri,
    allow_private_address: row.allow_private_address === 1,
    subject_claim: row.subject_claim,
    subject: row.subject,
    clients: JSON.parse(row.clients) as string[],
    scopes: row.scopes === null ? null : row.scopes.split(' '),
    resource: row.resource,
    created_at: row.created_at,
  };
}

/** Why `url` cannot be an issuer URL or a `jwks_uri`: an absolute https URL without a fragment or credentials. */
function httpsUrlProblem(url: string): string | null {
  if (url.length > 2000 || !isLookupSafe(url) || !URL.canParse(url)) return 'must be an absolute https URL';
  const parsed = new URL(url);
  if (parsed.protocol !== 'https:') return 'must be an https URL';
  if (url.includes('#') || parsed.username !== '' || parsed.password !== '') return 'must have no fragment and no credentials';
  return null;
}

/** Validates and stores a trusted issuer, and records who did. */
export async function createIssuer(ctx: AppContext, input: IssuerInput, actor: Actor): Promise<TrustedIssuer> {
  const issuer = input.issuer.trim();
  const issuerProblem = httpsUrlProblem(issuer);
  if (issuerProblem) throw new IssuerInputError('issuer', `Issuer ${issuerProblem}`);
  if (!(ISSUER_PROFILES as readonly string[]).includes(input.profile))
    throw new IssuerInputError('profile', `Profile must be one of ${ISSUER_PROFILES.join(', ')}`);
  const profile = input.profile as TrustedIssuerProfile;
  const jwksUri = input.jwksUri?.trim() || null;
  const jwksProblem = jwksUri === null ? null : httpsUrlProblem(jwksUri);
  if (jwksProblem) throw new IssuerInputError('jwks_uri', `JWKS URL ${jwksProblem}`);
  const subjectClaim = input.subjectClaim?.trim() || 'sub';
  if (!(SUBJECT_CLAIMS as readonly string[]).includes(subjectClaim)) throw new IssuerInputError('subject_claim', 'Subject claim must be sub or email');
  if (profile === 'workload' && subjectClaim !== 'sub')
    throw new IssuerInputError('subject_claim', "A workload issuer's subject is its sub: it names no person");
  const subject = input.subject?.trim() || null;
  if (subject !== null && profile !== 'workload') throw new IssuerInputError('subject', 'An exact subject is for workload issuers only');
  if (subject !== null && (subject.length > 1000 || !isLookupSafe(subject)))
    throw new IssuerInputError('subject', 'Subject must be at most 1000 characters, without control characters');
  const clients = [...new Set((input.clients ?? []).map((c) => c.trim()).filter((c) => c !== ''))];
  for (const clientId of clients) {
    if (!(await lookupClient(ctx.db, clientId))) throw new IssuerInputError('clients', `There is no client ${cut(clientId, 100)}`);
  }
  if (profile === 'workload' && clients.length !== 1)
    throw new IssuerInputError('clients', 'A workload issuer needs exactly one client: the one its workloads act as');
  const requested = (input.scope ?? '').split(/\s+/).filter((s) => s !== '');
  const malformed = requested.filter((s) => !isScopeToken(s));
  if (malformed.length > 0) throw new IssuerInputError('scope', `Unknown scope ${quoted(malformed)}`);
  const unknownScopes = await unknownScopesProblem(ctx.db, requested);
  if (unknownScopes !== null) throw new IssuerInputError('scope', unknownScopes);
  let resource = input.resource?.trim() || null;
  if (resource !== null) {
    if (profile !== 'workload') throw new IssuerInputError('resource', 'An ID-JAG names its resource itself: a configured resource is for workload issuers');
    try {
      resource = (await requestedAudience(ctx, resource)).uri;
    } catch (error) {
      if (error instanceof OAuthError) throw new IssuerInputError('resource', 'There is no such resource server: see gatehouse resource list');
      throw error;
    }
  }
  const row: TrustedIssuer = {
    issuer,
    profile,
    jwks_uri: jwksUri,
    allow_private_address: input.allowPrivateAddress ? 1 : 0,
    subject_claim: subjectClaim as TrustedIssuer['subject_claim'],
    subject,
    clients: JSON.stringify(clients),
    scopes: requested.length === 0 ? null : joinScopes(requested),
    resource,
    created_at: ctx.now(),
  };
  if (!(await insertTrustedIssuer(ctx.db, row))) throw new IssuerInputError('issuer', 'This issuer is trusted already: delete it first to change it');
  await ctx.audit({ type: 'issuer_created', ...madeBy(actor), detail: { issuer, profile, clients: clients.join(' ') || null } });
  return row;
}

/** A page of at most `limit` issuers, by URL (SPEC §4.5: admin lists are paginated). */
export function listIssuers(ctx: AppContext, cursor: PageCursor, limit: number): Promise<Page<TrustedIssuer>> {
  return listTrustedIssuers(ctx.db, cursor, limit);
}

/** Stops trusting the issuer: its assertions are refused from the next request on. False when it was not trusted. */
export async function removeIssuer(ctx: AppContext, issuer: string, actor: Actor): Promise<boolean> {
  if (!isLookupSafe(issuer)) return false;
  const deleted = await deleteTrustedIssuer(ctx.db, issuer);
  if (deleted) await ctx.audit({ type: 'issuer_deleted', ...madeBy(actor), detail: { issuer } });
  return deleted;
}
