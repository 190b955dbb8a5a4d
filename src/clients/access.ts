/**
 * A person's applications (SPEC §4.5, /account/applications): the clients they have
 * authorized, and **Revoke access**, which takes one's access away — every grant it holds
 * from them (all its tokens, on every instance), the codes and approved device codes it has
 * not exchanged yet, and their consent, so that it has to ask again.
 */
import type { AppContext } from '../context.ts';
import { isClientId } from '../oauth/client-auth.ts';
import { revoke } from '../oauth/revocation.ts';
import { listAuthorizedApplications, type AuthorizedApplication } from '../store/applications.ts';
import { voidCodes } from '../store/codes.ts';
import { deleteConsent } from '../store/consents.ts';
import { voidDeviceCodes } from '../store/device-codes.ts';

/** The applications holding a live grant or consent from the user. */
export async function authorizedApplications(ctx: AppContext, userId: string): Promise<AuthorizedApplication[]> {
  return listAuthorizedApplications(ctx.db, userId, ctx.now());
}

/**
 * The user takes the client's access away, from `address`: a client of any kind (a UUID or a
 * metadata document's URL). True when the user had given it access (a live grant: what the
 * applications page lists); false when there was none, or the client id is malformed.
 */
export async function removeAccess(ctx: AppContext, userId: string, clientId: string, address: string | null): Promise<boolean> {
  if (!isClientId(clientId)) return false;
  // Forget the consent first: the application must not get back in silently between the
  // steps. Void the codes before revoking: an exchange that committed before the voiding
  // made a grant the revocation then ends, and one that had not finds no code.
  await deleteConsent(ctx.db, userId, clientId);
  await voidCodes(ctx.db, { clientId, userId });
  await voidDeviceCodes(ctx.db, { clientId, userId });
  const revoked = await revoke(ctx, { userId, clientId }, 'access_removed');
  if (revoked.length === 0) return false;
  await ctx.audit({ type: 'access_removed', userId, clientId, address });
  return true;
}
