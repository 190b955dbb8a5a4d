/**
 * What the two single-use grants share once their code has been checked: an authorization
 * code (authorization-code.ts) and a device code (device-code.ts) are each exchanged exactly
 * once — one transaction in the store creates the grant, its first tokens and the audit row,
 * and consumes the code with a conditional write — and presenting one again revokes what it
 * issued (RFC 6749 §4.1.2; RFC 8628 relies on the same rule).
 */
import type { Kysely } from 'kysely';
import type { AppContext } from '../../context.ts';
import type { AuditEventRow } from '../../store/audit-events.ts';
import type { Exchange } from '../../store/atomic-writes.ts';
import type { NewGrant } from '../../store/grants.ts';
import type { JoinedTokenSettings } from '../../store/codes.ts';
import type { Client, Database } from '../../store/schema.ts';
import { loginOf } from '../../login.ts';
import type { IssuedTokens } from '../../store/tokens.ts';
import { invalidGrant, type OAuthError } from '../../protocol/errors.ts';
import { isConfidential } from '../assertions/client-keys.ts';
import type { DpopProof } from '../dpop.ts';
import { mintTokenResponse, proofBinding, scopesStillAllowed, type TokenResponse } from '../issue.ts';
import { joinedAudience, lacksRequiredSecondFactor } from '../resources.ts';
import { revoke } from '../revocation.ts';
import { splitScopes } from '../scopes.ts';
import { writeGrant } from './write-grant.ts';

/** A code the person approved, as both kinds are stored, with its resource server's token settings. */
export interface ApprovedCode extends JoinedTokenSettings {
  hash: string;
  client_id: string;
  user_id: string | null;
  /** Who approved it; null only for a device code nobody answered (never exchanged). */
  username: string | null;
  resource_id: string;
  scopes: string;
  /**
   * The client's scopes as stored now, read with the code: what the exchange decides by,
   * rather than the request's copy of the client, which may be up to a second old (client-cache.ts).
   */
  client_scopes: string;
  /** The login it was approved in (SessionsTable): null only for a code older than that record, or a device code nobody answered. */
  auth_time: number | null;
  amr: string | null;
  sid: string | null;
  /** The authentication request's `nonce`: authorization codes only (a device grant has no nonce). */
  nonce?: string | null;
}

/** One kind of single-use code: how it is named to the client, and its exactly-once write in the store. */
export interface SingleUseCode {
  grantType: string;
  /** `authorization code`, `device code`: in the messages. */
  noun: string;
  /** What a replay's audit event adds to tell this kind from the authorization code (the default). */
  replayDetail: Record<string, string>;
  exchange(db: Kysely<Database>, hash: string, grant: NewGrant, tokens: IssuedTokens, now: number, issued: AuditEventRow): Promise<Exchange>;
  /** The code as it is now (who consumed it), or undefined once it is gone (voided). */
  find(db: Kysely<Database>, hash: string): Promise<{ grant_id: string | null } | undefined>;
  /**
   * A device code's exchange is also a poll, in time or not (device-codes.ts `consumeDeviceCode`):
   * when it refuses or consumes nothing, this records the poll first, and throws `slow_down`
   * for one too soon (`invalid_grant` for a code voided meanwhile), as for every other poll.
   */
  checkPoll?(db: Kysely<Database>, hash: string, now: number): Promise<void>;
}

/**
 * Exchanges the checked code for a grant and tokens, exactly once. SPEC §4.2: scopes taken
 * from the client since the code was issued are dropped; none left is `invalid_grant`.
 */
export async function exchangeApproved(
  kind: SingleUseCode,
  code: ApprovedCode,
  client: Client,
  ctx: AppContext,
  address: string,
  now: number,
  proof: DpopProof | null,
): Promise<TokenResponse> {
  const invalid = `the ${kind.noun} is invalid`;
  // A device code's refusal is a poll too, recorded first: one too soon hears slow_down instead.
  const refused = async (error: OAuthError): Promise<OAuthError> => {
    await kind.checkPoll?.(ctx.db, code.hash, now);
    return error;
  };
  const scopes = scopesStillAllowed(splitScopes(code.scopes), { scopes: code.client_scopes, kind: client.kind });
  if (scopes.length === 0) throw await refused(invalidGrant(invalid, `every scope of the ${kind.noun} was taken from the client`));

  // Deleting a resource server voids its codes: only an exchange racing the deletion finds it gone.
  const audience = joinedAudience(code, ctx);
  if (audience === null) throw await refused(invalidGrant(invalid, `the resource server of the ${kind.noun} was deleted`));
  const login = loginOf(code);
  // Step-up (SPEC §4.12): the resource server may have come to require a second factor after
  // the person approved without one; its tokens are issued only to a login that had one.
  if (lacksRequiredSecondFactor(code, login)) {
    throw await refused(
      invalidGrant(
        'the resource server requires a login with a second factor, and this one was approved without: ask the person again',
        `${kind.noun} approved without a second factor`,
      ),
    );
  }
  const subject = { clientId: client.id, userId: code.user_id, username: code.username, login };
  const binding = proofBinding(proof, isConfidential(client));
  const pair = await mintTokenResponse(ctx, audience, subject, scopes, { withRefresh: true, nonce: code.nonce ?? null, binding });
  const grant = { grantType: kind.grantType, clientId: client.id, userId: code.user_id, resourceId: code.resource_id, clientScopes: code.client_scopes, login };
  const exchange = await writeGrant(ctx, grant, pair.stored, now, address, {
    write: (row, tokens, now, issued) => kind.exchange(ctx.db, code.hash, row, tokens, now, issued),
    wrote: (exchange) => exchange === 'exchanged',
  });
  if (exchange === 'parties_changed') throw await refused(invalidGrant(invalid, 'client deleted or changed, or user disabled, during the exchange'));
  if (exchange === 'code_consumed') {
    await kind.checkPoll?.(ctx.db, code.hash, now);
    const winner = await kind.find(ctx.db, code.hash);
    if (!winner) throw invalidGrant(invalid, `${kind.noun} voided during the exchange`);
    // A concurrent request consumed the code first: that is a replay too.
    await replayed(kind, code, winner.grant_id, ctx, address);
    throw invalidGrant(`the ${kind.noun} has already been used`, `concurrent ${kind.noun} replay: revoked what it issued`);
  }
  return pair.response;
}

/** A code presented again: everything it issued is revoked, and the replay recorded. */
export async function replayed(kind: SingleUseCode, code: ApprovedCode, grantId: string | null, ctx: AppContext, address: string): Promise<void> {
  if (grantId !== null) await revoke(ctx, { grantId }, 'code_replay');
  await ctx.audit({
    type: 'code_replay_detected',
    userId: code.user_id,
    clientId: code.client_id,
    address,
    detail: { ...kind.replayDetail, grant_id: grantId },
  });
}
