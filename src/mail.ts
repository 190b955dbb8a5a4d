/**
 * Mail (SPEC §4.16), through nodemailer to the SMTP server of SMTP_URL.
 *
 * A request never waits for mail: it queues a row (store/mail-outbox.ts) saying what to send,
 * and every server instance works the queue off in the background (events/deliveries.ts). An
 * attempt is claimed by one conditional update, so of several instances exactly one sends a
 * message. The message is composed when it is sent, by its kind's composer
 * (accounts/account-mail.ts): a link's token is made then and only its hash is stored, so the
 * queue never holds a token, and a message whose reason has gone (the person was deleted, the
 * address changed) is skipped. A failure the SMTP server did not call permanent (no connection,
 * a timeout, a 4xx answer, refused credentials) is retried after a back-off that doubles from
 * 2 seconds to 10 minutes, up to 10 attempts; a permanent one (a 5xx answer: no such mailbox)
 * is not. Every message sent or given up is in the audit trail, by kind and person, never its
 * link. Each message has a plain-text and an HTML part, from one description of it.
 */
import { Eta } from 'eta';
import { fileURLToPath } from 'node:url';
import type { Audit } from './audit.ts';
import type { Config } from './config.ts';
import type { ContextLogger, Mail } from './context.ts';
import { deliveryLoop, inBatches } from './events/deliveries.ts';
import { claimMail, dueMail, finishMail, type ClaimedMail, type DueMail } from './store/mail-outbox.ts';
import type { Database } from './store/schema.ts';
import type { Kysely } from 'kysely';

const ATTEMPTS = 10;
/** After failed attempt n, the next is due 2^n seconds later, at most 10 minutes: about 17 minutes in all. */
const retryDelayMs = (attempt: number) => Math.min(1000 * 2 ** attempt, 10 * 60 * 1000);
/** How long a claim holds: well past an attempt's deadlines, so a crashed instance's claim lapses and another retries. */
const CLAIM_MS = 120_000;
/** Messages sent at once by an instance. */
const BATCH = 10;
/** The SMTP conversation's deadlines (nodemailer's defaults are minutes). */
const TIMEOUTS = { connectionTimeout: 10_000, greetingTimeout: 10_000, socketTimeout: 30_000, dnsTimeout: 10_000 } as const;

/** A message as its composer describes it; the text and HTML parts are both made from it. */
export interface MailMessage {
  readonly subject: string;
  /** The body, a paragraph each. */
  readonly paragraphs: readonly string[];
  /** The one thing to do, if any: a button in HTML, a line of its own in text. */
  readonly action?: { readonly label: string; readonly url: string };
  /** Why the person got this, and what to do if they did not ask for it. */
  readonly footnote: string;
}

/** What a composer makes of a queued row: the message, or why there is nothing to send any more. */
export type Composed = { readonly message: MailMessage } | { readonly skip: string };

export type Composer = (mail: ClaimedMail) => Promise<Composed>;

export interface MailDeps {
  readonly config: Config;
  readonly db: Kysely<Database>;
  readonly audit: Audit;
  readonly now: () => number;
  readonly log: ContextLogger;
  readonly compose: Composer;
}

const html = new Eta({ autoEscape: true, views: fileURLToPath(new URL('./views', import.meta.url)) });

/** The plain-text part: the paragraphs, the action's URL on a line of its own, the footnote. */
export function textOf(message: MailMessage): string {
  const action = message.action ? [`${message.action.label}:\n${message.action.url}`] : [];
  return [...message.paragraphs, ...action, '--', message.footnote].join('\n\n') + '\n';
}

export function htmlOf(message: MailMessage): string {
  return html.render('mail.eta', message);
}

type Outcome = { sent: true } | { sent: false; reason: string; permanent: boolean } | { skipped: string };

