/**
 * The device login example (examples/device-login) against a real Gatehouse, as its README
 * has people run it: it registers itself through the command line, prints the code and the
 * URL, polls, and calls /api/profile once the person has approved at /device.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { sqlite } from '../support/backends.ts';
import { answerAtDevicePage } from '../support/device.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';

const EXAMPLE = fileURLToPath(new URL('../../examples/device-login/login.ts', import.meta.url));

describe('the device login example', () => {
  let server: TestServer;
  let dataDir: string;

  before(async () => {
    server = await startServer(sqlite);
    await server.createUser('alice');
    dataDir = mkdtempSync(join(tmpdir(), 'gatehouse-device-example-'));
  });
  after(async () => {
    await server?.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  test('registers itself, shows the code, and logs in once the person approves', async () => {
    if (server.config.database.kind !== 'sqlite') throw new Error('unreachable');
    const child = spawn(process.execPath, [EXAMPLE], {
      env: { ...process.env, GATEHOUSE_URL: server.url, DATABASE_URL: `sqlite:${server.config.database.path}`, EXAMPLE_DATA_DIR: dataDir },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk) => (output += String(chunk)));
    child.stderr.on('data', (chunk) => (output += String(chunk)));
    const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
    try {
      for (let waited = 0; !/or open (\S+)/.test(output); waited += 100) {
        assert.ok(waited < 90_000 && child.exitCode === null, `no code shown: ${output}`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      const userCode = /enter the code\s+([A-Z]{4}-[A-Z]{4})/.exec(output)![1]!;
      const complete = /or open (\S+)/.exec(output)![1]!;
      const agent = new UserAgent(server.url);
      await agent.login('alice');
      await answerAtDevicePage(agent, { user_code: userCode, verification_uri_complete: complete }, 'approve');
      assert.equal(await exited, 0, output);
      assert.match(output, /Logged in as alice \(scopes: annotation:read\)\./);
    } finally {
      child.kill();
    }
  });
});
