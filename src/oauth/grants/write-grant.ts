/**
 * A new grant, as every grant that creates one writes it: the row (a time-ordered id, whose
 * it is, what for, the client's scopes it was decided by, the login behind it), its first
 * tokens and its `token_issued` event, in one write in the store — a code's exchange, which
 * consumes the code in the same transaction (single-use.ts), or `insertGrant` for a grant
 * that starts without one (client_credentials, jwt-bearer). The event is counted in the
 * metrics only once the write went in.
 */
import type { AppContext } from '../../context.ts';
import { timeOrderedUuid } from '../../ids.ts';
import type { Login } from '../../login.ts';
import type { AuditEventRow } from '../../store/audit-events.ts';
import { insertGrant } from '../../store/atomic-writes.ts';
import type { NewGrant } from '../../store/grants.ts';
import type { IssuedTokens } from '../../store/tokens.ts';

/** The grant to write, but for its id and scopes (those of its tokens). */
export interface GrantToWrite {
  /** The `grant_type` it was made by, for the event. */
  grantType: string;
  clientId: string;
  userId: string | null;
  resourceId: string;
  /** The client's scopes as the request decided by them: the grant goes in only while they are still the client's. */
  clientScopes: string;
  login: Login | null;
  /** What the event says besides `grant_type`, `grant_id` and `scope`. */
  detail?: Record<string, unknown>;
}

/** How the grant goes into the store, and whether its answer says it went in. */
export interface GrantWriter<R> {
  write(grant: NewGrant, tokens: IssuedTokens, now: number, issued: AuditEventRow): Promise<R>;
  wrote(result: R): boolean;
}

/** `insertGrant`: true when the grant went in, false (nothing stored) when its client or user changed meanwhile. */
export function insertingGrant(ctx: AppContext): GrantWriter<boolean> {
  return { write: (grant, tokens, now, issued) => insertGrant(ctx.db, grant, tokens, now, issued), wrote: (inserted) => inserted };
}

/** Writes the grant with its first tokens and its `token_issued` event; answers what `writer` said. */
export async function writeGrant<R>(
  ctx: AppContext,
  grant: GrantToWrite,
  tokens: IssuedTokens,
  now: number,
  address: string,
  writer: GrantWriter<R>,
): Promise<R> {
  const { grantType, detail, ...parties } = grant;
  const row: NewGrant = { id: timeOrderedUuid(now), ...parties, scopes: tokens.scopes };
  const issued = ctx.audit.pending({
    type: 'token_issued',
    userId: row.userId,
    clientId: row.clientId,
    address,
    detail: { grant_type: grantType, grant_id: row.id, scope: row.scopes, ...detail },
  });
  const result = await writer.write(row, tokens, now, issued.row);
  if (writer.wrote(result)) issued.committed();
  return result;
}
