/**
 * Identity Assertion JWT Authorization Grants that Gatehouse issues (SPEC §4.15,
 * draft-ietf-oauth-identity-assertion-authz-grant §3): the person's identity provider vouching,
 * to another authorization server, that this person uses this client there — what MCP's
 * enterprise-managed authorization asks of the enterprise's provider. The other server
 * redeems it with the jwt-bearer grant (Gatehouse does so by SPEC §4.11: assertions/id-jag.ts).
 */
import type { AppContext } from '../context.ts';
import { mintToken } from '../tokens.ts';

/** The `typ` an ID-JAG's header carries. */
export const ID_JAG_TYPE = 'oauth-id-jag+jwt';

/** An ID-JAG lives this long at most (SPEC §4.15): it is redeemed at once. */
export const ID_JAG_LIFETIME_SECONDS = 300;

/** What an ID-JAG says: who, for which server and which client there, for what. */
export interface IdJagClaims {
  /** The person's userid (`acct:` URI). */
  readonly sub: string;
  /** Their e-mail address, when verified: how another server may know them (null: not said). */
  readonly email: string | null;
  /** The other authorization server's issuer. */
  readonly aud: string;
  /** The client's ID at that server. */
  readonly clientId: string;
  /** The resource at that server, when the client named one. */
  readonly resource: string | null;
  readonly scope: string | null;
}

/** An ID-JAG signed by the active RS256 key — the algorithm every JWT consumer takes — with a fresh `jti`. */
export async function signIdJag(ctx: AppContext, what: IdJagClaims, now: number): Promise<string> {
  const iat = Math.floor(now / 1000);
  const claims = {
    iss: ctx.config.publicUrl,
    sub: what.sub,
    ...(what.email === null ? {} : { email: what.email }),
    aud: what.aud,
    client_id: what.clientId,
    ...(what.resource === null ? {} : { resource: what.resource }),
    ...(what.scope === null ? {} : { scope: what.scope }),
    jti: mintToken('jwtId').token,
    iat,
    exp: iat + ID_JAG_LIFETIME_SECONDS,
  };
  return ctx.keys.signJwt('RS256', { typ: ID_JAG_TYPE }, claims);
}
