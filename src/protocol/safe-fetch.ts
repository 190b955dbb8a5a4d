/**
 * One outbound HTTPS GET of a small document at a URL that a stranger chose (client ID
 * metadata documents, SPEC §4.8) — or one POST of a form (back-channel logout, §4.10) —
 * without letting that stranger point Gatehouse at the network behind it (SSRF):
 *
 * - https only; certificates checked against the system CAs plus NODE_EXTRA_CA_CERTS
 *   (Node's defaults; nothing here widens or narrows them).
 * - The host name is resolved once, here (by DNS queries on the event loop that are
 *   cancelled at the deadline: dnsHostLookup), and every address it resolves to must be on
 *   the public internet — refused before any connection is made. The connection then goes to
 *   those very addresses (a `lookup` that answers with them), so a DNS answer that changes
 *   between the check and the connect (rebinding) cannot move it elsewhere.
 * - No redirects (a 3xx is a refusal), one deadline for resolve + connect + headers + body,
 *   and a cap on the body, enforced while it arrives.
 *
 * Nothing here throws: every outcome is a value, and a refusal carries a reason for the
 * logs that never quotes the body, and whether it was definitive (SafeFetchResult).
 */
import { Resolver } from 'node:dns/promises';
import type { IncomingHttpHeaders } from 'node:http';
import type { RequestOptions } from 'node:https';
import { isIP, type LookupFunction, type TcpNetConnectOpts } from 'node:net';
import ipaddr from 'ipaddr.js';
import { abortable } from './abortable.ts';

export interface ResolvedAddress {
  readonly address: string;
  readonly family: number;
}

/**
 * Every address of a host name; gives up (rejects) once `signal` aborts. Tests substitute
 * their own to stand in for DNS. An error whose `code` is ENOTFOUND or ENODATA means the
 * name has no address (a definitive answer); any other is a failure to get an answer.
 */
export type HostLookup = (hostname: string, signal: AbortSignal) => Promise<readonly ResolvedAddress[]>;

/** Names under `localhost` are loopback by definition (RFC 6761 §6.3), and DNS is not asked about them. */
const LOOPBACK: readonly ResolvedAddress[] = [
  { address: '127.0.0.1', family: 4 },
  { address: '::1', family: 6 },
];
/** DNS answers that say the name has no address, as opposed to no answer (a timeout, a server failure). */
const NO_SUCH_NAME = new Set(['ENOTFOUND', 'ENODATA']);

/**
 * A HostLookup that asks the DNS servers (those of /etc/resolv.conf, or `servers`) through
 * c-ares (`dns.Resolver`), not the system's getaddrinfo (`dns.lookup`): getaddrinfo runs on
 * libuv's thread pool, a handful at a time, cannot be cancelled, and goes on for up to ~10 s
 * after we have given up on it — while every other look-up of the process (the database's,
 * Redis's) and everything else on that pool (password hashing) waits behind it. A resolver's
 * queries are sockets on the event loop, and `cancel()` ends them at the deadline. Such a
 * resolver reads no /etc/hosts: IP literals need no look-up, and `localhost` names are
 * loopback (above); any other name must be in DNS, as a public document's host is.
 */
export function dnsHostLookup(options: { readonly servers?: readonly string[] } = {}): HostLookup {
  return async (hostname, signal) => {
    const family = isIP(hostname);
    if (family !== 0) return [{ address: hostname, family }];
    const name = hostname.toLowerCase().replace(/\.$/, '');
    if (name === 'localhost' || name.endsWith('.localhost')) return LOOPBACK;
    signal.throwIfAborted();
    // One resolver per look-up, so that cancel() ends this look-up's queries and no other's.
    const resolver = new Resolver({ timeout: 1000, tries: 2 });
    if (options.servers) resolver.setServers(options.servers);
    const cancel = () => resolver.cancel();
    signal.addEventListener('abort', cancel, { once: true });
    try {
      const [v4, v6] = await Promise.allSettled([resolver.resolve4(name), resolver.resolve6(name)]);
      signal.throwIfAborted(); // cancelled: the deadline's reason, not c-ares's ECANCELLED
      const addresses = [
        ...(v4.status === 'fulfilled' ? v4.value.map((address) => ({ address, family: 4 })) : []),
        ...(v6.status === 'fulfilled' ? v6.value.map((address) => ({ address, family: 6 })) : []),
      ];
      if (addresses.length > 0) return addresses;
      const errors = [v4, v6].flatMap((result) => (result.status === 'rejected' ? [result.reason as NodeJS.ErrnoException] : []));
      throw errors.find((error) => !NO_SUCH_NAME.has(error.code ?? '')) ?? errors[0] ?? Object.assign(new Error(`${name} has no address`), { code: 'ENODATA' });
    } finally {
      signal.removeEventListener('abort', cancel);
    }
  };
}

