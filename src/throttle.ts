/**
 * Throttling of password guessing and token endpoint floods (SPEC §4.5, issue 4), counted
 * in Redis when REDIS_URL is set — so every instance sees the same counts — and in process
 * memory otherwise. Counters are keyed on the account and on the client address, IPv6
 * grouped by /64 (one host usually holds a whole /64). If the counter store fails, requests
 * are refused (fail closed) rather than let through unthrottled.
 */
import type { Redis } from 'ioredis';
import ipaddr from 'ipaddr.js';
import { RateLimiterMemory, RateLimiterRedis, RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';
import { redisNamespace, type Config } from './config.ts';
import { OAuthError } from './oauth/errors.ts';
import { lookupKey } from './store/users.ts';

/** 429 with the seconds to wait, for the `Retry-After` header. */
export class Throttled extends OAuthError {
  readonly retryAfter: number;
  constructor(retryAfterMs: number) {
    super('temporarily_unavailable', 'too many requests: try again later', undefined, 429);
    this.retryAfter = Math.max(1, Math.ceil(retryAfterMs / 1000));
  }
}

export interface Throttle {
  /** Refuses a login attempt while the account or the address has too many recent failures. */
  checkLogin(account: string, address: string): Promise<void>;
  loginFailed(account: string, address: string): Promise<void>;
  /** A successful login clears the account's failures (not the address's). */
  loginSucceeded(account: string): Promise<void>;
  /** Counts a token endpoint request against its address; refuses it over the limit. */
  tokenRequestFrom(address: string): Promise<void>;
  /**
   * Counts a token endpoint request against the client it has proven to come from (never
   * one it merely names: anyone could spend that client's budget); refuses it over the limit.
   */
  tokenRequestOf(clientId: string): Promise<void>;
  /** Counts a dynamic client registration against its address (TOKEN_REQUESTS_PER_ADDRESS a minute); refuses it over the limit. */
  registrationFrom(address: string): Promise<void>;
}

export function createThrottle(config: Config, redis: Redis | null): Throttle {
  const limiter = (name: string, points: number, duration: number): RateLimiterAbstract | null => {
    if (points === 0) return null;
    const options = { keyPrefix: `${redisNamespace(config)}:${name}`, points, duration };
    return redis ? new RateLimiterRedis({ ...options, storeClient: redis }) : new RateLimiterMemory(options);
  };
  const { throttle } = config;
  const loginAccount = limiter('login:account', throttle.loginFailuresPerAccount, throttle.loginWindowSeconds);
  const loginAddress = limiter('login:address', throttle.loginFailuresPerAddress, throttle.loginWindowSeconds);
  const tokenClient = limiter('token:client', throttle.tokenRequestsPerClient, 60);
  const tokenAddress = limiter('token:address', throttle.tokenRequestsPerAddress, 60);
  const registrationAddress = limiter('register:address', throttle.tokenRequestsPerAddress, 60);

  const blocked = async (counter: RateLimiterAbstract | null, key: string) => {
    if (!counter) return;
    const state = await failClosed(() => counter.get(key));
    if (state && state.consumedPoints >= counter.points) throw new Throttled(state.msBeforeNext);
  };
  const consume = async (counter: RateLimiterAbstract | null, key: string, refuse: boolean) => {
    if (!counter) return;
    try {
      await counter.consume(key);
    } catch (error) {
      if (!(error instanceof RateLimiterRes)) throw unavailable(error);
      if (refuse) throw new Throttled(error.msBeforeNext);
    }
  };

  return {
    async checkLogin(account, address) {
      await blocked(loginAccount, lookupKey(account));
      await blocked(loginAddress, addressKey(address));
    },
    async loginFailed(account, address) {
      await consume(loginAccount, lookupKey(account), false);
      await consume(loginAddress, addressKey(address), false);
    },
    async loginSucceeded(account) {
      if (loginAccount) await failClosed(() => loginAccount.delete(lookupKey(account)));
    },
    tokenRequestFrom: (address) => consume(tokenAddress, addressKey(address), true),
    tokenRequestOf: (clientId) => consume(tokenClient, clientId, true),
    registrationFrom: (address) => consume(registrationAddress, addressKey(address), true),
  };
}

async function failClosed<T>(operation: () => Promise<T>): Promise<T> {
  try {
    return await operation();
  } catch (error) {
    throw unavailable(error);
  }
}

function unavailable(error: unknown): OAuthError {
  return new OAuthError('temporarily_unavailable', 'the service is temporarily unavailable', `throttle store failed: ${(error as Error).message}`);
}

/**
 * The key an address is counted under: IPv4 as is (also when IPv4-mapped), IPv6 reduced to
 * its /64 prefix. A value that is not an address (a proxy's garbled header) is its own key.
 */
export function addressKey(ip: string): string {
  if (!ipaddr.isValid(ip)) return ip;
  const address = ipaddr.process(ip);
  if (!(address instanceof ipaddr.IPv6)) return address.toString();
  return `${address.parts.slice(0, 4).map((part) => part.toString(16)).join(':')}::/64`;
}
