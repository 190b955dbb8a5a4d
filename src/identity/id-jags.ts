/**
 * Identity Assertion JWT Authorization Grants that Gatehouse issues (SPEC §4.15,
 * draft-ietf-oauth-identity-assertion-authz-grant §3): the person's identity provider vouching,
 * to another authorization server, that this person uses this client there — what MCP's
 * enterprise-managed authorization asks of the enterprise's provider. The other server
 * redeems it with the jwt-bearer grant (Gatehouse does so by SPEC §4.11: assertions/id-jag.ts).
 * Also the audiences an administrator lists per client (`--id-jag-audience`), as stored and typed.
 */
import type { AppContext } from '../context.ts';
import type { Client } from '../store/schema.ts';
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

/** An authorization server a client may get ID-JAGs for (SPEC §4.15): its issuer, and the client's ID there (null: the same as here). */
export interface IdJagAudience {
  issuer: string;
  client_id: string | null;
}

/**
 * An ID-JAG audience as an administrator types it (`--id-jag-audience`, one line of the admin
 * form): `<issuer url>`, or `<issuer url>=<client ID there>` when the client is known there by
 * another ID. An issuer URL has no query (RFC 8414 §2), so the first `=` ends it.
 */
export function parseIdJagAudience(text: string): IdJagAudience {
  const at = text.indexOf('=');
  const issuer = (at === -1 ? text : text.slice(0, at)).trim();
  const clientId = at === -1 ? null : text.slice(at + 1).trim();
  return { issuer, client_id: clientId === '' ? null : clientId };
}

/** How an ID-JAG audience is shown and typed back: the inverse of `parseIdJagAudience`. */
export function idJagAudienceText(audience: IdJagAudience): string {
  return audience.client_id === null ? audience.issuer : `${audience.issuer}=${audience.client_id}`;
}

/** The client's ID-JAG audiences, as stored. */
export function idJagAudiencesOf(client: Pick<Client, 'id_jag_audiences'>): IdJagAudience[] {
  return JSON.parse(client.id_jag_audiences) as IdJagAudience[];
}
