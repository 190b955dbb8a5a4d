/**
 * The token endpoint's dispatcher (oauth/grants/index.ts) with grants made for the test: the
 * order it runs a grant's two steps in, and where it charges and checks the client. Its
 * collaborators are real — clients in an in-memory SQLite database, the real standing check
 * — except the throttle, which records what it is charged.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, beforeEach, describe, test } from 'node:test';
import { loadConfig } from '../../src/config.ts';
import { type OpenContext } from '../../src/context.ts';
import { openContext } from '../../src/open-context.ts';
import { requireStanding } from '../../src/oauth/client-kinds.ts';
import { invalidGrant } from '../../src/protocol/errors.ts';
import type { TokenResponse } from '../../src/oauth/issue.ts';
import { defineGrant, type Grant } from '../../src/oauth/grants/grant.ts';
import { dispatchToken, grantMap, type Gate } from '../../src/oauth/grants/index.ts';
import { AUTHORIZATION_CODE_GRANT_TYPE, CLIENT_CREDENTIALS_GRANT_TYPE, CLIENT_GRANT_TYPES } from '../../src/oauth/grants/types.ts';
import type { RawParams } from '../../src/protocol/params.ts';
import { insertClient } from '../../src/store/clients.ts';
import { migrate, openStore, type Store } from '../../src/store/database.ts';
import type { NewClient } from '../../src/store/schema.ts';
import { hashToken } from '../../src/tokens.ts';

/** What happened, in order: `address`, `charge <client>`, `standing <client>`, `load`, `issue`. */
let events: string[];

const RESPONSE: TokenResponse = { token_type: 'Bearer', access_token: 'at', expires_in: 60, scope: '' };

/**
 * A ticket names the client it was issued to; `unknown` is one the grant cannot find. `note`
 * is optional and `resource` repeatable, to show how the declared parameters are read.
 */
const parameters = {
  ticket: { required: true, description: 'the client it was issued to' },
  note: { description: 'anything' },
  resource: { repeatable: true, description: 'one or several' },
} as const;

async function findTicket(ticket: string) {
  events.push('load');
  if (ticket === 'unknown') throw invalidGrant('the ticket is invalid', 'unknown ticket');
  return { clientId: ticket, redeemed: ticket };
}

const issue = async () => {
  events.push('issue');
  return RESPONSE;
};

/** Who may use the grants made for the test: any client, but for `machines`. */
const anyClient = { usableBy: CLIENT_GRANT_TYPES, title: 'test grant' };

/** Read by the last grant's issue, to show what the declared parameters arrive as. */
let seen: unknown;

const GRANTS = grantMap([
  defineGrant({ ...anyClient, type: 'named', parameters, client: 'client_id', redeems: 'ticket', load: (params) => findTicket(params.ticket), issue }),
  defineGrant({ ...anyClient, type: 'anyone', parameters, client: 'optional', redeems: 'ticket', load: (params) => findTicket(params.ticket), issue }),
  defineGrant({
    ...anyClient,
    type: 'secret',
    parameters: {},
    client: 'credentials',
    redeems: 'client secret',
    load: async (_params, client) => ({ clientId: client.id, redeemed: null }),
    issue,
  }),
  defineGrant({
    type: 'machines',
    usableBy: [CLIENT_CREDENTIALS_GRANT_TYPE],
    title: 'machines grant',
    parameters,
    client: 'optional',
    redeems: 'ticket',
    load: (params) => findTicket(params.ticket),
    issue,
  }),
  defineGrant({
    ...anyClient,
    type: 'echo',
    parameters,
    client: 'optional',
    redeems: 'ticket',
    load: (params) => findTicket(params.ticket),
    issue: async (_ticket, params) => {
      const { ticket, note, resource } = params;
      // The declared types: required string, optional string or nothing, repeatable as sent.
      seen = { ticket: ticket satisfies string, note: note satisfies string | undefined, resource: resource satisfies string | string[] | undefined };
      return issue();
    },
  }),
]);

