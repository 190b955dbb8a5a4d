/**
 * What each kind of queued mail says (SPEC §4.16), composed when it is sent (mail.ts): a
 * message carrying a link makes the link's token then, and stores only its hash
 * (store/account-links.ts), so no token ever waits in the queue. A message whose reason has
 * gone by the time it is sent — the person deleted or disabled, the address changed, the email
 * verified meanwhile — is skipped.
 */
import type { AppContext } from '../context.ts';
import type { Composed, MailMessage } from '../mail.ts';
import { putLink } from '../store/account-links.ts';
import type { ClaimedMail } from '../store/mail-outbox.ts';
import type { AccountLinkPurpose, User } from '../store/schema.ts';
import { findUserById, lookupKey } from '../store/users.ts';
import { mintToken } from '../tokens.ts';
import { passwordRefusedFor } from './connections/password-login.ts';
import { passwordFingerprint } from './passwords.ts';

/** How long a password reset link works. */
export const RESET_LINK_TTL_MS = 30 * 60 * 1000;
/** How long an email verification link works. */
export const VERIFY_LINK_TTL_MS = 24 * 3600 * 1000;

export const RESET_PATH = '/password/reset';
export const VERIFY_PATH = '/email/verify';

export async function composeMail(ctx: AppContext, mail: ClaimedMail): Promise<Composed> {
  const user = mail.user_id === null ? undefined : await findUserById(ctx.db, mail.user_id);
  if (!user) return { skip: 'no account has that address' };
  if (user.disabled === 1) return { skip: 'the account is disabled' };
  const greeting = `Hello ${user.display_name ?? user.username},`;
  const site = new URL(ctx.config.publicUrl).host;
  const footnote = `You get this because of your account ${user.username} at ${site}.`;
  const forAddress = (address: string) => lookupKey(address) === user.email_key;
  switch (mail.kind) {
    case 'password_reset': {
      if (!forAddress(mail.to_address)) return { skip: 'the account has another address now' };
      if (await passwordRefusedFor(ctx, user)) return { skip: 'the person may not log in with a password' };
      const url = await newLink(ctx, user, 'password_reset', { password_fingerprint: passwordFingerprint(user.password_hash) });
      return message({
        subject: 'Reset your password',
        paragraphs: [
          greeting,
          `Someone asked to reset the password of your account ${user.username} at ${site}. Choose a new one with the button below.`,
          `The link works once, for ${RESET_LINK_TTL_MS / 60_000} minutes, and stops working if your password changes meanwhile. ` +
            'Your other devices will be logged out.',
        ],
        action: { label: 'Choose a new password', url },
        footnote: `${footnote} If you did not ask for this, ignore this message: your password stays as it is.`,
      });
    }
    case 'verify_email': {
      // A change is for the address the account had when it was asked (`from`); a verification, for the address it has.
      const change = mail.detail.from !== undefined;
      if (change && mail.detail.from !== user.email_key) return { skip: 'the account has another address since the change was asked for' };
      if (!change && !forAddress(mail.to_address)) return { skip: 'the account has another address now' };
      if (!change && user.email_verified === 1) return { skip: 'the address is verified already' };
      const url = await newLink(ctx, user, 'verify_email', { email: mail.to_address });
      return message({
        subject: 'Verify your email address',
        paragraphs: [
          greeting,
          change
            ? `Someone asked to make ${mail.to_address} the email address of your account ${user.username} at ${site}. ` +
              `It becomes your address once you confirm it with the button below; until then your account keeps ${user.email}.`
            : `Confirm that ${mail.to_address} is the email address of your account ${user.username} at ${site} with the button below.`,
          `The link works once, for ${VERIFY_LINK_TTL_MS / 3_600_000} hours.`,
        ],
        action: { label: 'Verify this address', url },
        footnote: `${footnote} If you did not ask for this, ignore this message: nothing changes.`,
      });
    }
    case 'email_change_notice':
      if (!forAddress(mail.to_address)) return { skip: 'the address has changed already' };
      return message({
        subject: 'Your email address is changing',
        paragraphs: [
          greeting,
          `Someone asked to change the email address of your account ${user.username} at ${site} from ${mail.to_address} to ${mail.detail.new_email}. ` +
            'A link to confirm it was sent to the new address; your account keeps this one until it is confirmed.',
          `If this was not you, log in and change your password now: whoever asked knows how to log in to your account.`,
        ],
        footnote,
      });
    case 'password_changed':
      return message({
        subject: 'Your password was changed',
        paragraphs: [
          greeting,
          `The password of your account ${user.username} at ${site} was changed ${mail.detail.how ?? ''}`.trim() + '. Your other devices have been logged out.',
          `If this was not you, reset your password from the login page now, and tell an administrator.`,
        ],
        footnote,
      });
  }
}

const message = (m: MailMessage): Composed => ({ message: m });

/** A new link of `purpose` for the person, replacing their last one: its URL, which holds the token. */
async function newLink(ctx: AppContext, user: User, purpose: AccountLinkPurpose, bound: { email?: string; password_fingerprint?: string }): Promise<string> {
  const link = mintToken(purpose === 'password_reset' ? 'passwordReset' : 'emailVerification');
  const now = ctx.now();
  await putLink(ctx.db, {
    id_hash: link.hash,
    purpose,
    user_id: user.id,
    email: bound.email ?? null,
    password_fingerprint: bound.password_fingerprint ?? null,
    created_at: now,
    expires_at: now + (purpose === 'password_reset' ? RESET_LINK_TTL_MS : VERIFY_LINK_TTL_MS),
  });
  const path = purpose === 'password_reset' ? RESET_PATH : VERIFY_PATH;
  return `${ctx.config.publicUrl}${path}?${new URLSearchParams({ token: link.token })}`;
}
