/**
 * The one error type of the protocol. Routes turn it into RFC 6749 §5.2 JSON, an RFC 6750
 * `WWW-Authenticate` challenge, an authorization error redirect or an error page; nothing
 * builds error bodies by hand.
 *
 * @see RFC 6749 §4.1.2.1 (authorization errors), §5.2 (token errors); RFC 6750 §3.1
 */

export type OAuthErrorCode =
  | 'invalid_request'
  | 'invalid_client'
  | 'invalid_grant'
  | 'unauthorized_client'
  | 'unsupported_grant_type'
  | 'unsupported_response_type'
  | 'unsupported_token_type'
  | 'invalid_scope'
  | 'invalid_target'
  | 'access_denied'
  | 'authorization_pending'
  | 'slow_down'
  | 'expired_token'
  | 'login_required'
  | 'consent_required'
  | 'interaction_required'
  // OpenID Connect Core §3.1.2.6.
  | 'request_not_supported'
  | 'request_uri_not_supported'
  | 'invalid_token'
  | 'insufficient_scope'
  | 'server_error'
  | 'temporarily_unavailable'
  // Dynamic client registration (RFC 7591 §3.2.2).
  | 'invalid_redirect_uri'
  | 'invalid_client_metadata'
  // DPoP (RFC 9449 §5, §8).
  | 'invalid_dpop_proof'
  | 'use_dpop_nonce';

const STATUS: Record<OAuthErrorCode, number> = {
  invalid_request: 400,
  invalid_client: 401,
  invalid_grant: 400,
  unauthorized_client: 400,
  unsupported_grant_type: 400,
  unsupported_response_type: 400,
  unsupported_token_type: 400,
  invalid_scope: 400,
  invalid_target: 400,
  access_denied: 403,
  authorization_pending: 400,
  slow_down: 400,
  expired_token: 400,
  login_required: 401,
  interaction_required: 401,
  consent_required: 403,
  request_not_supported: 400,
  request_uri_not_supported: 400,
  invalid_token: 401,
  insufficient_scope: 403,
  server_error: 500,
  temporarily_unavailable: 503,
  invalid_redirect_uri: 400,
  invalid_client_metadata: 400,
  invalid_dpop_proof: 400,
  use_dpop_nonce: 400,
};

/** What a character outside RFC 6749 §5.2's set (below) is sent as, where ASCII can say it; any other is sent as a question mark. */
const PLAIN: Record<string, string> = { '"': "'", '\\': '/', '…': '...', '−': '-', '–': '-', '—': '-', '‘': "'", '’': "'", '“': "'", '”': "'" };

/**
 * RFC 6749 §5.2 allows an `error_description` only printable ASCII without `"` and `\`
 * (%x20-21 / %x23-5B / %x5D-7E), so that it fits both the JSON body and a quoted-string of a
 * `WWW-Authenticate` challenge (RFC 6750 §3). Descriptions put names in double quotes, and some
 * repeat what the request sent (an unknown scope, a prompt value): a double quote is sent as a
 * single one, a backslash as a slash, a dash or an ellipsis as ASCII, anything else outside the
 * set as a question mark.
 */
function fittingDescription(text: string): string {
  return text.replace(/[^\x20-\x21\x23-\x5b\x5d-\x7e]/gu, (character) => PLAIN[character] ?? '?');
}

export class OAuthError extends Error {
  override name = 'OAuthError';
  readonly error: OAuthErrorCode;
  readonly description: string;
  readonly detail: string | undefined;
  readonly status: number;
  /**
   * Whether the authorization endpoint may send this error to the client's redirect URL
   * (RFC 6749 §4.1.2.1). Only errors raised once the client and its redirect URL are
   * verified are marked so (oauth/authorize.ts); any other error is shown on a page, so
   * that Gatehouse never redirects to a URL it has not verified (RFC 9700 §4.11).
   */
  readonly redirectable: boolean;

  /**
   * @param error the RFC error code sent to the client
   * @param description a client-safe explanation: it never quotes a secret (pages show it as it is; `errorDescription` is what is sent)
   * @param detail for the log only: why, in terms the operator needs (never a secret either)
   * @param status the HTTP status, when it is not the one the error code implies
   * @param redirectable see `redirectable`
   */
  constructor(error: OAuthErrorCode, description: string, detail?: string, status?: number, redirectable = false) {
    super(`${error}: ${description}`);
    this.error = error;
    this.description = description;
    this.detail = detail;
    this.status = status ?? STATUS[error];
    this.redirectable = redirectable;
  }

  /** The same error, marked as one that may go to the client's verified redirect URL. */
  toRedirectable(): OAuthError {
    return new OAuthError(this.error, this.description, this.detail, this.status, true);
  }

  /** The description as RFC 6749 §5.2 lets it be sent: in a JSON body, a redirect, a `WWW-Authenticate` challenge. */
  get errorDescription(): string {
    return fittingDescription(this.description);
  }

  toJSON(): { error: OAuthErrorCode; error_description: string } {
    return { error: this.error, error_description: this.errorDescription };
  }
}

export const invalidRequest = (description: string, detail?: string) => new OAuthError('invalid_request', description, detail);
export const invalidGrant = (description: string, detail?: string) => new OAuthError('invalid_grant', description, detail);
export const invalidScope = (description: string) => new OAuthError('invalid_scope', description);
