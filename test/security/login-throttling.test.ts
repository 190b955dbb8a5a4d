/**
 * Login throttling under concurrency (SPEC §4.5, issue 11 items 1 and 6): of N simultaneous
 * wrong guesses, at most the limit reach the password check; username and email count as
 * one account; the counters never hold what was typed; and a flood of guesses against one
 * account does not stall everyone else's login. Every test runs with the counters in
 * process memory and in Redis, on both storage backends.
 *
 * The server trusts X-Forwarded-For from the loopback, so each test speaks from addresses
 * of its own: the Redis counters outlive the test and are shared with other suites.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { Redis } from 'ioredis';
import { RateLimiterMemory, RateLimiterRedis } from 'rate-limiter-flexible';
import { redisNamespace } from '../../src/config.ts';
import { BACKENDS, backendOptions, type Backend } from '../support/backends.ts';
import { PASSWORD, startServer, type TestServer } from '../support/server.ts';
import { UserAgent, formFields } from '../support/user-agent.ts';

const redisUrl = process.env.GATEHOUSE_TEST_REDIS;
const redisMissing = redisUrl ? undefined : (process.env.GATEHOUSE_TEST_REDIS_MISSING ?? 'GATEHOUSE_TEST_REDIS is not set (run the suite through test/run.ts)');

/** Every key the rate limiters of this process were asked about, as the library stores it. */
const limiterKeys: string[] = [];
for (const limiter of [RateLimiterMemory.prototype, RateLimiterRedis.prototype]) {
  for (const method of ['consume', 'get', 'reward', 'penalty', 'delete'] as const) {
    const original = limiter[method] as (this: RateLimiterMemory, key: string | number, ...rest: unknown[]) => unknown;
    (limiter as unknown as Record<string, unknown>)[method] = function (this: RateLimiterMemory, key: string | number, ...rest: unknown[]) {
      limiterKeys.push(this.getKey(key));
      return original.call(this, key, ...rest);
    };
  }
}

/** A client address no other test uses (a documentation /64 picked at random). */
const freshAddress = () => `2001:db8:${randomBytes(2).toString('hex')}:${randomBytes(2).toString('hex')}::1`;

/** A login form ready to post from `address`: its cookie (the CSRF secret) and fields. */
async function loginForm(server: TestServer, address: string) {
  const agent = new UserAgent(server.url);
  const page = await agent.visit('/login', { headers: { 'x-forwarded-for': address } });
  return { agent, fields: formFields(page.html, '/login'), address };
}

async function post(form: Awaited<ReturnType<typeof loginForm>>, username: string, password: string, address = form.address): Promise<Response> {
  const fields = new URLSearchParams(form.fields);
  fields.set('username', username);
  fields.set('password', password);
  const response = await form.agent.fetch('/login', { method: 'POST', body: fields, headers: { 'x-forwarded-for': address } });
  await response.arrayBuffer();
  return response;
}

/** How many answers had each status. */
function tally(responses: Response[]): Record<number, number> {
  const counts: Record<number, number> = {};
  for (const { status } of responses) counts[status] = (counts[status] ?? 0) + 1;
  return counts;
}

const COUNTERS = [
  { name: 'memory', env: (): Record<string, string> => ({}), skip: undefined },
  { name: 'Redis', env: (): Record<string, string> => ({ REDIS_URL: redisUrl! }), skip: redisMissing },
] as const;

function options(backend: Backend, skip: string | undefined) {
  return backend.unavailable ? backendOptions(backend) : skip ? { skip: `needs Redis: ${skip}` } : {};
}