const systemLookup = dnsHostLookup();

export interface SafeFetchOptions {
  /** Development and tests only: skip the public-address rule. */
  readonly allowPrivateAddresses: boolean;
  /** One deadline for resolving, connecting, the headers and the whole body. */
  readonly timeoutMs: number;
  /** Bodies longer than this are refused (and stop being read at that point). */
  readonly maxBytes: number;
  readonly accept: string;
  readonly lookup?: HostLookup;
  /** POST this form instead of a GET; a 204 is then a success too. */
  readonly form?: URLSearchParams;
  /**
   * A request a relying-party library made (the upstream leg of a login, SPEC §4.13): its
   * method, headers and body as given; every status it gets back is handed back, for the
   * library to read the provider's error responses (redirects are still refused).
   */
  readonly request?: { readonly method: string; readonly headers: Readonly<Record<string, string>>; readonly body?: string };
  /** An administrator's URL (validated as https, or http on loopback, when registered): http is allowed. */
  readonly allowHttp?: boolean;
}

/**
 * A refusal is `transient` when no definitive answer came (SPEC §4.8): the deadline passed,
 * DNS gave no answer, the connection failed or broke off, or the host said "not now" (408,
 * 429, 5xx). Definitive are what the host did answer (a redirect, another status, an
 * oversized or encoded body), a name that does not exist, a non-public address, and a
 * certificate that does not hold — so a failure nobody classified is a refusal (fails closed).
 */
export type SafeFetchResult =
  | { readonly ok: true; readonly status: number; readonly headers: IncomingHttpHeaders; readonly body: Buffer }
  | { readonly ok: false; readonly reason: string; readonly transient: boolean };

const refused = (reason: string): SafeFetchResult => ({ ok: false, reason, transient: false });
const unanswered = (reason: string): SafeFetchResult => ({ ok: false, reason, transient: true });

/** Connection failures that say nothing about the document: the host may answer next time. */
const NETWORK_FAILURES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ECONNABORTED', 'EHOSTUNREACH', 'EHOSTDOWN', 'ENETUNREACH', 'ENETDOWN', 'ETIMEDOUT', 'EPIPE']);

/** IPv6 global unicast (RFC 4291 §2.4): everything outside it is special-purpose or unassigned. */
const GLOBAL_UNICAST_V6 = ipaddr.parseCIDR('2000::/3');

/**
 * Why `address` is not a public internet address — the name of its special-purpose range
 * (loopback, private, linkLocal, carrierGradeNat, uniqueLocal, multicast, reserved, …) —
 * or null when it is one. An IPv4-mapped IPv6 address is judged as the IPv4 address it carries.
 */
export function nonPublicRange(address: string): string | null {
  if (!ipaddr.isValid(address)) return 'not an IP address';
  const ip = ipaddr.process(address);
  const range = ip.range();
  if (range !== 'unicast') return range;
  if (ip.kind() === 'ipv6' && !ip.match(GLOBAL_UNICAST_V6)) return 'not global unicast';
  return null;
}

/** A `lookup` for the socket that answers with the addresses already checked, and never asks DNS again. */
function pinnedLookup(addresses: readonly ResolvedAddress[]): LookupFunction {
  const [first] = addresses;
  return (_hostname, options, callback) => {
    if (options.all)
      callback(
        null,
        addresses.map(({ address, family }) => ({ address, family })),
      );
    else callback(null, first!.address, first!.family);
  };
}

function errorCode(error: unknown): string {
  return (error as { code?: string }).code ?? (error as Error).message ?? String(error);
}

