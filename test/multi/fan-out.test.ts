/**
 * Where the revocation fan-out's message leaves from (SPEC §4.4, "on any instance"). Without
 * Redis, PostgreSQL's LISTEN/NOTIFY carries it, in chunks that fit PostgreSQL's payload limit,
 * and the revocations that come while one message is being sent share the next; with Redis,
 * the message goes through Redis and the database sends none. Listened to here as another
 * instance would, on a connection of its own — the WebSocket sweep (every second) would hide a
 * message that never left.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import pg from 'pg';
import { COMMAND_LINE } from '../../src/audit.ts';
import { disableUser } from '../../src/accounts/users.ts';
import { clientNamed, disableClient } from '../../src/clients/clients.ts';
import { redisNamespace } from '../../src/config.ts';
import { type OpenContext } from '../../src/context.ts';
import { openContext } from '../../src/open-context.ts';
import { openStore, type Store } from '../../src/store/database.ts';
import type { Client } from '../../src/store/schema.ts';
import { hashIfWellFormed } from '../../src/tokens.ts';
import { sql } from 'kysely';
import { postgres } from '../support/backends.ts';
import { obtainTokens, revokeToken } from '../support/oauth-client.ts';
import type { TestServer } from '../support/server.ts';
import { assertDead, startWithApp, type Setup } from '../support/token-checks.ts';
import { until } from '../support/waits.ts';
import { purgeAfterFor } from '../../src/store/grants.ts';

const CHANNEL = 'gatehouse_revocations';
const redisUrl = process.env.GATEHOUSE_TEST_REDIS;

/** Every NOTIFY on the revocation channel from now on, each as the grant ids it carries. */
async function listen(server: TestServer): Promise<{ messages: string[][]; close(): Promise<void> }> {
  if (server.config.database.kind !== 'postgres') throw new Error('LISTEN is PostgreSQL’s');
  const client = new pg.Client({ connectionString: server.config.database.url });
  await client.connect();
  const messages: string[][] = [];
  client.on('notification', (message) => messages.push(JSON.parse(message.payload!) as string[]));
  await client.query(`LISTEN ${CHANNEL}`);
  return { messages, close: () => client.end() };
}

async function grantOf(server: TestServer, refreshToken: string): Promise<string> {
  const row = await server.store.db
    .selectFrom('refresh_tokens')
    .select('grant_id')
    .where('hash', '=', hashIfWellFormed('refresh', refreshToken)!)
    .executeTakeFirstOrThrow();
  return row.grant_id;
}

/** Another process's context on the server's database and fan-out, opened as the command line opens one. */
interface Elsewhere {
  ctx: OpenContext;
  close(): Promise<void>;
}

async function openElsewhere(server: TestServer): Promise<Elsewhere> {
  const store: Store = openStore(server.config.database);
  const ctx = await openContext(server.config, store, { info() {}, warn() {}, error() {} });
  return {
    ctx,
    async close() {
      await ctx.close();
      await store.close();
    },
  };
}

/**
 * A client disabled in `elsewhere` (another process's context, on the same database and fan-out):
 * `server` is told, and its client cache has forgotten its copy when the message arrives —
 * listeners are told in the order they came, the cache's own (open-context.ts) first.
 */
async function clientChangeHeard(server: TestServer, elsewhere: OpenContext): Promise<void> {
  const ctx = server.app.gatehouse;
  const { client } = await server.createClient({ name: 'Switched off elsewhere' });
  const copy = await ctx.clients.find(client.id);
  assert.equal(await ctx.clients.find(client.id), copy, 'a copy is kept');
  const readWhenHeard: Array<Promise<Client | undefined>> = [];
  ctx.services.bus.subscribeClientChanges((ids) => void (ids.includes(client.id) && readWhenHeard.push(ctx.clients.find(client.id))));
  await disableClient(elsewhere, await clientNamed(elsewhere, client.id), COMMAND_LINE);
  await until('the change heard', () => readWhenHeard.length > 0);
  const read = await readWhenHeard[0]!;
  assert.notEqual(read, copy, 'read again, not the copy');
  assert.equal(read?.disabled, 1);
}

