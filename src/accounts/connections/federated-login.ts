/**
 * Who logs in through a connection (SPEC §4.13), once the upstream leg has said who the
 * provider's person is (upstream.ts):
 *
 * - An identity is (connection, provider's `sub`). A linked one logs its person in, unless
 *   they are disabled; their email, name and groups are refreshed from the provider.
 * - **Connect** (a logged-in person asked for it on /account/security): the identity is linked
 *   to them — unless it is someone else's already.
 * - An unknown identity whose email an account has: linked only when the connection has
 *   `--link-verified-email` and the provider says the address is verified. Otherwise nothing
 *   is linked — an unverified or merely matching address never takes an account over (the
 *   classic hole of federated login) — and the person may log in to that account first and
 *   then confirm the link (a pending identity, its own cookie, single use, ten minutes).
 * - Otherwise, with `--create-accounts`, a new person: username from the provider's preferred
 *   username or the address, made unique; no password.
 *
 * A login through a connection proves `fed` (and, with `--trust-mfa`, what the provider
 * proved). Whoever must show a second factor — a person who has one at Gatehouse, or whom
 * REQUIRE_SECOND_FACTOR covers — is asked for it exactly as after a password, unless the
 * provider's login counts as multi-factor here.
 */
import type { AppContext, ProviderTokens } from '../../context.ts';
import { isMultiFactor, mustHaveSecondFactor, type SignedIn } from '../../login.ts';
import { madeBy, type Actor } from '../../audit.ts';
import {
  deleteIdentity,
  endIdentitySessions,
  connectionEnabled,
  findIdentity,
  findPendingIdentity,
  insertIdentity,
  insertPendingIdentity,
  takePendingIdentity,
  touchIdentity,
} from '../../store/connections.ts';
import { deleteMember, insertMember } from '../../store/groups.ts';
import type { Connection, User } from '../../store/schema.ts';
import { findUserByEmail, findUserById, findUserByUsername, lookupKey, updateUser } from '../../store/users.ts';
import { hashIfWellFormed, mintToken } from '../../tokens.ts';
import { hasSecondFactor } from '../second-factors.ts';
import { startPendingLogin } from '../second-step.ts';
import { endSession, startSession } from '../sessions.ts';
import { requireRecentLogin } from '../recent-login.ts';
import { isUniqueViolation } from '../../store/database.ts';
import { AccountError, createAccount, displayNameOf, emailProblem } from '../users.ts';
import { keepsAWayToLogIn } from './password-login.ts';
import { keepTokensOfLogin } from './kept-tokens.ts';
import type { UpstreamIdentity } from './upstream.ts';

/** How long an identity waits for its person to log in to the account that has its email. */
export const PENDING_IDENTITY_TTL_MS = 10 * 60 * 1000;

export type FederatedOutcome =
  /** Logged in: the new session's token. */
  | { kind: 'session'; user: User; session: string }
  /** The second step comes first (a pending login's token), as after a password. */
  | { kind: 'second_step'; user: User; pending: string; next: 'code' | 'set_up' }
  /** **Connect**: the identity is now the person's (their session goes on). */
  | { kind: 'linked'; user: User }
  /** An account has the identity's email and may not be taken over: log in to it first (a pending identity's token). */
  | { kind: 'account_exists'; pendingIdentity: string }
  /** Refused, and why (the page says it). */
  | { kind: 'refused'; reason: 'account_disabled' | 'no_account' | 'linked_elsewhere' | 'has_other_identity' | 'connect_ended' | 'connection_disabled' };

export interface FederatedAttempt {
  identity: UpstreamIdentity;
  /** **Connect**: the person who asked to link the identity to themselves. */
  linkUserId: string | null;
  /** Who the browser is logged in as now (a Connect must finish in the session that started it). */
  signedIn: SignedIn | null;
  address: string;
  /** The session the request came with, if any: a login ends it. */
  previousSession: string | undefined;
  /** The provider's tokens of this login: kept once the identity is the person's, when the connection keeps them. */
  tokens: ProviderTokens;
}

/** The outcomes after which the identity is its person's: a login (done, or at its second step) or a Connect. */
const LINKED: ReadonlySet<FederatedOutcome['kind']> = new Set(['session', 'second_step', 'linked']);

/** A concurrent login of the same identity, or of the same address, made its account first. */
class Raced extends Error {
  override name = 'Raced';
}

export async function federatedLogin(ctx: AppContext, connection: Connection, attempt: FederatedAttempt): Promise<FederatedOutcome> {
  const outcome = await decideLogin(ctx, connection, attempt);
  if (LINKED.has(outcome.kind)) await keepTokensOfLogin(ctx, connection, attempt.identity.subject, attempt.tokens);
  return outcome;
}

