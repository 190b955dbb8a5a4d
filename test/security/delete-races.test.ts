/**
 * Deletes, disables and revocations racing code exchanges and refreshes (issue 11 item 11,
 * SPEC §4.2). Deleting a client while its codes were being exchanged on PostgreSQL let a
 * grant insert hit the foreign key of the client just deleted: 500. Whatever lands first, every
 * answer must be a 200 or a 4xx, and once the dust settles nothing issued to the deleted
 * client or the disabled user, or from the revoked access, may still work. The disruptions
 * come from a connection of their own, as from the command line (or another instance), so
 * they land among the requests instead of queueing behind them for the server's connections.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { disableUser } from '../../src/accounts/users.ts';
import { COMMAND_LINE } from '../../src/audit.ts';
import { removeAccess } from '../../src/clients/access.ts';
import { removeClient } from '../../src/clients/clients.ts';
import { type AppContext, type OpenContext } from '../../src/context.ts';
import { openContext } from '../../src/open-context.ts';
import { openStore, type Store } from '../../src/store/database.ts';
import type { User } from '../../src/store/schema.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import {
  discover,
  exchangeRequest,
  obtainCallback,
  obtainTokens,
  postForm,
  profile,
  refreshRequest,
  tokenResult,
  type TokenResult,
} from '../support/oauth-client.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';

const CODES = 100;
const REFRESH_TOKENS = 50;

type Authorized = Awaited<ReturnType<typeof obtainCallback>>;

/** `count` results of `make`, at most `width` in flight at once. */
async function inBatches<T>(count: number, width: number, make: () => Promise<T>): Promise<T[]> {
  const results: T[] = [];
  while (results.length < count) results.push(...(await Promise.all(Array.from({ length: Math.min(width, count - results.length) }, make))));
  return results;
}

/** What interrupts the exchanges and refreshes: each ends the user's access to the client. */
const DISRUPTIONS: Record<string, (ctx: AppContext, user: User, clientId: string) => Promise<unknown>> = {
  'client deleted': (ctx, _user, clientId) => removeClient(ctx, clientId, COMMAND_LINE),
  'user disabled': (ctx, user) => disableUser(ctx, user, COMMAND_LINE),
  'access removed': (ctx, user, clientId) => removeAccess(ctx, user.id, clientId, null),
};

for (const backend of BACKENDS) {
  describe(`deletes, disables and revocations racing exchanges and refreshes (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let cliStore: Store;
    let cli: OpenContext;
    let round = 0;

    before(async () => {
      server = await startServer(backend, { TOKEN_REQUESTS_PER_ADDRESS: '0', TOKEN_REQUESTS_PER_CLIENT: '0' });
      cliStore = openStore(server.config.database);
      const quiet = { info() {}, warn() {}, error() {} };
      cli = await openContext(server.config, cliStore, quiet);
    });
    after(async () => {
      await cli?.close();
      await cliStore?.close();
      await server?.close();
    });

    for (const [name, disrupt] of Object.entries(DISRUPTIONS)) {
      test(`${name} while ${CODES} codes are exchanged and ${REFRESH_TOKENS} refresh tokens refreshed and revoked: never a 5xx, nothing left alive`, async (t) => {
        const statuses = new Map<number, number>();
        let survivors = 0;
        const finishedAt: number[] = [];
        // The disruption starts after this many answers: from at once to midway.
        for (const landing of [0, 10, 25, 50]) {
          const user = await server.createUser(`user${++round}`);
          const { client } = await server.createClient({ name: `Racing ${round}` });
          const app = await discover(server, client.id);
          const agent = new UserAgent(server.url);
          await obtainTokens(app, agent, user.username); // logs in and consents: the rest are quick
          const codes = await inBatches(CODES, 20, () => obtainCallback(app, agent));
          const pairs = await inBatches(REFRESH_TOKENS, 20, () => obtainTokens(app, agent, user.username));

          const results: TokenResult[] = [];
          let land: () => void = () => {};
          const landed = landing === 0 ? Promise.resolve() : new Promise<void>((resolve) => (land = resolve));
          const record = (result: TokenResult) => {
            if (results.push(result) === landing) land();
          };
          const answered = (response: Response) => tokenResult(response).then(record);
          const revocations = pairs.filter((_, i) => i % 5 === 0); // some grants are revoked by their client meanwhile
          await Promise.all([
            ...codes.map((code: Authorized) => exchangeRequest(app, code).then(answered)),
            ...pairs.map((pair) => refreshRequest(app, pair.refresh_token!).then(answered)),
            ...revocations.map((pair) =>
              postForm(server, '/oauth/revoke', { token: pair.access_token, client_id: client.id }).then((r) => record({ status: r.status, body: {} })),
            ),
            landed.then(() => disrupt(cli, user, client.id)).then(() => finishedAt.push(results.length)),
          ]);
          for (const { status } of results) statuses.set(status, (statuses.get(status) ?? 0) + 1);

          const held = [...pairs, ...results.filter((r) => r.status === 200).map((r) => r.body)];
          const alive = await Promise.all([
            ...held.map(async (t) => t.access_token !== undefined && (await profile(server, t.access_token)).status === 200),
            ...held.map(async (t) => t.refresh_token !== undefined && (await refreshRequest(app, t.refresh_token)).status === 200),
          ]);
          survivors += alive.filter(Boolean).length;
        }
        const answers = JSON.stringify(Object.fromEntries(statuses));
        t.diagnostic(
          `answers by status: ${answers}; disruptions finished after answers ${finishedAt.join(', ')}; tokens still working afterwards: ${survivors}`,
        );
        const serverErrors = [...statuses].filter(([status]) => status >= 500).reduce((sum, [, n]) => sum + n, 0);
        assert.equal(serverErrors, 0, `answers by status: ${answers}`);
        assert.equal(survivors, 0, `tokens still work after "${name}"`);
      });
    }
  });
}