/** GETs `url` (or POSTs `options.form` to it) under the rules above; a 200 with its body, or a refusal with its reason. */
export async function safeFetch(url: URL, options: SafeFetchOptions): Promise<SafeFetchResult> {
  const http = url.protocol === 'http:' && options.allowHttp === true;
  if (url.protocol !== 'https:' && !http) return refused('the URL is not https');
  const signal = AbortSignal.timeout(options.timeoutMs);
  const timedOut = `no complete answer within ${options.timeoutMs} ms`;
  const hostname = url.hostname.replace(/^\[(.*)\]$/, '$1');

  let addresses: readonly ResolvedAddress[];
  try {
    addresses = await abortable((options.lookup ?? systemLookup)(hostname, signal), signal);
  } catch (error) {
    if (signal.aborted) return unanswered(timedOut);
    const code = errorCode(error);
    return NO_SUCH_NAME.has(code) ? refused(`${hostname} does not resolve (${code})`) : unanswered(`${hostname} could not be resolved (${code})`);
  }
  if (addresses.length === 0) return refused(`${hostname} does not resolve`);
  if (!options.allowPrivateAddresses) {
    for (const { address } of addresses) {
      const range = nonPublicRange(address);
      if (range !== null) return refused(`${hostname} resolves to ${address}, which is not a public address (${range})`);
    }
  }

  return new Promise((resolve) => {
    const { request } = options;
    const body = request ? request.body : options.form?.toString();
    // Not imported: node:http's module facade loads all of undici, which a command never fetching pays for at start-up.
    const send = http ? process.getBuiltinModule('node:http').request : process.getBuiltinModule('node:https').request;
    const requestOptions: RequestOptions & Pick<TcpNetConnectOpts, 'autoSelectFamilyAttemptTimeout'> = {
      method: request?.method ?? (body === undefined ? 'GET' : 'POST'),
      headers: {
        accept: options.accept,
        'user-agent': 'Gatehouse',
        ...(body === undefined || request ? {} : { 'content-type': 'application/x-www-form-urlencoded' }),
        ...request?.headers,
        ...(body === undefined ? {} : { 'content-length': Buffer.byteLength(body) }),
      },
      agent: false, // a fresh connection: a pooled one could have been opened to an address checked under other rules
      lookup: pinnedLookup(addresses),
      // Node tries a host's addresses one at a time and abandons an attempt when this timer fires (its
      // default: 250 ms). An event loop busy for that long — an instance under load — fires it although
      // the connection was made, and a reachable host would be reported unreachable; so each address
      // gets an equal share of the deadline.
      autoSelectFamilyAttemptTimeout: Math.max(10, Math.floor(options.timeoutMs / addresses.length)),
      signal,
    };
    const req = send(url, requestOptions, (res) => {
      const status = res.statusCode ?? 0;
      const stop = (reason: string, transient = false) => {
        req.destroy();
        resolve(transient ? unanswered(reason) : refused(reason));
      };
      if (status >= 300 && status < 400) return stop(`answered ${status}, a redirect (not followed)`);
      if (!request) {
        if (status === 408 || status === 429 || status >= 500) return stop(`answered HTTP ${status}`, true);
        if (status !== 200 && !(body !== undefined && status === 204)) return stop(`answered HTTP ${status}`);
      }
      const encoding = res.headers['content-encoding'];
      if (encoding !== undefined && encoding !== 'identity') return stop(`sent a ${encoding}-encoded body, which was not asked for`);
      const tooLong = `the body is longer than ${options.maxBytes} bytes`;
      if (Number(res.headers['content-length']) > options.maxBytes) return stop(tooLong);
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size > options.maxBytes) stop(tooLong);
        else chunks.push(chunk);
      });
      res.on('end', () => resolve({ ok: true, status, headers: res.headers, body: Buffer.concat(chunks) }));
      // After 'end' these change nothing: a promise settles once.
      res.on('error', (error) => resolve(unanswered(signal.aborted ? timedOut : `the answer broke off (${errorCode(error)})`)));
      res.on('close', () => resolve(unanswered(signal.aborted ? timedOut : 'the answer broke off')));
    });
    req.on('error', (error) => {
      if (signal.aborted) return resolve(unanswered(timedOut));
      const code = errorCode(error);
      resolve(NETWORK_FAILURES.has(code) ? unanswered(`could not connect (${code})`) : refused(`could not fetch (${code})`));
    });
    req.end(body);
  });
}

/**
 * Bounds on how long a fetched document — a client ID metadata document, a trusted issuer's
 * or client's key set or discovery document — is trusted, whatever its Cache-Control says;
 * seconds (SPEC §4.8, §4.11: between 5 minutes and 24 hours, an hour without a max-age).
 */
export const FETCHED_CACHE_MIN_SECONDS = 300;
export const FETCHED_CACHE_MAX_SECONDS = 86_400;
/** Without a max-age. */
export const FETCHED_CACHE_DEFAULT_SECONDS = 3600;

/**
 * How long a fetched document may be cached, in seconds: its `Cache-Control: max-age`
 * (`no-store` and `no-cache` count as 0), bounded to [FETCHED_CACHE_MIN_SECONDS,
 * FETCHED_CACHE_MAX_SECONDS]; FETCHED_CACHE_DEFAULT_SECONDS without either.
 */
export function cacheLifetimeSeconds(cacheControl: string | undefined): number {
  const directives = (cacheControl ?? '')
    .toLowerCase()
    .split(',')
    .map((directive) => directive.trim());
  const maxAge = directives.map((directive) => /^max-age\s*=\s*"?(\d+)"?$/.exec(directive)?.[1]).find((value) => value !== undefined);
  const seconds =
    directives.includes('no-store') || directives.includes('no-cache') ? 0 : maxAge !== undefined ? Number(maxAge) : FETCHED_CACHE_DEFAULT_SECONDS;
  return Math.min(FETCHED_CACHE_MAX_SECONDS, Math.max(FETCHED_CACHE_MIN_SECONDS, seconds));
}
