/**
 * Whether a forgotten-password request tells who has an account by its timing (SPEC §4.16):
 * requests for an address an account has and for one no account has, interleaved one by one
 * so that the machine's noise falls on both alike, against a server on SQLite that sends the
 * mail to a real SMTP server on loopback. Prints each kind's median and p90 and the ratio of
 * the medians. Run with `npm run bench:password-reset` (BENCH_ROUNDS, default 200 each).
 */
import { performance } from 'node:perf_hooks';
import { sqlite } from '../test/support/backends.ts';
import { startServer } from '../test/support/server.ts';
import { startSmtpServer } from '../test/support/smtp.ts';
import { UserAgent } from '../test/support/user-agent.ts';
import { percentile } from './harness.ts';

const rounds = Number(process.env.BENCH_ROUNDS ?? 200);
const smtp = await startSmtpServer();
// Throttling off: every request is answered, not refused.
const server = await startServer(sqlite, { SMTP_URL: smtp.url, LOG_LEVEL: 'warn', LOGIN_FAILURES_PER_ACCOUNT: '0', LOGIN_FAILURES_PER_ADDRESS: '0' });
await server.createUser('alice');
const agent = new UserAgent(server.url);
const form = await agent.visit('/password/forgot');
const csrf = /name="_csrf" value="([^"]+)"/.exec(form.html)![1]!;

async function ask(email: string): Promise<number> {
  const started = performance.now();
  const response = await agent.fetch('/password/forgot', { method: 'POST', body: new URLSearchParams({ _csrf: csrf, email }) });
  await response.text();
  if (response.status !== 200) throw new Error(`${email}: ${response.status}`);
  return performance.now() - started;
}

const times = { known: [] as number[], unknown: [] as number[] };
for (let round = -10; round < rounds; round++) {
  // Alternating which goes first, so neither always follows the other's background work.
  const order = round % 2 === 0 ? (['known', 'unknown'] as const) : (['unknown', 'known'] as const);
  for (const kind of order) {
    const ms = await ask(kind === 'known' ? 'alice@example.com' : `nobody${round}@example.com`);
    if (round >= 0) times[kind].push(ms);
  }
}
const median = (values: number[]) => percentile(values, 50);
for (const kind of ['known', 'unknown'] as const) {
  console.log(`${kind} address: median ${median(times[kind]).toFixed(2)} ms, p90 ${percentile(times[kind], 90).toFixed(2)} ms (${rounds} requests)`);
}
console.log(`known / unknown, medians: ${(median(times.known) / median(times.unknown)).toFixed(3)}`);
console.log(`mail received: ${smtp.received.length} (to the known address only)`);
await server.close();
await smtp.close();
