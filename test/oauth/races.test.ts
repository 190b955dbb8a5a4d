/**
 * Exactly-once under concurrency (SPEC §4.2): many real HTTP requests racing for one code or
 * one refresh token, and revocations landing in the middle of rotations. The database decides
 * the winner with one conditional write, so these hold on both backends and across instances.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { exchangeRequest, obtainCallback, obtainTokens, profile, refreshRequest, revokeToken, tokenResult, type TokenResult } from '../support/oauth-client.ts';
import { assertDead, assertWorks, startWithApp, type HeldTokens, type Setup } from '../support/token-checks.ts';

const RACERS = 20;

/** `RACERS` copies of the request, all in flight at once. */
function race(request: () => Promise<Response>): Promise<TokenResult[]> {
  return Promise.all(Array.from({ length: RACERS }, () => request().then(tokenResult)));
}

/** The one 200 among the results; every other result must be `invalid_grant`. */
function soleWinner(results: TokenResult[]): TokenResult['body'] {
  const winners = results.filter((r) => r.status === 200);
  assert.equal(winners.length, 1, `${winners.length} requests succeeded`);
  for (const loser of results.filter((r) => r.status !== 200)) assert.deepEqual([loser.status, loser.body.error], [400, 'invalid_grant']);
  return winners[0]!.body;
}

for (const backend of BACKENDS) {
  describe(`racing requests (${backend.name})`, backendOptions(backend), () => {
    let graceful: Setup; // REFRESH_GRACE_SECONDS at its default, 60
    let strict: Setup; // REFRESH_GRACE_SECONDS=0

    before(async () => {
      [graceful, strict] = await Promise.all([startWithApp(backend), startWithApp(backend, { REFRESH_GRACE_SECONDS: '0' })]);
    });
    after(() => Promise.all([graceful?.server.close(), strict?.server.close()]));

    test('of 20 concurrent exchanges of one code exactly one succeeds, and the replays revoke what it issued', async () => {
      const { app, agent } = graceful;
      const authorized = await obtainCallback(app, agent);
      const winner = soleWinner(await race(() => exchangeRequest(app, authorized)));
      // What a user sees: the 19 losers are replays of a used code, and a code used twice
      // revokes every token issued from it — so the winner's tokens are dead too. That is
      // the intended trade (RFC 6749 §4.1.2): a racing duplicate means the code leaked.
      await assertDead(graceful, [winner]);
    });

    test('with REFRESH_GRACE_SECONDS=0, of 20 concurrent refreshes exactly one succeeds', async () => {
      const tokens = await obtainTokens(strict.app, strict.agent);
      const winner = soleWinner(await race(() => refreshRequest(strict.app, tokens.refresh_token!)));
      // Without a grace window each loser is a reuse of a rotated token, which revokes the
      // grant: the winner's fresh pair ends up dead along with the old one.
      await assertDead(strict, [tokens, winner]);
    });

    test('within the grace window, 20 concurrent refreshes all get the very same pair, and it works', async () => {
      const tokens = await obtainTokens(graceful.app, graceful.agent);
      const results = await race(() => refreshRequest(graceful.app, tokens.refresh_token!));
      assert.deepEqual(
        results.map((r) => r.status),
        results.map(() => 200),
      );
      const pairs = new Set(results.map((r) => `${r.body.access_token} ${r.body.refresh_token}`));
      assert.equal(pairs.size, 1, 'every tab ends up holding one pair');
      const [pair] = results.map((r) => r.body);
      assert.notEqual(pair!.refresh_token, tokens.refresh_token);
      // The old access token stays valid until it expires (SPEC §4.2).
      assert.equal((await profile(graceful.server, tokens.access_token)).status, 200);
      await assertWorks(graceful, pair!);
    });

    // Three tabs refreshing in step when replays are allowed; one client refreshing in a loop
    // when they are not (more than one would be reuse, which revokes on its own).
    for (const [name, setup, chains] of [
      ['with a grace window', () => graceful, 3],
      ['with REFRESH_GRACE_SECONDS=0', () => strict, 1],
    ] as const) {
      test(`a revocation racing refreshes leaves no token of the grant alive (${name})`, async () => {
        const { app, agent } = setup();
        // The revocation lands at different points of the rotations, by either token.
        for (const [round, delay] of [0, 2, 4, 6, 8, 12, 16, 24].entries()) {
          const first = await obtainTokens(app, agent);
          const held: HeldTokens[] = [first];
          const refreshInLoop = async () => {
            let current = first.refresh_token!;
            for (let step = 0; step < 6; step++) {
              const result = await tokenResult(await refreshRequest(app, current));
              if (result.status !== 200) return;
              held.push(result.body);
              current = result.body.refresh_token!;
            }
          };
          const revocation = async () => {
            await sleep(delay);
            await revokeToken(app, round % 2 === 0 ? first.access_token : first.refresh_token!);
          };
          await Promise.all([...Array.from({ length: chains }, refreshInLoop), revocation()]);
          await assertDead(setup(), held);
        }
      });
    }
  });
}
