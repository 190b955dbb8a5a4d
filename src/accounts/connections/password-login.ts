/**
 * Who may use a password, and which connection an email address belongs to (SPEC §4.13):
 * PASSWORD_LOGIN (`all`, `admins`, `none`) and `--required` connections, whose email domains'
 * people log in there and never with a password; `--domains`, which send an address typed on
 * the login page straight to its provider.
 */
import type { AppContext } from '../../context.ts';
import { countPasskeys } from '../../store/passkeys.ts';
import { countOtherIdentities } from '../../store/connections.ts';
import type { Connection, User } from '../../store/schema.ts';
import { NO_PASSWORD } from '../passwords.ts';
import { domainsOf, enabledConnections } from './connections.ts';

/** The enabled connection that serves the address's email domain, if any: a required one, else the first by name. */
export async function connectionForEmail(ctx: AppContext, address: string): Promise<Connection | undefined> {
  const at = address.lastIndexOf('@');
  if (at < 1) return undefined;
  const domain = address.slice(at + 1).toLowerCase();
  const serving = (await enabledConnections(ctx)).filter((connection) => domainsOf(connection).includes(domain));
  // A required one first: no other connection of the domain may let its people use a password.
  return serving.find((connection) => connection.required === 1) ?? serving[0];
}

/** Whether a password may not log the person in: their email domain's connection is required, or PASSWORD_LOGIN leaves them none. */
export async function passwordRefusedFor(ctx: AppContext, user: User): Promise<boolean> {
  if ((await connectionForEmail(ctx, user.email))?.required === 1) return true;
  const setting = ctx.config.passwordLogin;
  return setting === 'none' || (setting === 'admins' && user.is_admin !== 1);
}

/** Whether the login page offers a password at all (PASSWORD_LOGIN `none` offers connections and passkeys only). */
export function passwordOffered(ctx: AppContext): boolean {
  return ctx.config.passwordLogin !== 'none';
}

/**
 * Whether the person keeps a way to log in without their identity at `connectionId`: a password
 * they may use, a passkey, or an identity at another enabled connection. Unlinking the last way is refused.
 */
export async function keepsAWayToLogIn(ctx: AppContext, user: User, connectionId: string): Promise<boolean> {
  if (user.password_hash !== NO_PASSWORD && !(await passwordRefusedFor(ctx, user))) return true;
  if (ctx.config.webauthn !== null && (await countPasskeys(ctx.db, user.id)) > 0) return true;
  return (await countOtherIdentities(ctx.db, user.id, connectionId)) > 0;
}