async function decideLogin(ctx: AppContext, connection: Connection, attempt: FederatedAttempt): Promise<FederatedOutcome> {
  if (attempt.linkUserId !== null) return connect(ctx, connection, attempt.linkUserId, attempt);
  for (let tries = 1; ; tries++) {
    try {
      return await logIn(ctx, connection, attempt);
    } catch (error) {
      // Another callback made the account, or took the username or address, between our look and
      // our write: looking again finds what it made (the identity's owner, or the address's).
      if (tries === 3 || !(error instanceof Raced || error instanceof AccountError || isUniqueViolation(error))) throw error;
    }
  }
}

/**
 * **Connect**: links the identity to the person who asked — only in their own session, still
 * signed in and recently (a Connect abandoned and finished later by someone else at the same
 * browser links nothing).
 */
async function connect(ctx: AppContext, connection: Connection, linkUserId: string, attempt: FederatedAttempt): Promise<FederatedOutcome> {
  const { identity, address } = attempt;
  const detail = { connection: connection.id, by: 'connect' };
  const refused = async (reason: 'linked_elsewhere' | 'account_disabled' | 'has_other_identity' | 'connect_ended'): Promise<FederatedOutcome> => {
    await ctx.audit({ type: 'upstream_login_failed', userId: linkUserId, address, detail: { ...detail, reason } });
    return { kind: 'refused', reason };
  };
  const { signedIn } = attempt;
  if (signedIn?.user.id !== linkUserId || (await requireRecentLogin(ctx, signedIn)) === null) return refused('connect_ended');
  const existing = await findIdentity(ctx.db, connection.id, identity.subject);
  if (existing && existing.user_id !== linkUserId) return refused('linked_elsewhere');
  const { user } = signedIn;
  if (!existing) {
    if (!(await insertIdentity(ctx.db, { connectionId: connection.id, subject: identity.subject, userId: user.id, email: identity.email, now: ctx.now() })))
      return refused('has_other_identity');
    await ctx.audit({ type: 'identity_linked', actorId: user.id, userId: user.id, address, detail });
  }
  return { kind: 'linked', user };
}

/** Who the identity is here — its person, one whose address it may link to, or a new one — and their login. */
async function logIn(ctx: AppContext, connection: Connection, attempt: FederatedAttempt): Promise<FederatedOutcome> {
  const { identity, address } = attempt;
  const detail = { connection: connection.id };
  const existing = await findIdentity(ctx.db, connection.id, identity.subject);
  let user: User | undefined;
  if (existing) {
    user = await findUserById(ctx.db, existing.user_id);
  } else {
    const holder = identity.email === null ? undefined : await findUserByEmail(ctx.db, identity.email);
    if (holder) {
      if (connection.link_verified_email !== 1 || !identity.emailVerified) {
        const pending = mintToken('pendingIdentity');
        const now = ctx.now();
        await insertPendingIdentity(ctx.db, {
          id_hash: pending.hash,
          connection_id: connection.id,
          subject: identity.subject,
          email: identity.email,
          created_at: now,
          expires_at: now + PENDING_IDENTITY_TTL_MS,
        });
        await ctx.audit({ type: 'upstream_login_failed', userId: null, address, detail: { ...detail, reason: 'account_exists' } });
        return { kind: 'account_exists', pendingIdentity: pending.token };
      }
      if (
        !(await insertIdentity(ctx.db, { connectionId: connection.id, subject: identity.subject, userId: holder.id, email: identity.email, now: ctx.now() }))
      ) {
        // Linked meanwhile by a concurrent login: look again. Otherwise the person has another identity here.
        if (await findIdentity(ctx.db, connection.id, identity.subject)) throw new Raced('the identity was linked meanwhile');
        await ctx.audit({ type: 'upstream_login_failed', userId: holder.id, address, detail: { ...detail, reason: 'has_other_identity' } });
        return { kind: 'refused', reason: 'has_other_identity' };
      }
      await ctx.audit({ type: 'identity_linked', userId: holder.id, address, detail: { ...detail, by: 'verified_email' } });
      user = holder;
    } else if (connection.create_accounts === 1) {
      user = await createFederatedAccount(ctx, connection, identity);
      await ctx.audit({ type: 'user_created', userId: user.id, address, detail: { ...detail, admin: false } });
      await ctx.audit({ type: 'identity_linked', userId: user.id, address, detail: { ...detail, by: 'created' } });
    } else {
      await ctx.audit({ type: 'upstream_login_failed', userId: null, address, detail: { ...detail, reason: 'no_account' } });
      return { kind: 'refused', reason: 'no_account' };
    }
  }
  if (!user || user.disabled) {
    await ctx.audit({ type: 'upstream_login_failed', userId: user?.id ?? null, address, detail: { ...detail, reason: 'account_disabled' } });
    return { kind: 'refused', reason: 'account_disabled' };
  }
  user = await refreshProfile(ctx, connection, user, identity);
  return logInThrough(ctx, connection, user, identity.amr, attempt);
}

