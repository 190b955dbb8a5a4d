/**
 * `npm test` after the type check: finds the services the suites need (PostgreSQL, Redis, Chromium),
 * says loudly which suites cannot run without them, and runs every test file with Node's
 * test runner. Under CI (CI=true) a missing service is a failure, not a skip.
 */
import { spawnSync } from 'node:child_process';
import { appendFileSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { loadConfig } from '../src/config.ts';
import { migrate, openStore } from '../src/store/database.ts';
import { CA_CERT, createTestCa, opensslProblem } from './support/tls.ts';

const postgresUrl = process.env.TEST_POSTGRES_URL || 'postgres://postgres@127.0.0.1:5432/postgres';
const redisUrl = process.env.TEST_REDIS_URL || 'redis://127.0.0.1:6379';

async function postgresProblem(): Promise<string | null> {
  const client = new pg.Client({ connectionString: postgresUrl, connectionTimeoutMillis: 3000 });
  try {
    await client.connect();
    await client.query('select 1');
    return null;
  } catch (error) {
    return `cannot connect to ${new URL(postgresUrl).host} (${(error as Error).message || (error as { code?: string }).code})`;
  } finally {
    await client.end().catch(() => {});
  }
}

function redisProblem(): Promise<string | null> {
  const { hostname, port } = new URL(redisUrl);
  return new Promise((resolve) => {
    const socket = connect({ host: hostname, port: Number(port || 6379), timeout: 3000 });
    const fail = (why: string) => {
      socket.destroy();
      resolve(`cannot reach Redis at ${hostname}:${port || 6379} (${why})`);
    };
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.once('data', (data) => {
      socket.destroy();
      resolve(String(data).startsWith('+PONG') ? null : `unexpected answer from Redis at ${hostname}`);
    });
    socket.once('timeout', () => fail('timed out'));
    socket.once('error', (error) => fail(error.message));
  });
}

/** The browser suites drive Debian's Chromium; a browser is never downloaded. */
const chromiumPath = '/usr/bin/chromium';
const chromiumProblem = existsSync(chromiumPath) ? null : `${chromiumPath} is missing (install it with: apt-get install -y chromium)`;

const missing = { postgres: await postgresProblem(), redis: await redisProblem(), chromium: chromiumProblem, openssl: opensslProblem() };
const NEEDED_BY: Record<keyof typeof missing, string> = {
  postgres: 'every PostgreSQL-backend suite and the multi-instance suites',
  redis: 'the Redis-backed multi-instance suites',
  chromium: 'the browser suites (test/browser)',
  openssl: 'the suites that serve https (client ID metadata documents)',
};
const env: NodeJS.ProcessEnv = { ...process.env };
if (missing.postgres) env.GATEHOUSE_TEST_POSTGRES_MISSING = missing.postgres;
else env.GATEHOUSE_TEST_POSTGRES = postgresUrl;

/**
 * A PostgreSQL database migrated once for the run, which the suites' servers start on copies
 * of (test/support/backends.ts `createMigrated`): migrating costs each of them a second.
 */
const template = missing.postgres ? null : await migratedTemplate();
if (template) env.GATEHOUSE_TEST_POSTGRES_TEMPLATE = template.name;

async function migratedTemplate(): Promise<{ name: string; drop(): Promise<void> }> {
  const name = `gatehouse_template_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: postgresUrl });
  await admin.connect();
  await admin.query(`create database ${name}`);
  await admin.end();
  const url = new URL(postgresUrl);
  url.pathname = `/${name}`;
  const store = openStore(loadConfig({ DATABASE_URL: url.href }).database);
  await migrate(store);
  await store.close(); // a template has no one connected
  return {
    name,
    async drop() {
      const client = new pg.Client({ connectionString: postgresUrl });
      await client.connect();
      await client.query(`drop database if exists ${name} with (force)`);
      await client.end();
    },
  };
}
if (missing.redis) env.GATEHOUSE_TEST_REDIS_MISSING = missing.redis;
else env.GATEHOUSE_TEST_REDIS = redisUrl;
if (missing.chromium) env.GATEHOUSE_TEST_CHROMIUM_MISSING = missing.chromium;

/**
 * A throw-away CA for the suites that serve https (test/support/tls.ts). Node reads
 * NODE_EXTRA_CA_CERTS only at start-up, so it is set here, for the test processes and the
 * servers they start; a NODE_EXTRA_CA_CERTS already set is kept, its certificates added.
 */
const caDir = missing.openssl ? null : mkdtempSync(join(tmpdir(), 'gatehouse-test-ca-'));
if (caDir) {
  createTestCa(caDir);
  if (process.env.NODE_EXTRA_CA_CERTS) appendFileSync(join(caDir, CA_CERT), readFileSync(process.env.NODE_EXTRA_CA_CERTS));
  env.NODE_EXTRA_CA_CERTS = join(caDir, CA_CERT);
  env.GATEHOUSE_TEST_CA_DIR = caDir;
}

/**
 * Every test process keeps its compiled modules in one cache for the run, as every
 * `gatehouse` it starts does in its own (bin/gatehouse.js): the ~160 test processes and the
 * hundreds of commands the CLI suites run each strip and compile the sources once instead of
 * every time.
 */
const compileCache = mkdtempSync(join(tmpdir(), 'gatehouse-test-compile-cache-'));
env.NODE_COMPILE_CACHE = compileCache;

/** Where the test files claim the ports of the servers they start, so that no two are given the same one (test/support/ports.ts). */
const claimedPorts = mkdtempSync(join(tmpdir(), 'gatehouse-test-ports-'));
env.GATEHOUSE_TEST_PORTS = claimedPorts;

const problems = Object.entries(missing).filter(([, problem]) => problem !== null);
if (problems.length > 0) {
  const banner = '!'.repeat(78);
  console.error(`\n${banner}`);
  for (const [service, problem] of problems) {
    console.error(`!! NOT RUN: ${NEEDED_BY[service as keyof typeof missing]}: ${problem}`);
  }
  console.error(`!! Set TEST_POSTGRES_URL / TEST_REDIS_URL to point the tests at your servers.`);
  console.error(`${banner}\n`);
  if (process.env.CI === 'true') {
    console.error('CI=true: a missing test service is a failure.');
    process.exit(1);
  }
}

const files = process.argv.slice(2);
const result = spawnSync(
  process.execPath,
  [
    '--test',
    // Three files at a time on 2 cores: a file waits on its servers, sockets and timers part of
    // the time, and a third keeps the cores busy meanwhile (measured: the CLI and security
    // suites took 4m34s at three, 4m59s at two). Each file has its own databases and servers.
    '--test-concurrency=3',
    '--test-timeout=180000',
    '--test-reporter=spec',
    '--test-reporter-destination=stdout',
    // A line as each file finishes: where a long run is (test/progress-reporter.ts).
    '--test-reporter=./test/progress-reporter.ts',
    '--test-reporter-destination=stderr',
    ...(files.length > 0 ? files : ['test/**/*.test.ts']),
  ],
  {
    stdio: 'inherit',
    env,
  },
);
if (caDir) rmSync(caDir, { recursive: true, force: true });
rmSync(compileCache, { recursive: true, force: true });
rmSync(claimedPorts, { recursive: true, force: true });
await template?.drop();
process.exit(result.status ?? 1);
