/**
 * Signing keys across instances and processes on one PostgreSQL database (SPEC §4.9): several
 * servers and CLI processes starting at once on a fresh database, or rotating at once, end
 * with one active key per algorithm; a revocation leaves every instance's JWKS through the
 * fan-out (LISTEN/NOTIFY here, no Redis), well before the minute's re-read.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { postgres } from '../support/backends.ts';
import { startCluster, type Cluster } from '../support/instances.ts';
import { gatehouse } from '../support/processes.ts';

const activeByAlg = async (cluster: Cluster) =>
  (await cluster.store.db.selectFrom('signing_keys').select(['alg', 'state']).where('state', '=', 'active').execute()).map((row) => row.alg).sort();
const kidsAt = async (url: string) => ((await (await fetch(`${url}/oauth/jwks`)).json()) as { keys: Array<{ kid: string }> }).keys.map((key) => key.kid).sort();

describe('signing keys on several instances and processes', postgres.unavailable ? { skip: `needs PostgreSQL: ${postgres.unavailable}` } : {}, () => {
  let cluster: Cluster;
  let databaseUrl: string;
  let cliRuns: Awaited<ReturnType<typeof gatehouse>>[];

  before(async () => {
    // startCluster migrates, then starts its three servers together; four CLI processes start beside them.
    const pending: Promise<Awaited<ReturnType<typeof gatehouse>>>[] = [];
    const started = startCluster(3, {}, (url) => {
      databaseUrl = url;
      for (let i = 0; i < 4; i++) pending.push(gatehouse(['keys', 'list', '--json'], { DATABASE_URL: url }));
    });
    cluster = await started;
    cliRuns = await Promise.all(pending);
  });
  after(() => cluster?.close());

  test('three servers and four CLI processes starting at once on a fresh database make one active key per algorithm, and no other', async () => {
    for (const run of cliRuns) assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(await activeByAlg(cluster), ['ES256', 'RS256']);
    assert.equal((await cluster.store.db.selectFrom('signing_keys').select('kid').execute()).length, 2);
    const published = await Promise.all(cluster.instances.map((instance) => kidsAt(instance.url)));
    for (const kids of published) assert.deepEqual(kids, published[0]);
  });

  test('rotating from several processes at once leaves one active key per algorithm', async () => {
    const runs = await Promise.all(
      Array.from({ length: 4 }, (_, i) => gatehouse(['keys', 'rotate', ...(i % 2 === 0 ? ['--now'] : [])], { DATABASE_URL: databaseUrl })),
    );
    for (const run of runs) assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(await activeByAlg(cluster), ['ES256', 'RS256']);
    const states = await cluster.store.db.selectFrom('signing_keys').select(['alg', 'state']).execute();
    for (const alg of ['ES256', 'RS256']) assert.ok(states.filter((row) => row.alg === alg && row.state === 'next').length <= 1);
  });

  test('a key revoked from the command line leaves the JWKS of every instance within the fan-out', async () => {
    const [kid] = await kidsAt(cluster.instances[0]!.url);
    const run = await gatehouse(['keys', 'revoke', '--', kid!], { DATABASE_URL: databaseUrl });
    assert.equal(run.code, 0, run.stderr);
    // The fan-out takes milliseconds; 10 s leaves room for a loaded machine and is still far below the 60 s re-read.
    const deadline = Date.now() + 10_000;
    for (const instance of cluster.instances) {
      while ((await kidsAt(instance.url)).includes(kid!)) {
        assert.ok(Date.now() < deadline, `still published at ${instance.url} 10 s after the revocation`);
        await sleep(50);
      }
    }
    assert.deepEqual(await activeByAlg(cluster), ['ES256', 'RS256']);
  });
});
