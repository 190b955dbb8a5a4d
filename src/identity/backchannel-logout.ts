/**
 * Back-channel logout (OpenID Connect Back-Channel Logout 1.0, SPEC §4.10): when a session
 * ends, every client that got an ID token in it is told so by a logout token POSTed to its
 * `backchannel_logout_uri`.
 *
 * The deliveries are queued in the transaction that ends the session (store/sessions.ts
 * `deleteSessions`), so the logout itself never waits for them. Every server instance then
 * delivers what is due (events/deliveries.ts). An attempt is claimed by one conditional update (store/backchannel-logouts.ts), so of several
 * instances exactly one makes it. Each attempt has 5 seconds; a failure with no definitive
 * answer (a timeout, no connection, a 5xx) is retried after a back-off, up to 3 attempts.
 * Every delivery and failure is in the audit trail, never the token.
 *
 * A client no administrator registered gets its logout through the guarded fetch of §4.8
 * (public addresses only, https, no redirects): its URL is a stranger's choice. An
 * administrator's client may use private addresses, and http on loopback.
 */
import { randomUUID } from 'node:crypto';
import type { Audit } from '../audit.ts';
import { accountUri, type Config } from '../config.ts';
import type { ContextLogger, Deliveries } from '../context.ts';
import { deliveryLoop, inBatches, sideBySide } from '../events/deliveries.ts';
import { safeFetch } from '../protocol/safe-fetch.ts';
import {
  claimBackchannelLogout,
  dueBackchannelLogouts,
  finishBackchannelLogout,
  type BackchannelLogoutKey,
  type ClaimedBackchannelLogout,
} from '../store/backchannel-logouts.ts';
import { findClient, isSwitchedOff } from '../store/clients.ts';
import type { Database } from '../store/schema.ts';
import type { Kysely } from 'kysely';
import type { KeyRing } from './keys.ts';

/** The `typ` of a logout token's header (Back-Channel Logout 1.0 §2.4). */
export const LOGOUT_TOKEN_TYPE = 'logout+jwt';
/** The one member of a logout token's `events` claim. */
export const BACKCHANNEL_LOGOUT_EVENT = 'http://schemas.openid.net/event/backchannel-logout';
/** A logout token expires this soon after it is made (SPEC: at most 2 minutes). */
const LOGOUT_TOKEN_TTL_S = 120;
/** One deadline per attempt: resolving, connecting, sending and the answer. */
export const DELIVERY_TIMEOUT_MS = 5000;
export const DELIVERY_ATTEMPTS = 3;
/** After failed attempt n, the next is due 2^n seconds later: 2 s, then 4 s. */
const retryDelayMs = (attempt: number) => 1000 * 2 ** attempt;
/** How long a claim holds: well past an attempt's deadline, so a crashed instance's claim lapses and another retries. */
const CLAIM_MS = 30_000;
/** Deliveries made at once by an instance. */
const BATCH = 20;
/** The receiver's answer is not read beyond this. */
const MAX_ANSWER_BYTES = 65_536;

export interface BackchannelLogoutDeps {
  readonly config: Config;
  readonly db: Kysely<Database>;
  readonly keys: KeyRing;
  readonly audit: Audit;
  readonly now: () => number;
  readonly log: ContextLogger;
}

/** The logout token for `client` about the session `sid` of `sub`, signed like its ID tokens. */
export async function logoutToken(
  deps: Pick<BackchannelLogoutDeps, 'config' | 'keys' | 'now'>,
  client: { id: string; id_token_alg: 'ES256' | 'RS256' },
  sub: string,
  sid: string,
): Promise<string> {
  const iat = Math.floor(deps.now() / 1000);
  return deps.keys.signJwt(
    client.id_token_alg,
    { typ: LOGOUT_TOKEN_TYPE },
    { iss: deps.config.publicUrl, aud: client.id, iat, exp: iat + LOGOUT_TOKEN_TTL_S, jti: randomUUID(), sub, sid, events: { [BACKCHANNEL_LOGOUT_EVENT]: {} } },
  );
}

type Outcome = { delivered: true } | { delivered: false; reason: string; transient: boolean };

export function backchannelLogouts(deps: BackchannelLogoutDeps): Deliveries {
  const { db, now, log } = deps;

  async function attempt(claimed: ClaimedBackchannelLogout): Promise<Outcome> {
    const client = await findClient(db, claimed.client_id);
    const uri = client && !isSwitchedOff(client) ? client.backchannel_logout_uri : null;
    if (!client || uri === null) return { delivered: false, reason: 'the client has no back-channel logout URL any more', transient: false };
    const registered = client.kind === 'registered';
    const token = await logoutToken(deps, client, accountUri(claimed.username, deps.config), claimed.sid);
    const answer = await safeFetch(new URL(uri), {
      allowPrivateAddresses: registered || deps.config.clientMetadata.allowPrivateAddresses,
      allowHttp: registered,
      timeoutMs: DELIVERY_TIMEOUT_MS,
      maxBytes: MAX_ANSWER_BYTES,
      accept: '*/*',
      form: new URLSearchParams({ logout_token: token }),
    });
    return answer.ok ? { delivered: true } : { delivered: false, reason: answer.reason, transient: answer.transient };
  }

  /** Makes one attempt if this instance can claim it; whether it could. */
  async function deliver(key: BackchannelLogoutKey): Promise<boolean> {
    const claimed = await claimBackchannelLogout(db, key, now(), now() + CLAIM_MS, DELIVERY_ATTEMPTS);
    if (!claimed) return false; // another instance has it, or it is done
    const outcome = await attempt(claimed).catch((error: Error): Outcome => ({
      delivered: false,
      reason: `could not send it (${error.message})`,
      transient: true,
    }));
    // The address of the request that ended the session: the delivery is its consequence.
    const about = { userId: claimed.user_id, clientId: claimed.client_id, address: claimed.address };
    if (outcome.delivered) {
      await finishBackchannelLogout(db, claimed, { state: 'delivered' });
      await deps.audit({ type: 'backchannel_logout_delivered', ...about, detail: { sid: claimed.sid, attempt: claimed.attempts } });
      return true;
    }
    const retrying = outcome.transient && claimed.attempts < DELIVERY_ATTEMPTS;
    await finishBackchannelLogout(db, claimed, retrying ? { retryAt: now() + retryDelayMs(claimed.attempts) } : { state: 'failed' });
    log.warn(
      { event: 'backchannel_logout_failed', client: claimed.client_id, attempt: claimed.attempts, reason: outcome.reason, retrying },
      'back-channel logout failed',
    );
    await deps.audit({
      type: 'backchannel_logout_failed',
      ...about,
      detail: { sid: claimed.sid, attempt: claimed.attempts, reason: outcome.reason, retrying },
    });
    return true;
  }

  return deliveryLoop(
    'back-channel logout',
    () =>
      inBatches(
        BATCH,
        (limit) => dueBackchannelLogouts(db, now(), limit, DELIVERY_ATTEMPTS),
        (keys) => sideBySide(keys, deliver),
      ),
    log,
  );
}
