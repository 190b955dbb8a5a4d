/**
 * The code layout the README promises ("Code layout"), checked on the source itself: every
 * import points down the floors or along one, no two files import each other (by value or by
 * type, directly or round a loop), `src/http/` touches no `src/store/` module, and no source
 * line is over 160 characters. A new file must be given a floor here.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { describe, test } from 'node:test';

const SRC = join(import.meta.dirname, '../../src');

/** The floors, bottom first: a file may import from its own floor or below (README, Code layout). */
const FLOORS: ReadonlyArray<readonly [string, (path: string) => boolean]> = [
  [
    'wire primitives, what a login proved, settings, the schema',
    (p) => p.startsWith('protocol/') || ['login.ts', 'config.ts', 'ids.ts', 'input-error.ts', 'tokens.ts', 'store/schema.ts'].includes(p),
  ],
  ['store', (p) => p.startsWith('store/')],
  [
    'the context and the shared engines',
    (p) =>
      p.startsWith('events/') ||
      [
        'context.ts',
        'audit.ts',
        'metrics.ts',
        'throttle.ts',
        'services.ts',
        'client-cache.ts',
        'bearer-token-cache.ts',
        'maintenance.ts',
        'cluster.ts',
        'mail.ts',
      ].includes(p),
  ],
  ['identity', (p) => p.startsWith('identity/')],
  ['oauth', (p) => p.startsWith('oauth/')],
  [
    'accounts, clients, opening the context',
    (p) => p.startsWith('accounts/') || p.startsWith('clients/') || ['open-context.ts', 'secrets-at-rest.ts'].includes(p),
  ],
  ['http, cli', (p) => p.startsWith('http/') || p.startsWith('cli/')],
  ['the app and the entry', (p) => ['app.ts', 'main.ts'].includes(p)],
];

function floorOf(path: string): number {
  const floor = FLOORS.findIndex(([, holds]) => holds(path));
  assert.notEqual(floor, -1, `src/${path} is on no floor: give it one in test/unit/layout.test.ts and the README`);
  return floor;
}

function sourceFiles(dir = SRC): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === 'views' ? [] : sourceFiles(path);
    return /\.(ts|js)$/.test(entry.name) ? [relative(SRC, path)] : [];
  });
}

const files = sourceFiles();
const IMPORT = /^(?:import|export)\s+(?:type\s+)?[^;]*?\sfrom\s+'(\.[^']+)'/gm;
/** Each file's imports of other source files (by value or by type). */
const imports = new Map(
  files.map((file) => {
    const text = readFileSync(join(SRC, file), 'utf8');
    const targets = [...text.matchAll(IMPORT)].map((m) => normalize(join(dirname(file), m[1]!))).filter((target) => !target.startsWith('..'));
    return [file, targets] as const;
  }),
);

describe('code layout', () => {
  test('every import points down the floors or along one', () => {
    const upward = [...imports].flatMap(([file, targets]) =>
      targets.filter((target) => floorOf(target) > floorOf(file)).map((target) => `${file} → ${target} (${FLOORS[floorOf(target)]![0]})`),
    );
    assert.deepEqual(upward, []);
  });

  test('no file reaches itself through its imports', () => {
    const cycles: string[] = [];
    const state = new Map<string, 'open' | 'done'>();
    const visit = (file: string, path: string[]) => {
      state.set(file, 'open');
      for (const target of imports.get(file) ?? []) {
        if (state.get(target) === 'open') cycles.push([...path.slice(path.indexOf(target)), target].join(' → '));
        else if (!state.has(target)) visit(target, [...path, target]);
      }
      state.set(file, 'done');
    };
    for (const file of files) if (!state.has(file)) visit(file, [file]);
    assert.deepEqual(cycles, []);
  });

  test('no route file touches the store', () => {
    const reaching = [...imports]
      .filter(([file]) => file.startsWith('http/'))
      .flatMap(([file, targets]) => targets.filter((t) => t.startsWith('store/')).map((t) => `${file} → ${t}`));
    assert.deepEqual(reaching, []);
  });

  test('no source line is over 160 characters', () => {
    const long = files.flatMap((file) =>
      readFileSync(join(SRC, file), 'utf8')
        .split('\n')
        .flatMap((line, index) => (line.length > 160 ? [`src/${file}:${index + 1} (${line.length})`] : [])),
    );
    assert.deepEqual(long, []);
  });
});
