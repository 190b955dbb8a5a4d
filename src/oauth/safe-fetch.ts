/**
 * One outbound HTTPS GET of a small document at a URL that a stranger chose (client ID
 * metadata documents, SPEC §4.8), without letting that stranger point Gatehouse at the
 * network behind it (SSRF):
 *
 * - https only; certificates checked against the system CAs plus NODE_EXTRA_CA_CERTS
 *   (Node's defaults; nothing here widens or narrows them).
 * - The host name is resolved once, here, and every address it resolves to must be on the
 *   public internet — refused before any connection is made. The connection then goes to
 *   those very addresses (a `lookup` that answers with them), so a DNS answer that changes
 *   between the check and the connect (rebinding) cannot move it elsewhere.
 * - No redirects (a 3xx is a refusal), one deadline for resolve + connect + headers + body,
 *   and a cap on the body, enforced while it arrives.
 *
 * Nothing here throws: every outcome is a value, and a refusal carries a reason for the
 * logs that never quotes the body.
 */
import { lookup as dnsLookup } from 'node:dns/promises';
import type { IncomingHttpHeaders } from 'node:http';
import { request } from 'node:https';
import type { LookupFunction } from 'node:net';
import ipaddr from 'ipaddr.js';

export interface ResolvedAddress {
  readonly address: string;
  readonly family: number;
}

/** Every address of a host name. Tests substitute their own to stand in for DNS. */
export type HostLookup = (hostname: string) => Promise<readonly ResolvedAddress[]>;

const systemLookup: HostLookup = (hostname) => dnsLookup(hostname, { all: true, verbatim: true });

export interface SafeFetchOptions {
  /** Development and tests only: skip the public-address rule. */
  readonly allowPrivateAddresses: boolean;
  /** One deadline for resolving, connecting, the headers and the whole body. */
  readonly timeoutMs: number;
  /** Bodies longer than this are refused (and stop being read at that point). */
  readonly maxBytes: number;
  readonly accept: string;
  readonly lookup?: HostLookup;
}

export type SafeFetchResult =
  | { readonly ok: true; readonly headers: IncomingHttpHeaders; readonly body: Buffer }
  | { readonly ok: false; readonly reason: string };

const refused = (reason: string): SafeFetchResult => ({ ok: false, reason });

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
    if (options.all) callback(null, addresses.map(({ address, family }) => ({ address, family })));
    else callback(null, first!.address, first!.family);
  };
}

function abortable<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise((resolve, reject) => {
    signal.addEventListener('abort', () => reject(signal.reason), { once: true });
    promise.then(resolve, reject);
  });
}

function errorCode(error: unknown): string {
  return (error as { code?: string }).code ?? (error as Error).message ?? String(error);
}

/** GETs `url` under the rules above; a 200 with its body, or a refusal with its reason. */
export async function safeFetch(url: URL, options: SafeFetchOptions): Promise<SafeFetchResult> {
  if (url.protocol !== 'https:') return refused('the URL is not https');
  const signal = AbortSignal.timeout(options.timeoutMs);
  const timedOut = `no complete answer within ${options.timeoutMs} ms`;
  const hostname = url.hostname.replace(/^\[(.*)\]$/, '$1');

  let addresses: readonly ResolvedAddress[];
  try {
    addresses = await abortable((options.lookup ?? systemLookup)(hostname), signal);
  } catch (error) {
    return refused(signal.aborted ? timedOut : `${hostname} does not resolve (${errorCode(error)})`);
  }
  if (addresses.length === 0) return refused(`${hostname} does not resolve`);
  if (!options.allowPrivateAddresses) {
    for (const { address } of addresses) {
      const range = nonPublicRange(address);
      if (range !== null) return refused(`${hostname} resolves to ${address}, which is not a public address (${range})`);
    }
  }

  return new Promise((resolve) => {
    const req = request(
      url,
      {
        method: 'GET',
        headers: { accept: options.accept, 'user-agent': 'Gatehouse' },
        agent: false, // a fresh connection: a pooled one could have been opened to an address checked under other rules
        lookup: pinnedLookup(addresses),
        signal,
      },
      (res) => {
        const status = res.statusCode ?? 0;
        const stop = (reason: string) => {
          req.destroy();
          resolve(refused(reason));
        };
        if (status >= 300 && status < 400) return stop(`answered ${status}, a redirect (not followed)`);
        if (status !== 200) return stop(`answered HTTP ${status}`);
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
        res.on('end', () => resolve({ ok: true, headers: res.headers, body: Buffer.concat(chunks) }));
        // After 'end' these change nothing: a promise settles once.
        res.on('error', (error) => resolve(refused(signal.aborted ? timedOut : `the answer broke off (${errorCode(error)})`)));
        res.on('close', () => resolve(refused(signal.aborted ? timedOut : 'the answer broke off')));
      },
    );
    req.on('error', (error) => resolve(refused(signal.aborted ? timedOut : `could not fetch (${errorCode(error)})`)));
    req.end();
  });
}
