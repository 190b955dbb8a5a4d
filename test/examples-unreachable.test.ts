/**
 * Every example (`npm run example…`) started while Gatehouse is not where it looks: one line
 * saying what to start or which variable to set, exit 1, no stack trace — and nothing
 * registered or served meanwhile.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { test } from 'node:test';
import { freePort } from './support/ports.ts';

const REPOSITORY = new URL('..', import.meta.url);
const { scripts } = JSON.parse(await readFile(new URL('package.json', REPOSITORY), 'utf8')) as { scripts: Record<string, string> };
const EXAMPLES = Object.entries(scripts).filter(([name]) => /^example(:|$)/.test(name));

test('the package has the four examples', () => assert.equal(EXAMPLES.length, 4));

for (const [name, script] of EXAMPLES) {
  test(`npm run ${name} without Gatehouse says in one line to start it or set GATEHOUSE_URL`, async () => {
    const [, file] = /^node (\S+)$/.exec(script)!;
    const directory = await mkdtemp(join(tmpdir(), 'gatehouse-example-'));
    const closed = await freePort(); // nobody listens there
    try {
      const env = {
        PATH: process.env.PATH,
        GATEHOUSE_URL: `http://127.0.0.1:${closed}`,
        EXAMPLE_DATA_DIR: directory,
        DATABASE_URL: `sqlite:${join(directory, 'g.db')}`,
      };
      const run = await promisify(execFile)(process.execPath, [file!], { cwd: REPOSITORY, env, timeout: 30_000 }).then(
        () => assert.fail('the example did not fail'),
        (error: { code: number; stdout: string; stderr: string }) => error,
      );
      assert.equal(run.code, 1);
      assert.equal(run.stdout, '');
      assert.equal(run.stderr, `Gatehouse is not answering at http://127.0.0.1:${closed}/: start it (npm start) or set GATEHOUSE_URL to where it runs.\n`);
      assert.deepEqual(await readdir(directory), [], 'the example registered itself before checking');
    } finally {
      await rm(directory, { recursive: true, force: true });
    }
  });
}
