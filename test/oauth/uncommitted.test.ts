/**
 * A bearer check never sees what a transaction has not committed. On SQLite every request
 * shares one connection, and a transaction stays open on it across the awaits of the request
 * that opened it; a read run on that connection meanwhile would see the transaction's writes
 * before they are committed — or although they are then rolled back. These tests hold such a
 * transaction open, as an exchange or a rotation that loses its race does before it rolls
 * back, and send bearer requests while it is open.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Transaction } from 'kysely';
import type { Database } from '../../src/store/schema.ts';
import { findLiveBearerToken, insertTokens, tokenRows } from '../../src/store/tokens.ts';
import { hashIfWellFormed, mintToken } from '../../src/tokens.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { obtainTokens, profile } from '../support/oauth-client.ts';
import { startWithApp, type Setup } from '../support/token-checks.ts';

/** Long enough for requests sent meanwhile to reach the server and be answered, if they are answered at once. */
const HELD_MS = 200;
const REQUESTS = 10;

/** Thrown to roll the held transaction back, as a request that lost its race does. */
class RolledBack extends Error {}

for (const backend of BACKENDS) {
  describe(`bearer checks during another request's transaction (${backend.name})`, backendOptions(backend), () => {
    let setup: Setup;
    before(async () => {
      setup = await startWithApp(backend);
    });
    after(() => setup?.server.close());

    /**
     * Runs `write` in a transaction that stays open while `REQUESTS` profile requests with
     * `token` are sent, then rolls back (as a request that lost its race does); the statuses.
     */
    async function duringRolledBack(write: (trx: Transaction<Database>) => Promise<void>, token: string): Promise<number[]> {
      const { db } = setup.server.store;
      let answers: Promise<number[]> | undefined;
      const rolledBack = db.transaction().execute(async (trx) => {
        await write(trx);
        answers = Promise.all(Array.from({ length: REQUESTS }, async () => (await profile(setup.server, token)).status));
        await sleep(HELD_MS);
        throw new RolledBack();
      });
      await assert.rejects(rolledBack, RolledBack);
      return answers!;
    }

    async function grantOf(accessToken: string): Promise<string> {
      const info = await findLiveBearerToken(setup.server.store.db, hashIfWellFormed('access', accessToken)!, Date.now());
      return info!.grant_id;
    }

    test('an access token that a rolled-back transaction wrote is refused, also while the transaction is open', async () => {
      const tokens = await obtainTokens(setup.app, setup.agent);
      const grantId = await grantOf(tokens.access_token);
      const uncommitted = mintToken('access');
      const { db } = setup.server.store;
      const now = Date.now();
      const statuses = await duringRolledBack(
        (trx) =>
          insertTokens(
            db,
            trx,
            tokenRows(
              grantId,
              {
                accessHash: uncommitted.hash,
                accessExpiresAt: now + 600_000,
                refreshHash: null,
                refreshExpiresAt: 0,
                scopes: 'annotation:read',
                binding: { access: null, refresh: null },
              },
              now,
            ),
          ),
        uncommitted.token,
      );
      assert.deepEqual(statuses, Array(REQUESTS).fill(401), 'an uncommitted token was accepted');
    });

    test('a revocation that rolls back never shows: the token works throughout', async () => {
      const tokens = await obtainTokens(setup.app, setup.agent);
      const grantId = await grantOf(tokens.access_token);
      const statuses = await duringRolledBack(async (trx) => {
        await trx.updateTable('grants').set({ revoked_at: Date.now() }).where('id', '=', grantId).execute();
      }, tokens.access_token);
      assert.deepEqual(statuses, Array(REQUESTS).fill(200), 'an uncommitted revocation was seen');
      assert.equal((await profile(setup.server, tokens.access_token)).status, 200);
    });
  });
}
