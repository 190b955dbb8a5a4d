/**
 * A rolling upgrade (docs/operations.md): the new release's migrations run while instances of
 * the old one still serve. A migration that adds a column must not break the old instance's
 * statements — on PostgreSQL the token paths run named statements, planned once per
 * connection, and a named statement whose result gains a column fails ("cached plan must not
 * change result type"); so they name their columns (store/schema.ts `allColumnsOf`). Both backends.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { obtainTokens, profile, refresh } from '../support/oauth-client.ts';
import { startWithApp, type Setup } from '../support/token-checks.ts';

/** Every table a token path reads whole. */
const TABLES = ['users', 'sessions', 'clients', 'auth_codes', 'device_codes', 'resources', 'scopes', 'grants', 'access_tokens', 'refresh_tokens'];

for (const backend of BACKENDS) {
  describe(`a column added while the server runs (${backend.name})`, backendOptions(backend), () => {
    let setup: Setup;
    before(async () => {
      setup = await startWithApp(backend, {}, { grantType: 'authorization_code', confidential: true });
    });
    after(() => setup?.server.close());

    /** The authorization request, the code exchange (confidential), a refresh and a bearer call: each statement they run, run once. */
    const everyTokenPath = async () => {
      const tokens = await obtainTokens(setup.app, setup.agent);
      const refreshed = await refresh(setup.app, tokens.refresh_token!);
      assert.equal((await profile(setup.server, refreshed.access_token)).status, 200);
    };

    test('the authorization request, the code exchange, a refresh and the API keep working after a migration adds a column to their tables', async () => {
      await everyTokenPath(); // the statements are prepared on the connections the server holds
      for (const table of TABLES) await sql`alter table ${sql.table(table)} add column from_a_newer_release text`.execute(setup.server.store.db);
      await everyTokenPath();
      await everyTokenPath();
    });
  });
}