/** Starts the session of a login through the connection — or its second step, when one is due. */
async function logInThrough(ctx: AppContext, connection: Connection, user: User, amr: string, attempt: FederatedAttempt): Promise<FederatedOutcome> {
  const detail = { connection: connection.id, amr };
  if (!isMultiFactor(amr)) {
    const hasCode = await hasSecondFactor(ctx, user.id);
    if (hasCode || mustHaveSecondFactor(ctx.config, user)) {
      const pending = await startPendingLogin(ctx, user.id, { amr, connectionId: connection.id });
      await ctx.audit({ type: 'upstream_login', userId: user.id, address: attempt.address, detail: { ...detail, second_step: true } });
      return { kind: 'second_step', user, pending, next: hasCode ? 'code' : 'set_up' };
    }
  }
  const session = await startSession(ctx, user.id, attempt.previousSession, amr, connection.id, attempt.address);
  // Disabled while the provider answered (it may answer slowly on purpose): the session it just
  // got ends, as the ones before did.
  if (!(await connectionEnabled(ctx.db, connection.id))) {
    await endSession(ctx, session, attempt.address);
    return { kind: 'refused', reason: 'connection_disabled' };
  }
  await ctx.audit({ type: 'upstream_login', userId: user.id, address: attempt.address, detail });
  return { kind: 'session', user, session };
}

/** A username made from what the provider calls the person, within the username rules, made unique. */
async function freeUsername(ctx: AppContext, identity: UpstreamIdentity): Promise<string> {
  // ORCID gives neither a username nor an address: the name, else the provider's sub (an ORCID iD).
  const wanted = identity.preferredUsername ?? identity.email?.split('@')[0] ?? identity.name?.replaceAll(' ', '.') ?? identity.subject;
  let base = wanted
    .normalize('NFKD')
    .replace(/[^A-Za-z0-9._-]+/g, '-')
    .replace(/^[^A-Za-z0-9]+/, '')
    .slice(0, 24);
  if (base.length < 3) base = `user-${base}`.replace(/-$/, '');
  for (let n = 1; n <= 50; n++) {
    const candidate = n === 1 ? base : `${base}-${n}`;
    if (!(await findUserByUsername(ctx.db, candidate))) return candidate;
  }
  return `${base.slice(0, 16)}-${mintToken('session')
    .token.slice(4, 12)
    .replace(/[^A-Za-z0-9]/g, 'x')}`;
}

/**
 * A new person for the identity, linked to it in the same transaction: no password, the
 * provider's name, and its email only when the provider says it is verified — an unverified
 * address kept here would later stand for the person whose address it is (a takeover waiting
 * for its victim). Raced when a concurrent login linked the identity first.
 */
async function createFederatedAccount(ctx: AppContext, connection: Connection, identity: UpstreamIdentity): Promise<User> {
  const verified = identity.email !== null && identity.emailVerified && emailProblem(identity.email) === null;
  const username = await freeUsername(ctx, identity);
  const now = ctx.now();
  const user = await ctx.db.transaction().execute(async (trx) => {
    const created = await createAccount(
      trx,
      {
        username,
        email: verified ? identity.email! : '',
        password: null,
        isAdmin: false,
        displayName: safeDisplayName(identity.name),
        emailVerified: verified,
      },
      now,
    );
    if (!(await insertIdentity(trx, { connectionId: connection.id, subject: identity.subject, userId: created.id, email: identity.email, now })))
      throw new Raced('the identity was linked meanwhile');
    return created;
  });
  await syncGroups(ctx, connection, user, identity, []);
  return user;
}

function safeDisplayName(name: string | null): string | null {
  try {
    return displayNameOf(name);
  } catch {
    return null; // a name the rules refuse (control characters) is left out, not a reason to refuse the login
  }
}

/**
 * The person's email (unless another account has it), its verified flag, display name and the
 * connection's groups, as the provider says them now (SPEC §4.13: refreshed at each login).
 */
