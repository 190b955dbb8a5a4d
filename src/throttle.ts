/**
 * Throttling of password guessing and token endpoint floods (SPEC §4.5, issue 4), counted
 * in Redis when REDIS_URL is set — so every instance sees the same counts — and in process
 * memory otherwise: the serving process's own, or, for the workers of `WORKERS=n`, the
 * primary process's, which every worker asks over the cluster's IPC channel (src/cluster.ts),
 * so that n workers allow what one process would, not n times as much. Counters are keyed on the account (never on what was typed in clear:
 * see loginAccountKey) and on the client address, IPv6 grouped by /64 (one host usually
 * holds a whole /64). If the counter store fails, requests
 * are refused (fail closed) rather than let through unthrottled.
 */
import cluster from 'node:cluster';
import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';
import ipaddr from 'ipaddr.js';
import { RateLimiterCluster, RateLimiterMemory, RateLimiterRedis, RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';
import { redisNamespace, type Config } from './config.ts';
import { lookupKey } from './store/users.ts';

/**
 * A request refused for now, with the seconds to wait for the `Retry-After` header: 429 when
 * the caller is over its limit, 503 when the server is too busy for anyone (see passwords.ts).
 * Not an OAuth error: where the protocol's answer is made, http/errors.ts maps it to one.
 */
export class Throttled extends Error {
  readonly retryAfter: number;
  readonly status: 429 | 503;
  constructor(retryAfterMs: number, status: 429 | 503 = 429) {
    super(status === 429 ? 'too many requests: try again later' : 'the server is busy: try again in a moment');
    this.name = 'Throttled';
    this.status = status;
    this.retryAfter = Math.max(1, Math.ceil(retryAfterMs / 1000));
  }
}

/**
 * The counters could not be asked (Redis unreachable): the request is refused, never let
 * through unchecked (503, mapped in http/errors.ts). `detail` is for the log.
 */
export class ThrottleUnavailable extends Error {
  readonly detail: string;
  constructor(cause: unknown) {
    super('the service is temporarily unavailable');
    this.name = 'ThrottleUnavailable';
    this.detail = `throttle store failed: ${(cause as Error).message}`;
  }
}

export interface Throttle {
  /**
   * Reserves one login attempt on the account's counter and the address's, before the
   * password is checked, so that simultaneous attempts see each other; refuses it
   * (Throttled) when either counter is used up. The reservation stays when the password
   * was wrong: that is the failure counted.
   */
  reserveLogin(account: string, address: string): Promise<void>;
  /** The password was right: the account's failures are cleared, the address gets its attempt back. */
  loginSucceeded(account: string, address: string): Promise<void>;
  /** The password was never checked (the server was too busy): both attempts are given back. */
  releaseLogin(account: string, address: string): Promise<void>;
  /** Counts a token endpoint request against its address; refuses it over the limit. */
  tokenRequestFrom(address: string): Promise<void>;
  /**
   * Counts a token endpoint request against the client it has proven to come from (never
   * one it merely names: anyone could spend that client's budget); refuses it over the limit.
   */
  tokenRequestOf(clientId: string): Promise<void>;
  /**
   * Counts a user code entered at /device as a wrong guess by the user and from the address
   * before it is checked, refusing it once either has reached its limit (the login limits,
   * in counters of their own): reserving first, concurrent guesses cannot outrun the limit.
   */
  reserveUserCodeGuess(userId: string, address: string): Promise<void>;
  /** The code was right after all: gives the reserved guess back. */
  userCodeAccepted(userId: string, address: string): Promise<void>;
  /**
   * Counts a request for mail to a person — a forgotten password, a verification link — against
   * the account (loginAccountKey) and the address, the login limits in counters of their own;
   * refuses it (Throttled) once either is used up. Every request counts, sent or not. What
   * `anyone` may ask (a reset) and what only `the person` may (verifying or changing their
   * address) count apart, so that strangers asking for resets cannot stop the person's own.
   */
  mailRequest(account: string, address: string, asker: 'anyone' | 'the person'): Promise<void>;
  /** Counts a dynamic client registration against its address (TOKEN_REQUESTS_PER_ADDRESS a minute); refuses it over the limit. */
  registrationFrom(address: string): Promise<void>;
}

/** How long a worker waits for the primary's counters before refusing the request. */
const CLUSTER_TIMEOUT_MS = 1000;

export function createThrottle(config: Config, redis: Redis | null): Throttle {
  const limiter = (name: string, points: number, duration: number): RateLimiterAbstract | null => {
    if (points === 0) return null;
    const options = { keyPrefix: `${redisNamespace(config)}:${name}`, points, duration };
    if (redis) return new RateLimiterRedis({ ...options, storeClient: redis });
    // The primary answers within milliseconds; one that does not is treated like a failed Redis (503).
    return cluster.isWorker ? new RateLimiterCluster({ ...options, timeoutMs: CLUSTER_TIMEOUT_MS }) : new RateLimiterMemory(options);
  };
  const { throttle } = config;
  const loginAccount = limiter('login:account', throttle.loginFailuresPerAccount, throttle.loginWindowSeconds);
  const loginAddress = limiter('login:address', throttle.loginFailuresPerAddress, throttle.loginWindowSeconds);
  const userCodeUser = limiter('user-code:user', throttle.loginFailuresPerAccount, throttle.loginWindowSeconds);
  const userCodeAddress = limiter('user-code:address', throttle.loginFailuresPerAddress, throttle.loginWindowSeconds);
  const tokenClient = limiter('token:client', throttle.tokenRequestsPerClient, 60);
  const tokenAddress = limiter('token:address', throttle.tokenRequestsPerAddress, 60);
  const mailCounters = (asker: string) => ({
    account: limiter(`mail:${asker}:account`, throttle.loginFailuresPerAccount, throttle.loginWindowSeconds),
    address: limiter(`mail:${asker}:address`, throttle.loginFailuresPerAddress, throttle.loginWindowSeconds),
  });
  const mail = { anyone: mailCounters('anyone'), 'the person': mailCounters('person') };
  const registrationAddress = limiter('register:address', throttle.tokenRequestsPerAddress, 60);

  const giveBack = async (counter: RateLimiterAbstract | null, key: string) => {
    if (counter) await failClosed(() => counter.reward(key));
  };
  /** Counts one request; refuses it (Throttled) over the limit. */
  const consume = async (counter: RateLimiterAbstract | null, key: string) => {
    if (!counter) return;
    try {
      await counter.consume(key);
    } catch (error) {
      if (!(error instanceof RateLimiterRes)) throw unavailable(error);
      throw new Throttled(error.msBeforeNext);
    }
  };

  /**
   * Takes one point from each of a pair of counters (a person's, an address's) before the
   * check they guard, or from neither: if the second refuses, the first gets its point back.
   */
  const reserveBoth = async (first: RateLimiterAbstract | null, firstKey: string, second: RateLimiterAbstract | null, secondKey: string) => {
    await consume(first, firstKey);
    try {
      await consume(second, secondKey);
    } catch (error) {
      await giveBack(first, firstKey);
      throw error;
    }
  };

  const releaseBoth = async (first: RateLimiterAbstract | null, firstKey: string, second: RateLimiterAbstract | null, secondKey: string) => {
    await giveBack(first, firstKey);
    await giveBack(second, secondKey);
  };

  return {
    reserveLogin: (account, address) => reserveBoth(loginAccount, account, loginAddress, addressKey(address)),
    async loginSucceeded(account, address) {
      if (loginAccount) await failClosed(() => loginAccount.delete(account));
      await giveBack(loginAddress, addressKey(address));
    },
    releaseLogin: (account, address) => releaseBoth(loginAccount, account, loginAddress, addressKey(address)),
    tokenRequestFrom: (address) => consume(tokenAddress, addressKey(address)),
    tokenRequestOf: (clientId) => consume(tokenClient, clientId),
    reserveUserCodeGuess: (userId, address) => reserveBoth(userCodeUser, userId, userCodeAddress, addressKey(address)),
    userCodeAccepted: (userId, address) => releaseBoth(userCodeUser, userId, userCodeAddress, addressKey(address)),
    mailRequest: (account, address, asker) => reserveBoth(mail[asker].account, account, mail[asker].address, addressKey(address)),
    registrationFrom: (address) => consume(registrationAddress, addressKey(address)),
  };
}

async function failClosed<T>(operation: () => Promise<T>): Promise<T> {
  try {
    return await operation();
  } catch (error) {
    throw unavailable(error);
  }
}

function unavailable(error: unknown): ThrottleUnavailable {
  return new ThrottleUnavailable(error);
}

/**
 * The key a login attempt is counted under on the account counter: the account, once the
 * login names one, so that its username and its email share one counter; otherwise what
 * was typed, normalized as names are compared and hashed, because it may be a password
 * typed into the wrong field and the counters (in Redis, say) must not hold it.
 */
export function loginAccountKey(userId: string | undefined, login: string): string {
  return userId !== undefined ? `user:${userId}` : `typed:${createHash('sha256').update(lookupKey(login)).digest('base64url')}`;
}

/**
 * The key an address is counted under: IPv4 as is (also when IPv4-mapped), IPv6 reduced to
 * its /64 prefix. A value that is not an address (a proxy's garbled header) is its own key.
 */
export function addressKey(ip: string): string {
  if (!ipaddr.isValid(ip)) return ip;
  const address = ipaddr.process(ip);
  if (!(address instanceof ipaddr.IPv6)) return address.toString();
  return `${address.parts
    .slice(0, 4)
    .map((part) => part.toString(16))
    .join(':')}::/64`;
}
