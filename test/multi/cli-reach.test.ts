/**
 * Issue 30, item 2: a change made from the command line reaches a running SQLite server
 * (`gatehouse serve`, one process and WORKERS=2, no Redis) within a second, performed as an
 * operator would after a suspected compromise — `gatehouse keys revoke <active kid>` run as
 * a process of its own against the server's database file. Within the second, the kid is
 * gone from every worker's JWKS and every worker signs new JWT access tokens with another
 * key; `keys rotate --now` likewise. Before, the server went on publishing and signing with
 * the revoked key until its next minute's re-read of the keys. Also: scopes created from the
 * command line reach the metadata, and a deleted client is refused, within the second.
 *
 * Every request here opens a connection of its own, which the primary hands to the workers
 * in turn, so that a check that holds several times in a row holds on both workers.
 */
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { decodeProtectedHeader } from 'jose';
import { sqlite } from '../support/backends.ts';
import { freePort } from '../support/ports.ts';
import { gatehouse, serve, stopChild, type Serving } from '../support/processes.ts';

const FILES = 'https://files.example/api';
/** The promise: a command-line change is acted on within a second; the check itself takes a little longer. */
const WITHIN_MS = 1500;

/** One request on a connection of its own. */
function send(url: string, path: string, options: { form?: Record<string, string>; headers?: Record<string, string> } = {}) {
  const body = options.form ? new URLSearchParams(options.form).toString() : undefined;
  const headers = { ...(body ? { 'content-type': 'application/x-www-form-urlencoded' } : {}), ...options.headers };
  return new Promise<{ status: number; body: string }>((resolve, reject) => {
    const outgoing = request(new URL(path, url), { method: body ? 'POST' : 'GET', headers, agent: false }, (response) => {
      let text = '';
      response.on('data', (chunk) => (text += chunk));
      response.on('end', () => resolve({ status: response.statusCode!, body: text }));
    });
    outgoing.on('error', reject);
    outgoing.end(body);
  });
}

/**
 * Waits until `holds` is true `times` times in a row (each on a connection of its own: both
 * workers), failing if that takes longer than WITHIN_MS from `since`; returns how long it took.
 */
async function within(since: number, what: string, holds: () => Promise<boolean>, times = 4): Promise<number> {
  for (;;) {
    let inARow = 0;
    while (inARow < times && (await holds())) inARow++;
    if (inARow === times) return Date.now() - since;
    assert.ok(Date.now() - since < WITHIN_MS, `${what}: not within ${WITHIN_MS} ms of the command's end`);
    await sleep(20);
  }
}

for (const workers of ['1', '2']) {
  describe(`command-line changes reach a running SQLite server within a second (WORKERS=${workers}, no Redis)`, () => {
    let database: { url: string; drop(): Promise<void> };
    let server: Serving;
    let robot: { client_id: string; client_secret: string };
    let env: Record<string, string>;
    const cli = async (...args: string[]) => {
      const run = await gatehouse(args, env);
      assert.equal(run.code, 0, `gatehouse ${args.join(' ')}: ${run.stderr}`);
      return run.stdout;
    };

    const jwks = async () => (JSON.parse((await send(server.url, '/oauth/jwks')).body) as { keys: Array<{ kid: string; alg: string }> }).keys;
    /** The kid in the header of a JWT access token the server issues now (client_credentials for the JWT resource server). */
    const signingKid = async () => {
      const basic = `Basic ${Buffer.from(`${robot.client_id}:${robot.client_secret}`).toString('base64')}`;
      const answer = await send(server.url, '/api/token', {
        form: { grant_type: 'client_credentials', resource: FILES, scope: 'files:read' },
        headers: { authorization: basic },
      });
      assert.equal(answer.status, 200, answer.body);
      return decodeProtectedHeader((JSON.parse(answer.body) as { access_token: string }).access_token).kid!;
    };
    const activeKid = async () =>
      (JSON.parse(await cli('keys', 'list', '--json')) as Array<{ kid: string; alg: string; state: string }>).find(
        (key) => key.alg === 'ES256' && key.state === 'active',
      )!.kid;

    before(async () => {
      database = await sqlite.create();
      const port = String(await freePort());
      env = { DATABASE_URL: database.url, PUBLIC_URL: `http://127.0.0.1:${port}` };
      await cli('resource', 'create', '--uri', FILES, '--name', 'Files', '--scope', 'files:read=Read your files', '--token-format', 'jwt');
      robot = JSON.parse(
        await cli('client', 'create', '--name', 'Robot', '--grant-type', 'client_credentials', '--confidential', '--scope', 'files:read', '--json'),
      ) as typeof robot;
      server = await serve({ ...env, PORT: port, WORKERS: workers, LOG_LEVEL: 'warn', PURGE_INTERVAL_SECONDS: '0' });
    });
    after(async () => {
      if (server) await stopChild(server.process);
      await database?.drop();
    });

    test('keys revoke <the active kid>: the kid leaves the JWKS and stops signing within a second', async (t) => {
      const kid = await activeKid();
      for (let i = 0; i < 4; i++) assert.equal(await signingKid(), kid, 'the active key signs');
      assert.ok((await jwks()).some((key) => key.kid === kid));

      await cli('keys', 'revoke', '--', kid);
      const revokedAt = Date.now();
      const took = await within(revokedAt, 'the revoked kid left the JWKS and signs no more', async () => {
        const published = await jwks();
        return !published.some((key) => key.kid === kid) && (await signingKid()) !== kid;
      });
      const successor = await activeKid();
      assert.notEqual(successor, kid);
      assert.equal(await signingKid(), successor, 'the new active key signs');
      t.diagnostic(`acted on ${took} ms after the command ended`);
    });

    test('keys rotate --now: new keys sign within a second', async () => {
      const old = await activeKid();
      await cli('keys', 'rotate', '--now');
      const rotatedAt = Date.now();
      const successor = await activeKid();
      assert.notEqual(successor, old);
      await within(rotatedAt, 'the new key signs', async () => (await signingKid()) === successor);
      assert.ok(
        (await jwks()).some((key) => key.kid === old),
        'the old key retires, still published',
      );
    });

    test('scope create: the metadata lists the new scope within a second', async () => {
      const listed = async () =>
        (JSON.parse((await send(server.url, '/.well-known/oauth-authorization-server')).body) as { scopes_supported: string[] }).scopes_supported;
      assert.ok((await listed()).includes('files:read')); // and the server holds its catalogue now
      await cli('scope', 'create', 'files:write', '--resource', FILES, '--description', 'Change your files');
      await within(Date.now(), 'the metadata lists the new scope', async () => (await listed()).includes('files:write'));
    });

    test('client delete: the client gets no token within a second', async () => {
      assert.ok(await signingKid()); // the client is held in memory now
      await cli('client', 'delete', robot.client_id);
      const deletedAt = Date.now();
      const basic = `Basic ${Buffer.from(`${robot.client_id}:${robot.client_secret}`).toString('base64')}`;
      await within(deletedAt, 'the deleted client is refused', async () => {
        const answer = await send(server.url, '/api/token', {
          form: { grant_type: 'client_credentials', resource: FILES, scope: 'files:read' },
          headers: { authorization: basic },
        });
        return answer.status === 401;
      });
    });
  });
}