async function refreshProfile(ctx: AppContext, connection: Connection, user: User, identity: UpstreamIdentity): Promise<User> {
  const patch: Partial<Pick<User, 'display_name' | 'email' | 'email_key' | 'email_verified'>> = {};
  const name = safeDisplayName(identity.name);
  if (name !== null && name !== user.display_name) patch.display_name = name;
  // Only an address the provider vouches for replaces the person's (see createFederatedAccount).
  if (identity.email !== null && identity.emailVerified && emailProblem(identity.email) === null) {
    if (lookupKey(identity.email) !== user.email_key) {
      const holder = await findUserByEmail(ctx.db, identity.email);
      if (!holder) Object.assign(patch, { email: identity.email, email_key: lookupKey(identity.email), email_verified: 1 });
    } else if (user.email_verified !== 1) patch.email_verified = 1;
  }
  if (Object.keys(patch).length > 0) await updateUser(ctx.db, user.id, patch);
  const existing = await findIdentity(ctx.db, connection.id, identity.subject);
  await syncGroups(ctx, connection, user, identity, existing ? (JSON.parse(existing.groups) as string[]) : []);
  return { ...user, ...patch };
}

/**
 * With `--groups-claim`: the person joins the groups (that exist here) the provider names, and
 * leaves those this connection granted before and no longer names; memberships an
 * administrator gave stay. Records what the login found.
 */
async function syncGroups(ctx: AppContext, connection: Connection, user: User, identity: UpstreamIdentity, granted: string[]): Promise<void> {
  const named = identity.groups;
  let nowGranted = granted;
  if (named !== null) {
    nowGranted = [];
    for (const group of granted) if (!named.includes(group)) await deleteMember(ctx.db, group, user.id);
    for (const group of named) {
      if (granted.includes(group) || (await insertMember(ctx.db, group, user.id))) nowGranted.push(group);
    }
  }
  await touchIdentity(ctx.db, connection.id, identity.subject, { email: identity.email, groups: nowGranted, now: ctx.now() });
}

/** The identity waiting for the token's browser, with its connection's name; null when unknown, expired or taken. */
export async function pendingIdentity(ctx: AppContext, token: string | undefined) {
  const idHash = token === undefined ? null : hashIfWellFormed('pendingIdentity', token);
  return idHash === null ? null : ((await findPendingIdentity(ctx.db, idHash, ctx.now())) ?? null);
}

/**
 * Links the waiting identity to the person now logged in, who confirmed it — only from a login
 * that began after the identity was set aside (the person proved both in this browser, in
 * that order), and once. False when it may not or could not be linked.
 */
export async function confirmPendingIdentity(ctx: AppContext, token: string | undefined, signedIn: SignedIn, address: string): Promise<boolean> {
  const pending = await pendingIdentity(ctx, token);
  if (pending === null || signedIn.login.authTime < pending.created_at) return false;
  if (!(await takePendingIdentity(ctx.db, hashIfWellFormed('pendingIdentity', token!)!, ctx.now()))) return false;
  const linked = await insertIdentity(ctx.db, {
    connectionId: pending.connection_id,
    subject: pending.subject,
    userId: signedIn.user.id,
    email: pending.email,
    now: ctx.now(),
  });
  if (linked)
    await ctx.audit({
      type: 'identity_linked',
      actorId: signedIn.user.id,
      userId: signedIn.user.id,
      address,
      detail: { connection: pending.connection_id, by: 'login' },
    });
  return linked;
}

/**
 * Unlinks the person's identity at the connection and ends their sessions that came through it
 * (but `keepSession`, the token of the session that asked, when the person disconnects it
 * themselves). `mustKeepAWay`: refused (false, nothing changed) when the person would be left
 * with no way to log in — a person's own **Disconnect**; an administrator may unlink regardless.
 */
export async function unlinkIdentity(
  ctx: AppContext,
  user: User,
  connectionId: string,
  p: { actor: Actor; mustKeepAWay: boolean; keepSession?: string },
): Promise<'unlinked' | 'not_linked' | 'last_way'> {
  if (p.mustKeepAWay && !(await keepsAWayToLogIn(ctx, user, connectionId))) return 'last_way';
  const removed = await deleteIdentity(ctx.db, user.id, connectionId);
  if (!removed) return 'not_linked';
  const except = p.keepSession === undefined ? undefined : (hashIfWellFormed('session', p.keepSession) ?? undefined);
  if ((await endIdentitySessions(ctx.db, { userId: user.id, connectionId, except, now: ctx.now(), address: p.actor.address })) > 0)
    ctx.backchannelLogouts.wake();
  await ctx.audit({ type: 'identity_unlinked', ...madeBy(p.actor), userId: user.id, detail: { connection: connectionId } });
  return 'unlinked';
}
