/**
 * Replays (SPEC §4.2): what a refresh token or a code presented again gets, and what it does
 * to the rest of the grant; and that the stored rows alone never yield a usable token.
 * The application here is confidential, so its secret is among what must not be stored.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as oauth from 'oauth4webapi';
import { sql } from 'kysely';
import { openWithToken } from '../../src/tokens.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { exchangeRequest, obtainCallback, obtainTokens, refresh, refreshRequest, tokenResult } from '../support/oauth-client.ts';
import type { TestServer } from '../support/server.ts';
import { assertDead, assertWorks, startWithApp, type HeldTokens, type Setup } from '../support/token-checks.ts';

const GRACE_SECONDS = 60; // the default REFRESH_GRACE_SECONDS

/** Presents a refresh token that must be refused as reuse. */
async function assertReuseRefused(setup: Setup, refreshToken: string): Promise<void> {
  const result = await tokenResult(await refreshRequest(setup.app, refreshToken));
  assert.deepEqual([result.status, result.body.error], [400, 'invalid_grant']);
}

/** Every row of every table, as the database holds it. */
async function dumpDatabase(server: TestServer): Promise<Record<string, Record<string, unknown>[]>> {
  const dump: Record<string, Record<string, unknown>[]> = {};
  for (const table of await server.store.db.introspection.getTables()) {
    dump[table.name] = (await sql<Record<string, unknown>>`select * from ${sql.table(table.name)}`.execute(server.store.db)).rows;
  }
  return dump;
}

for (const backend of BACKENDS) {
  describe(`presenting a code or refresh token again (${backend.name})`, backendOptions(backend), () => {
    let setup: Setup;

    before(async () => {
      setup = await startWithApp(backend, {}, { confidential: true });
    });
    after(() => setup?.server.close());

    const tokens = () => obtainTokens(setup.app, setup.agent);

    test('within the grace window the immediate predecessor gets the same successor pair again', async () => {
      const first = await tokens();
      const second = await refresh(setup.app, first.refresh_token!);
      setup.server.advance(GRACE_SECONDS - 5);
      const again = await refresh(setup.app, first.refresh_token!);
      assert.equal(again.access_token, second.access_token);
      assert.equal(again.refresh_token, second.refresh_token);
      assert.ok(again.expires_in! <= second.expires_in! - (GRACE_SECONDS - 5), 'expires_in counts down from the first answer');
      await assertWorks(setup, again);
    });

    test('after the grace window the predecessor is refused, and the whole grant with it', async () => {
      const first = await tokens();
      const second = await refresh(setup.app, first.refresh_token!);
      setup.server.advance(GRACE_SECONDS + 1);
      await assertReuseRefused(setup, first.refresh_token!);
      await assertDead(setup, [first, second]);
    });

    test('an older generation (two rotations back) is refused and revokes the grant', async () => {
      const first = await tokens();
      const second = await refresh(setup.app, first.refresh_token!);
      const third = await refresh(setup.app, second.refresh_token!);
      await assertReuseRefused(setup, first.refresh_token!);
      await assertDead(setup, [first, second, third]);
    });

    test('the predecessor is refused once its successor has itself been used', async () => {
      const first = await tokens();
      const second = await refresh(setup.app, first.refresh_token!);
      assert.equal((await refresh(setup.app, first.refresh_token!)).refresh_token, second.refresh_token, 'a replay before the successor is used');
      const third = await refresh(setup.app, second.refresh_token!);
      await assertReuseRefused(setup, first.refresh_token!);
      await assertDead(setup, [first, second, third]);
    });

    test('a code used twice fails, and every token issued from it is revoked', async () => {
      const authorized = await obtainCallback(setup.app, setup.agent);
      const issued = await oauth.processAuthorizationCodeResponse(setup.app.as, setup.app.client, await exchangeRequest(setup.app, authorized));
      const refreshed = await refresh(setup.app, issued.refresh_token!);
      const replay = await tokenResult(await exchangeRequest(setup.app, authorized));
      assert.deepEqual([replay.status, replay.body.error], [400, 'invalid_grant']);
      await assertDead(setup, [issued, refreshed]);
    });

    test('the database never holds a usable token', async () => {
      const { app, agent, server, secret } = setup;
      const authorized = await obtainCallback(app, agent);
      const first = await oauth.processAuthorizationCodeResponse(app.as, app.client, await exchangeRequest(app, authorized));
      const second = await refresh(app, first.refresh_token!);
      const third = await refresh(app, second.refresh_token!);
      const held: HeldTokens[] = [first, second, third];
      const secrets = [authorized.callback.get('code')!, secret!, ...agent.cookies.values(), ...held.flatMap((t) => [t.access_token!, t.refresh_token!])];

      const dump = await dumpDatabase(server);
      assert.ok(dump.refresh_tokens!.length >= 3 && dump.access_tokens!.length >= 3, 'the dump holds the token tables');
      const stored = JSON.stringify(dump);
      for (const value of secrets) assert.ok(!stored.includes(value), `a ${value.slice(0, 4)}… value is stored in clear`);

      // The sealed successor pairs of the grace window: only the predecessor token opens one;
      // nothing the database holds does, and the box does not carry the pair in clear.
      const storedValues = new Set(Object.values(dump).flatMap((rows) => rows.flatMap((row) => Object.values(row).filter((v) => typeof v === 'string'))));
      const boxes = dump.refresh_tokens!.flatMap((row) => (typeof row.replay_box === 'string' ? [row.replay_box] : []));
      assert.ok(boxes.length >= 2, 'rotations within the grace window keep sealed successors');
      for (const box of boxes) {
        for (const value of storedValues) assert.equal(openWithToken(value, box), null, 'a stored value opens a sealed successor');
        const decoded = Buffer.from(box, 'base64url').toString('latin1');
        for (const value of secrets) assert.ok(!decoded.includes(value));
      }
      for (const [predecessor, successor] of [
        [first, second],
        [second, third],
      ] as const) {
        const openers = boxes.filter((box) => openWithToken(predecessor.refresh_token!, box) !== null);
        assert.equal(openers.length, 1, 'the predecessor opens its own box');
        assert.ok(openWithToken(predecessor.refresh_token!, openers[0]!)!.includes(successor.refresh_token!));
      }
    });
  });
}