describe(
  'the revocation fan-out through PostgreSQL LISTEN/NOTIFY (no Redis)',
  postgres.unavailable ? { skip: `postgres unavailable: ${postgres.unavailable}` } : {},
  () => {
    let setup: Setup;
    let elsewhere: Elsewhere;
    before(async () => {
      setup = await startWithApp(postgres);
      elsewhere = await openElsewhere(setup.server);
    });
    after(async () => {
      await elsewhere?.close();
      await setup?.server.close();
    });

    test('a client revoking its token: one message, from the revocation, naming the grant', async () => {
      const { server, app, agent } = setup;
      const pair = await obtainTokens(app, agent);
      const grantId = await grantOf(server, pair.refresh_token!);
      const listener = await listen(server);
      try {
        await revokeToken(app, pair.access_token);
        await until('a message heard', () => listener.messages.length > 0);
        await sleep(100);
        assert.deepEqual(listener.messages, [[grantId]]);
        await revokeToken(app, pair.refresh_token!); // already revoked: nothing to tell
        await sleep(100);
        assert.equal(listener.messages.length, 1);
      } finally {
        await listener.close();
      }
    });

    test('revocations answered together share their messages: every grant told, in fewer messages than revocations', async () => {
      const { server, app, agent } = setup;
      const pairs: Array<Awaited<ReturnType<typeof obtainTokens>>> = [];
      for (let n = 0; n < 20; n++) pairs.push(await obtainTokens(app, agent));
      const grantIds = await Promise.all(pairs.map((pair) => grantOf(server, pair.refresh_token!)));
      const listener = await listen(server);
      try {
        // Held, the grants make the twenty revocations arrive before any is written; let go, they write together.
        let revoked: Promise<unknown> = Promise.resolve();
        await server.store.db.transaction().execute(async (trx) => {
          await sql`lock table grants in access exclusive mode`.execute(trx);
          revoked = Promise.all(pairs.map((pair) => revokeToken(app, pair.refresh_token!)));
          await sleep(300);
        });
        await revoked;
        await until('every grant heard of', () => listener.messages.flat().length >= grantIds.length);
        await sleep(100);
        assert.deepEqual(listener.messages.flat().sort(), [...grantIds].sort(), 'each grant told once');
        assert.ok(listener.messages.length < pairs.length, `${pairs.length} revocations sent ${listener.messages.length} messages`);
        await assertDead(setup, pairs);
      } finally {
        await listener.close();
      }
    });

    test("a user's 300 grants revoked at once: every id told, in messages within PostgreSQL's payload limit", async () => {
      const { server } = setup;
      const user = await server.createUser(`many${randomUUID().slice(0, 8)}`);
      const { client } = await server.createClient({ name: 'Many grants' });
      const now = Date.now();
      const ids = Array.from({ length: 300 }, () => randomUUID());
      const grant = (id: string) => ({
        id,
        client_id: client.id,
        user_id: user.id,
        resource_id: 'builtin',
        scopes: 'annotation:read',
        created_at: now,
        last_used_at: now,
        expires_at: now + 60_000,
        purge_after: purgeAfterFor(now + 60_000),
      });
      await server.store.db.insertInto('grants').values(ids.map(grant)).execute();
      const listener = await listen(server);
      try {
        await disableUser(elsewhere.ctx, user, COMMAND_LINE);
        await until('every grant heard of', () => listener.messages.flat().length >= ids.length);
        assert.deepEqual(listener.messages.flat().sort(), [...ids].sort());
        // NOTIFY refuses a payload of 8000 bytes or more; 300 ids take 11,700.
        const sizes = listener.messages.map((m) => JSON.stringify(m).length);
        assert.ok(sizes.every((size) => size < 8000) && sizes.length === 2, `message sizes ${sizes}`);
      } finally {
        await listener.close();
      }
    });

    test('a client disabled by another process: this one is told through the database, and its client cache forgets its copy', () =>
      clientChangeHeard(setup.server, elsewhere.ctx));
  },
);

describe('the revocation fan-out through Redis', postgres.unavailable || !redisUrl ? { skip: 'needs PostgreSQL and Redis' } : {}, () => {
  let setup: Setup;
  let elsewhere: Elsewhere;
  before(async () => {
    setup = await startWithApp(postgres, { REDIS_URL: redisUrl! });
    elsewhere = await openElsewhere(setup.server);
  });
  after(async () => {
    await elsewhere?.close();
    await setup?.server.close();
  });

  test('a client disabled by another process: this one is told through Redis, and its client cache forgets its copy', () =>
    clientChangeHeard(setup.server, elsewhere.ctx));

  test('a client revoking its token: the message goes through Redis, and the database sends none', async () => {
    const { server, app, agent } = setup;
    const pair = await obtainTokens(app, agent);
    const grantId = await grantOf(server, pair.refresh_token!);
    const listener = await listen(server);
    const subscriber = new Redis(redisUrl!);
    const published: string[][] = [];
    subscriber.on('message', (_channel, payload: string) => published.push(JSON.parse(payload) as string[]));
    await subscriber.subscribe(`${redisNamespace(server.config)}:revocations`);
    try {
      await revokeToken(app, pair.access_token);
      await until('a message published', () => published.length > 0);
      await sleep(100);
      assert.deepEqual(published, [[grantId]]);
      assert.deepEqual(listener.messages, []);
    } finally {
      subscriber.disconnect();
      await listener.close();
    }
  });
});
