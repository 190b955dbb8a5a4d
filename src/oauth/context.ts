import type { Kysely } from 'kysely';
import type { Audit } from '../audit.ts';
import type { Config } from '../config.ts';
import type { Database } from '../store/schema.ts';

/** What the protocol functions need: settings, the database and the time. */
export interface OAuthContext {
  readonly config: Config;
  readonly db: Kysely<Database>;
  /** Epoch milliseconds; tests inject their own clock. */
  readonly now: () => number;
  /** Told about every grant that stops being valid, so live connections can be closed. */
  readonly onGrantsRevoked: (grantIds: readonly string[], reason: RevocationReason) => void;
  /**
   * Records a security event in the audit trail, after the change it describes (never
   * throws), or with `audit.pending` inside the change's own transaction. The event names
   * users and clients by id: never a token, code, secret or password.
   */
  readonly audit: Audit;
}

export type RevocationReason = 'revoked' | 'refresh_reuse' | 'code_replay' | 'user_disabled' | 'client_deleted' | 'access_removed';