const forgetful = async () => {
  events.push('load');
  return { redeemed: 'a ticket of nobody in particular' };
};
// @ts-expect-error: a load must say which client what it redeems belongs to
const NAMES_NO_CLIENT: Grant = defineGrant({ ...anyClient, type: 'forgetful', parameters: {}, client: 'optional', redeems: 'ticket', load: forgetful, issue });

describe('the token endpoint dispatcher', () => {
  let store: Store;
  let ctx: OpenContext;
  let gate: Gate;
  const SECRET = 'the confidential client secret';
  const ids = { public: randomUUID(), other: randomUUID(), confidential: randomUUID(), blocked: randomUUID() };

  before(async () => {
    const config = loadConfig({ DATABASE_URL: 'sqlite::memory:' });
    store = openStore(config.database);
    await migrate(store);
    const silent = { info() {}, warn() {}, error() {} };
    ctx = await openContext(config, store, silent);
    const client = (id: string, fields: Partial<NewClient> = {}): NewClient => ({
      id,
      name: id,
      grant_type: AUTHORIZATION_CODE_GRANT_TYPE,
      redirect_uris: '[]',
      secret_hash: null,
      trusted: 0,
      require_pkce: 0,
      scopes: '',
      created_at: 0,
      ...fields,
    });
    await insertClient(ctx.db, client(ids.public));
    await insertClient(ctx.db, client(ids.other));
    await insertClient(ctx.db, client(ids.confidential, { secret_hash: hashToken(SECRET) }));
    await insertClient(ctx.db, client(ids.blocked, { kind: 'dynamic', blocked: 1 }));
    gate = {
      throttle: {
        tokenRequestFrom: async () => void events.push('address'),
        tokenRequestOf: async (clientId) => void events.push(`charge ${clientId}`),
      },
      clients: ctx.clients,
      standing: async (client, address) => {
        events.push(`standing ${client.id}`);
        return requireStanding(ctx, client, address);
      },
    };
  });

  after(async () => {
    await ctx.close();
    await store.close();
  });

  beforeEach(() => {
    events = [];
  });

  const request = (params: RawParams, grants = GRANTS, authorization?: string) =>
    dispatchToken(grants, gate, { params, authorization, address: '192.0.2.1' }, ctx);
  const basic = `Basic ${Buffer.from(`${ids.confidential}:${encodeURIComponent(SECRET)}`).toString('base64')}`;

  test('a public client is charged once, after load found what it redeems and saw it was issued to it, and checked before issue', async () => {
    assert.deepEqual(await request({ grant_type: 'named', ticket: ids.public, client_id: ids.public }), RESPONSE);
    assert.deepEqual(events, ['address', 'load', `charge ${ids.public}`, `standing ${ids.public}`, 'issue']);
  });

  test('a confidential client is charged once, when its secret is checked: not again once load has identified it', async () => {
    assert.deepEqual(await request({ grant_type: 'named', ticket: ids.confidential }, GRANTS, basic), RESPONSE);
    assert.deepEqual(events, ['address', `charge ${ids.confidential}`, `standing ${ids.confidential}`, 'load', 'issue']);
  });

  test('a request whose load finds nothing charges a public client nothing, a confidential one still once', async () => {
    await assert.rejects(request({ grant_type: 'named', ticket: 'unknown', client_id: ids.public }), { error: 'invalid_grant' });
    assert.deepEqual(events, ['address', 'load']);
    events = [];
    await assert.rejects(request({ grant_type: 'named', ticket: 'unknown' }, GRANTS, basic), { error: 'invalid_grant' });
    assert.deepEqual(events, ['address', `charge ${ids.confidential}`, `standing ${ids.confidential}`, 'load']);
  });

  test("a load saying what it redeems is another client's than the one named or authenticated is refused: a public client is not charged for it, and nothing is issued", async () => {
    await assert.rejects(request({ grant_type: 'named', ticket: ids.other, client_id: ids.public }), {
      error: 'invalid_grant',
      description: 'the ticket is invalid',
    });
    assert.deepEqual(events, ['address', 'load']);
    events = [];
    await assert.rejects(request({ grant_type: 'anyone', ticket: ids.other }, GRANTS, basic), { error: 'invalid_grant', description: 'the ticket is invalid' });
    assert.deepEqual(events, ['address', `charge ${ids.confidential}`, `standing ${ids.confidential}`, 'load']);
  });

  test('without a client in the request, the one load identified is charged and checked: blocked, it gets nothing', async () => {
    assert.deepEqual(await request({ grant_type: 'anyone', ticket: ids.public }), RESPONSE);
    assert.deepEqual(events, ['address', 'load', `charge ${ids.public}`, `standing ${ids.public}`, 'issue']);
    events = [];
    await assert.rejects(request({ grant_type: 'anyone', ticket: ids.blocked }), { error: 'invalid_client', description: 'this client has been blocked' });
    assert.deepEqual(events, ['address', 'load', `charge ${ids.blocked}`, `standing ${ids.blocked}`]);
  });

  test('a client over its budget gets nothing issued', async () => {
    const throttled: Gate = { ...gate, throttle: { ...gate.throttle, tokenRequestOf: async () => Promise.reject(new Error('over budget')) } };
    await assert.rejects(
      dispatchToken(
        GRANTS,
        throttled,
        { params: { grant_type: 'named', ticket: ids.public, client_id: ids.public }, authorization: undefined, address: '192.0.2.1' },
        ctx,
      ),
      /over budget/,
    );
    assert.deepEqual(events, ['address', 'load']);
  });

  test('a grant that does not identify its client is refused: it does not type-check (above), and issues nothing if run anyway', async () => {
    await assert.rejects(request({ grant_type: 'forgetful' }, grantMap([NAMES_NO_CLIENT])), /did not say whose client/);
    assert.deepEqual(events, ['address', 'load']);
  });

  test("what the request must say about its client is checked with the grant's parameters, before load", async () => {
    await assert.rejects(request({ grant_type: 'named' }), { error: 'invalid_request', description: 'these parameters are missing: "ticket", "client_id"' });
    await assert.rejects(request({ grant_type: 'secret' }), { error: 'invalid_client', description: 'this client must authenticate with its secret' });
    await assert.rejects(request({ grant_type: 'anyone', ticket: ids.public, note: ['a', 'b'] }), {
      error: 'invalid_request',
      description: 'the "note" parameter is repeated',
    });
    assert.ok(!events.includes('load'));
    assert.deepEqual(await request({ grant_type: 'secret' }, GRANTS, basic), RESPONSE);
  });

  test('a client not registered for the grant is refused before load, and a public one is not charged for it', async () => {
    const refused = { error: 'unauthorized_client', description: 'this client is not registered for the machines grant' };
    await assert.rejects(request({ grant_type: 'machines', ticket: ids.public, client_id: ids.public }), refused);
    assert.deepEqual(events, ['address']);
    events = [];
    // A client that proved itself spends its budget on any request (above), this one too.
    await assert.rejects(request({ grant_type: 'machines', ticket: ids.confidential }, GRANTS, basic), refused);
    assert.deepEqual(events, ['address', `charge ${ids.confidential}`, `standing ${ids.confidential}`]);
  });

  test('without a client in the request, the one load identified is held to the grant right after load: refused, it is not charged', async () => {
    await assert.rejects(request({ grant_type: 'machines', ticket: ids.public }), {
      error: 'unauthorized_client',
      description: 'this client is not registered for the machines grant',
    });
    assert.deepEqual(events, ['address', 'load']);
  });

  test('a grant that takes credentials is for confidential clients: a public client naming itself is not registered for it', async () => {
    await assert.rejects(request({ grant_type: 'secret', client_id: ids.public }), {
      error: 'unauthorized_client',
      description: 'this client is not registered for the test grant',
    });
    assert.deepEqual(events, ['address']);
  });

  test('the declared parameters arrive read: an empty one absent, a repeatable one as sent', async () => {
    await request({ grant_type: 'echo', ticket: ids.public, note: '', resource: ['https://a.example/', 'https://b.example/'], undeclared: 'x' });
    assert.deepEqual(seen, { ticket: ids.public, note: undefined, resource: ['https://a.example/', 'https://b.example/'] });
  });
});