for (const backend of BACKENDS) {
  for (const counters of COUNTERS) {
    describe(`login throttling under concurrency (${backend.name}, counters in ${counters.name})`, options(backend, counters.skip), () => {
      let server: TestServer;
      let addressLimited: TestServer;

      before(async () => {
        const env = { ...counters.env(), TRUST_PROXY: '127.0.0.1', LOG_LEVEL: 'warn' };
        server = await startServer(backend, { ...env, LOGIN_FAILURES_PER_ACCOUNT: '10' });
        addressLimited = await startServer(backend, { ...env, LOGIN_FAILURES_PER_ACCOUNT: '0', LOGIN_FAILURES_PER_ADDRESS: '5' });
        await server.createUser('alice');
        await server.createUser('mallory');
        await server.createUser('carol');
        await server.createUser('dave');
      });
      after(async () => {
        await server?.close();
        await addressLimited?.close();
      });

      test('of 40 simultaneous wrong guesses against one account (limit 10), at most 10 are checked', async (t) => {
        const forms = await Promise.all(Array.from({ length: 4 }, () => loginForm(server, freshAddress())));
        const answers = await Promise.all(Array.from({ length: 40 }, (_, i) => post(forms[i % forms.length]!, 'mallory', `wrong guess ${i}`)));
        const counts = tally(answers);
        t.diagnostic(`answers: ${JSON.stringify(counts)}`);
        assert.equal(counts[401], 10, 'the limit, no more and no fewer, were checked');
        assert.equal((counts[401] ?? 0) + (counts[429] ?? 0), 40, 'the rest were refused as throttled');
        for (const answer of answers.filter((a) => a.status !== 401)) assert.ok(Number(answer.headers.get('retry-after')) > 0);
        const right = await post(forms[0]!, 'mallory', PASSWORD);
        assert.equal(right.status, 429, 'once the limit is reached, even the right password is refused unchecked');
      });

      test('of simultaneous guesses across many accounts from one address (limit 5), at most 5 are checked', async (t) => {
        const form = await loginForm(addressLimited, freshAddress());
        const answers = await Promise.all(Array.from({ length: 30 }, (_, i) => post(form, `nobody-${i}-${randomBytes(4).toString('hex')}`, 'wrong guess')));
        const counts = tally(answers);
        t.diagnostic(`answers: ${JSON.stringify(counts)}`);
        assert.equal(counts[401], 5, 'the limit, no more and no fewer, were checked');
        assert.equal((counts[401] ?? 0) + (counts[429] ?? 0), 30, 'the rest were refused as throttled');
        const elsewhere = await loginForm(addressLimited, freshAddress());
        assert.equal((await post(elsewhere, 'nobody', 'wrong guess')).status, 401, 'another address is not locked out');
      });

      test('beyond 4 password checks under way and 32 waiting, a login is refused with 503 and Retry-After', async (t) => {
        const form = await loginForm(addressLimited, freshAddress());
        const answers = await Promise.all(Array.from({ length: 100 }, (_, i) => post(form, `nobody-${i}`, 'wrong guess', freshAddress())));
        const counts = tally(answers);
        t.diagnostic(`answers: ${JSON.stringify(counts)}`);
        assert.equal((counts[401] ?? 0) + (counts[503] ?? 0), 100, 'only 401 and 503 answers');
        assert.ok((counts[503] ?? 0) > 0, 'some were refused');
        for (const answer of answers.filter((a) => a.status === 503)) assert.ok(Number(answer.headers.get('retry-after')) > 0);
        assert.equal((await post(form, 'nobody', 'wrong guess', freshAddress())).status, 401, 'the queue drains');
      });

      test('username and email count as one account', async () => {
        const form = await loginForm(server, freshAddress());
        for (let i = 0; i < 10; i++) assert.equal((await post(form, i % 2 ? 'carol' : 'Carol@Example.com', 'wrong guess')).status, 401);
        assert.equal((await post(form, 'carol', PASSWORD)).status, 429);
        assert.equal((await post(form, 'carol@example.com', PASSWORD)).status, 429);
      });

      test('the counters never hold what was typed, not even for an unknown account', async () => {
        const typed = `Hunter2-${randomBytes(6).toString('hex')}`;
        const form = await loginForm(server, freshAddress());
        const before = limiterKeys.length;
        for (let i = 0; i < 11; i++) await post(form, typed, 'wrong guess');
        assert.equal((await post(form, typed, 'wrong guess')).status, 429, 'the unknown login is counted');
        const used = limiterKeys.slice(before);
        assert.ok(used.length > 0);
        for (const key of used) assert.ok(!key.toLowerCase().includes(typed.toLowerCase()), `the counter key "${key}" holds what was typed`);
        if (counters.name === 'Redis') {
          const redis = new Redis(redisUrl!);
          try {
            const keys = await redis.keys(`${redisNamespace(server.config)}:login:*`);
            assert.ok(keys.length > 0);
            for (const key of keys) assert.ok(!key.toLowerCase().includes(typed.toLowerCase()), `the Redis key "${key}" holds what was typed`);
          } finally {
            redis.disconnect();
          }
        }
      });

      test('a real login completes while a flood of wrong guesses runs against another account', async (t) => {
        const flood = await Promise.all(Array.from({ length: 5 }, () => loginForm(server, freshAddress())));
        const [quiet, busy] = [await loginForm(server, freshAddress()), await loginForm(server, freshAddress())];
        const timed = async (form: Awaited<ReturnType<typeof loginForm>>) => {
          const started = performance.now();
          const response = await post(form, 'dave', PASSWORD);
          return { status: response.status, ms: Math.round(performance.now() - started) };
        };
        const alone = await timed(quiet);
        const guesses = Array.from({ length: 150 }, (_, i) => post(flood[i % flood.length]!, 'alice', `wrong guess ${i}`));
        const real = await timed(busy);
        const counts = tally(await Promise.all(guesses));
        t.diagnostic(`flood of 150 against alice: ${JSON.stringify(counts)}; dave's login took ${real.ms} ms (${alone.ms} ms without the flood)`);
        assert.equal(alone.status, 303);
        assert.equal(real.status, 303);
        assert.ok((counts[401] ?? 0) <= 10, `${counts[401]} guesses were checked`);
      });
    });
  }
}
