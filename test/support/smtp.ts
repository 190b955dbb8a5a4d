/**
 * A real SMTP server on a loopback port (the `smtp-server` package), receiving what Gatehouse
 * sends through nodemailer, with the messages parsed by `mailparser` as a mail client would.
 * It asks for the user and password of its URL, and can refuse recipients, to play a mail
 * server that is down for a while (4xx) or that knows no such mailbox (5xx).
 */
import { simpleParser } from 'mailparser';
import { SMTPServer } from 'smtp-server';
import { freePort } from './ports.ts';

export interface ReceivedMail {
  to: string;
  from: string;
  subject: string;
  text: string;
  html: string;
}

export interface TestSmtpServer {
  /** SMTP_URL for Gatehouse, with this server's user and password. */
  url: string;
  port: number;
  /** Every message accepted so far, in order. */
  received: ReceivedMail[];
  /** Recipients offered so far, accepted or not (each attempt counts). */
  offered: string[];
  /** Answers a recipient with an SMTP error instead of accepting it: `code` 4xx (try later) or 5xx (never). */
  refuse(recipient: string, code: number, times?: number): void;
  /** The next message to `to` not yet taken, waiting up to `timeoutMs` for it. */
  next(to: string, timeoutMs?: number): Promise<ReceivedMail>;
  close(): Promise<void>;
}

export const SMTP_USER = 'gatehouse';
export const SMTP_PASSWORD = 'smtp-password-never-logged';

export async function startSmtpServer(port?: number): Promise<TestSmtpServer> {
  const received: ReceivedMail[] = [];
  const offered: string[] = [];
  const taken = new Set<ReceivedMail>();
  const refusals = new Map<string, { code: number; times: number }>();
  const waiters = new Set<() => void>();
  const server = new SMTPServer({
    // Plain SMTP on loopback: no certificate for nodemailer to check.
    disabledCommands: ['STARTTLS'],
    allowInsecureAuth: true,
    logger: false,
    onAuth(auth, _session, callback) {
      if (auth.username === SMTP_USER && auth.password === SMTP_PASSWORD) return callback(null, { user: auth.username });
      return callback(Object.assign(new Error('Invalid username or password'), { responseCode: 535 }));
    },
    onRcptTo(address, _session, callback) {
      offered.push(address.address);
      const refusal = refusals.get(address.address);
      if (refusal && refusal.times > 0) {
        refusal.times--;
        return callback(Object.assign(new Error(refusal.code >= 500 ? 'No such mailbox' : 'Try again later'), { responseCode: refusal.code }));
      }
      return callback();
    },
    onData(stream, _session, callback) {
      simpleParser(stream)
        .then((parsed) => {
          const to = Array.isArray(parsed.to) ? parsed.to[0]!.text : (parsed.to?.text ?? '');
          received.push({ to, from: parsed.from?.text ?? '', subject: parsed.subject ?? '', text: parsed.text ?? '', html: parsed.html || '' });
          for (const wake of waiters) wake();
          callback();
        })
        .catch(callback);
    },
  });
  const listeningOn = port ?? (await freePort());
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(listeningOn, '127.0.0.1', () => resolve());
  });
  return {
    url: `smtp://${SMTP_USER}:${SMTP_PASSWORD}@127.0.0.1:${listeningOn}`,
    port: listeningOn,
    received,
    offered,
    refuse(recipient, code, times = Infinity) {
      refusals.set(recipient, { code, times });
    },
    async next(to, timeoutMs = 15_000) {
      const find = () => received.find((mail) => !taken.has(mail) && mail.to === to);
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const found = find();
        if (found) {
          taken.add(found);
          return found;
        }
        const left = deadline - Date.now();
        if (left <= 0) throw new Error(`no mail to ${to} within ${timeoutMs} ms (received: ${received.map((m) => m.to).join(', ') || 'none'})`);
        await new Promise<void>((resolve) => {
          const wake = () => {
            waiters.delete(wake);
            clearTimeout(timer);
            resolve();
          };
          const timer = setTimeout(wake, left);
          waiters.add(wake);
        });
      }
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** The link of a message's plain-text part that starts with `base` + `path`. */
export function linkIn(mail: ReceivedMail, base: string, path: string): string {
  const url = mail.text.split(/\s+/).find((word) => word.startsWith(`${base}${path}?`));
  if (!url) throw new Error(`no ${path} link in the message "${mail.subject}"`);
  return url;
}
