/**
 * The MCP project's conformance suite (@modelcontextprotocol/conformance) run against a
 * fresh Gatehouse: its authorization-server scenarios — metadata at the RFC 8414 location,
 * and a whole authorization code grant with a public client — with its browser step (it
 * prints an authorization URL and waits on its loopback callback) done in Chromium.
 * Every check it records must be SUCCESS.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { browserOptions, launchBrowser, logIn, type TestBrowser } from '../support/browser.ts';
import { freePort } from '../support/ports.ts';
import { registerResourceServer } from '../support/resources.ts';
import { startServer, type TestServer } from '../support/server.ts';

const CONFORMANCE = join(dirname(createRequire(import.meta.url).resolve('@modelcontextprotocol/conformance/package.json')), 'dist/index.js');
const RESOURCE = 'https://notes.example/mcp';

interface Check {
  id: string;
  status: 'SUCCESS' | 'FAILURE' | 'WARNING' | 'SKIPPED' | 'INFO';
  description?: string;
  errorMessage?: string;
}

for (const backend of BACKENDS) {
  describe(`MCP conformance: authorization server scenarios (${backend.name})`, { ...backendOptions(backend), ...browserOptions() }, () => {
    let server: TestServer;
    let browser: TestBrowser;
    let outDir: string;

    before(async () => {
      [server, browser] = await Promise.all([startServer(backend), launchBrowser()]);
      await server.createUser('alice');
      outDir = mkdtempSync(join(tmpdir(), 'gatehouse-conformance-'));
    });
    after(async () => {
      await browser?.close();
      await server?.close();
      rmSync(outDir, { recursive: true, force: true });
    });

    test('every check of every authorization-server scenario succeeds', async () => {
      await registerResourceServer(server, RESOURCE, [{ name: 'notes:read', description: 'Read your notes' }], 'Notes');
      // A public client, as MCP clients are; the suite listens on a loopback port of its
      // choosing, which the any-port loopback rule (RFC 8252 §7.3) accepts.
      const { client } = await server.createClient({
        name: 'MCP conformance',
        redirectUris: ['http://127.0.0.1/callback'],
        requirePkce: true,
        scope: 'notes:read',
      });
      const port = await freePort();
      const child = spawn(
        process.execPath,
        [CONFORMANCE, 'authorization', '--url', server.url, '--client-id', client.id, '--resource', RESOURCE, '-p', String(port), '-o', outDir],
        {
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      );
      let output = '';
      child.stderr.on('data', (chunk) => (output += String(chunk)));
      const authorizeUrl = new Promise<string>((resolve) => {
        child.stdout.on('data', (chunk) => {
          output += String(chunk);
          // It prints the URL alone on a line after "Access the following URL in your browser".
          const found = /^(http\S+\/oauth\/authorize\?\S+)$/m.exec(output);
          if (found) resolve(found[1]!);
        });
      });
      const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
      try {
        const url = await Promise.race([
          authorizeUrl,
          exited.then((code) => Promise.reject(new Error(`the suite exited (${code}) before its browser step:\n${output}`))),
        ]);
        assert.equal(new URL(url).searchParams.get('resource'), RESOURCE);
        const context = await browser.newContext();
        try {
          const page = await context.newPage();
          await page.goto(url);
          await logIn(page, 'alice');
          await page.getByRole('heading', { name: 'Authorize MCP conformance' }).waitFor();
          await page.getByRole('button', { name: 'Authorize' }).click();
          await page.waitForURL((address) => address.href.startsWith(`http://127.0.0.1:${port}/callback`));
        } finally {
          await context.close();
        }
        assert.equal(await exited, 0, output);
      } finally {
        child.kill();
      }

      const scenarios = readdirSync(outDir).filter((name) => name.startsWith('authorization-server-'));
      assert.equal(scenarios.length, 2, `one result folder per scenario: ${scenarios.join(', ')}`);
      const checks = scenarios.flatMap((scenario) =>
        (JSON.parse(readFileSync(join(outDir, scenario, 'checks.json'), 'utf8')) as Check[]).map((check) => ({ scenario, ...check })),
      );
      // Every check these scenarios make, so that a check the suite stops making is noticed.
      assert.deepEqual(
        checks.map((check) => check.id).sort(),
        ['authorization-code-grant', 'authorization-server-metadata', 'authorization-server-metadata-cimd'],
        output,
      );
      assert.deepEqual(
        checks.filter((check) => check.status !== 'SUCCESS'),
        [],
        `every check must succeed; the suite said:\n${output}`,
      );
    });
  });
}
