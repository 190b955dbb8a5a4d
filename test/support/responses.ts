/**
 * Assertions on the OAuth endpoints' responses, as a client sees them: the status, the
 * whole RFC 6749 §5.2 error body, and the headers that keep tokens out of caches.
 */
import assert from 'node:assert/strict';

/** Anything shaped like a Gatehouse token, code or client secret (prefix, for some kinds a time, then 43 characters: src/tokens.ts). */
const SECRET_SHAPED = /g(at|rt|ac|cs|ss)_[A-Za-z0-9_-]{43}/;

/** The server logged something, and nothing in it looks like a token, code or secret. */
export function assertNoSecretsLogged(logs: readonly string[]): void {
  assert.ok(logs.length > 0, 'the server logged nothing: is the log stream captured?');
  assert.deepEqual(
    logs.filter((line) => SECRET_SHAPED.test(line)),
    [],
  );
}

/** Token and revocation responses must never be cached (RFC 6749 §5.1). */
export function assertNoStore(response: Response): void {
  assert.equal(response.headers.get('cache-control'), 'no-store', `${response.url} answered ${response.status} without Cache-Control: no-store`);
}

/** Asserts the status, `Cache-Control: no-store` and the full `{"error","error_description"}` body. */
export async function assertOAuthError(response: Response, status: number, error: string, description: string): Promise<void> {
  const body = await response.text();
  assert.deepEqual({ status: response.status, body: JSON.parse(body) }, { status, body: { error, error_description: description } });
  assertNoStore(response);
}
