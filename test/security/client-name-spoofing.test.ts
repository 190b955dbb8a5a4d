/**
 * A self-registered application naming itself with Unicode bidirectional controls, so that
 * the consent page's "Authorize …" shows a name other than the one stored (U+202E, RIGHT-TO-LEFT
 * OVERRIDE, turns "Evil\u202Eeliforp ruoY" into "Evil Your profile" on screen). Names of
 * clients no administrator checked refuse these controls, as they refuse control characters.
 * Not about storage: SQLite only.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sqlite } from '../support/backends.ts';
import { startServer, type TestServer } from '../support/server.ts';

describe('client names that reorder themselves on screen', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer(sqlite, { DYNAMIC_CLIENT_REGISTRATION: 'true' });
  });
  after(() => server?.close());

  const register = (clientName: string) =>
    fetch(`${server.url}/oauth/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ redirect_uris: ['https://app.example/cb'], client_name: clientName }),
    });

  for (const control of ['\u202E', '\u202D', '\u2066', '\u2067', '\u2068', '\u2069', '\u200F', '\u061C']) {
    test(`a client_name with U+${control.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')} is refused`, async () => {
      const response = await register(`Evil${control}eliforp ruoY`);
      assert.equal(response.status, 400);
      assert.equal(((await response.json()) as { error: string }).error, 'invalid_client_metadata');
    });
  }

  test('names in right-to-left scripts and with emoji are still accepted', async () => {
    for (const name of ['تطبيق الملاحظات', 'Notes 👩‍💻']) assert.equal((await register(name)).status, 201, name);
  });
});