export function mailer(deps: MailDeps): Mail {
  const { config, db, now, log } = deps;
  if (config.mail === null) return { enabled: false, wake() {}, start() {}, close: async () => {} };
  const { smtpUrl, from } = config.mail;
  // nodemailer is loaded with the first message: a process that sends none (the command line) never pays for it.
  let transport: Promise<import('nodemailer').Transporter> | undefined;
  const transporter = () =>
    (transport ??= import('nodemailer').then(({ createTransport }) => {
      const made = createTransport(smtpUrl, { from });
      // nodemailer's options beside the URL: the URL is parsed by it, the deadlines are ours.
      Object.assign(made.options, TIMEOUTS);
      return made;
    }));

  async function attempt(claimed: ClaimedMail): Promise<Outcome> {
    const composed = await deps.compose(claimed);
    if ('skip' in composed) return { skipped: composed.skip };
    const { message } = composed;
    try {
      // One address, as an object: as a string, nodemailer would read a list or a display name into it.
      await (
        await transporter()
      ).sendMail({ to: { name: '', address: claimed.to_address }, subject: message.subject, text: textOf(message), html: htmlOf(message) });
      return { sent: true };
    } catch (error) {
      const failure = error as Error & { permanent?: boolean; code?: string; responseCode?: number };
      // Refused credentials are permanent for the server but not for the message: an administrator fixes SMTP_URL.
      const permanent = failure.permanent === true && failure.code !== 'EAUTH';
      return { sent: false, reason: failure.responseCode ? `the SMTP server answered ${failure.responseCode}` : (failure.code ?? 'no answer'), permanent };
    }
  }

  /** Makes one attempt if this instance can claim it; whether it could. */
  async function deliver(id: string): Promise<boolean> {
    const claimed = await claimMail(db, id, now(), now() + CLAIM_MS, ATTEMPTS);
    if (!claimed) return false; // another instance has it, or it is done
    const outcome = await attempt(claimed).catch((error: Error): Outcome => ({ sent: false, reason: error.message, permanent: false }));
    const about = { userId: claimed.user_id, address: claimed.address };
    if ('skipped' in outcome) {
      await finishMail(db, claimed, { state: 'skipped' });
      log.info({ event: 'mail_skipped', kind: claimed.kind, reason: outcome.skipped }, 'mail not sent: nothing to send any more');
      return true;
    }
    if (outcome.sent) {
      await finishMail(db, claimed, { state: 'sent' });
      await deps.audit({ type: 'mail_sent', ...about, detail: { kind: claimed.kind, attempt: claimed.attempts } });
      return true;
    }
    const retrying = !outcome.permanent && claimed.attempts < ATTEMPTS;
    await finishMail(db, claimed, retrying ? { retryAt: now() + retryDelayMs(claimed.attempts) } : { state: 'failed' });
    log.warn({ event: 'mail_failed', kind: claimed.kind, attempt: claimed.attempts, reason: outcome.reason, retrying }, 'mail not sent');
    await deps.audit({ type: 'mail_failed', ...about, detail: { kind: claimed.kind, attempt: claimed.attempts, reason: outcome.reason, retrying } });
    return true;
  }

  /**
   * A batch's messages side by side, but each person's in the order they were queued: a
   * message with a link replaces the person's last link of its kind, so the one that arrives
   * last must be the one composed last.
   */
  async function deliverInOrder(due: DueMail[]): Promise<number> {
    const byPerson = Map.groupBy(due, (mail) => mail.user_id ?? mail.id);
    const claimed = await Promise.all(
      [...byPerson.values()].map(async (mails) => {
        let count = 0;
        for (const mail of mails) if (await deliver(mail.id)) count++;
        return count;
      }),
    );
    return claimed.reduce((a, b) => a + b, 0);
  }

  const loop = deliveryLoop('mail', () => inBatches(BATCH, (limit) => dueMail(db, now(), limit, ATTEMPTS), deliverInOrder), log);
  return {
    enabled: true,
    ...loop,
    async close() {
      await loop.close();
      (await transport)?.close();
    },
  };
}
