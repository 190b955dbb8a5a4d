/**
 * The storage backends every suite runs against. SQLite always; PostgreSQL when the test
 * runner (test/run.ts) found a server — each suite then gets a throw-away database of its
 * own. When PostgreSQL is missing the suites say so by name (and CI fails in run.ts).
 */
import { randomBytes } from 'node:crypto';
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { loadConfig } from '../../src/config.ts';
import { migrate, openStore } from '../../src/store/database.ts';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

export interface Backend {
  name: 'sqlite' | 'postgres';
  /** Why the backend cannot run here, or undefined when it can. */
  unavailable: string | undefined;
  /** A fresh, empty database; returns its DATABASE_URL and a cleanup function. */
  create(): Promise<{ url: string; drop(): Promise<void> }>;
  /**
   * A fresh database with every migration applied, for a server to start on (which migrates
   * it anyway: then nothing is pending): a copy of a template migrated once — for the run on
   * PostgreSQL (test/run.ts makes it; without it, an empty database), for the test process on
   * SQLite. Migrating costs each server a second of PostgreSQL's CPU or a tenth of a second of
   * SQLite's; copying, about what creating an empty database does.
   */
  createMigrated(): Promise<{ url: string; drop(): Promise<void> }>;
}

const postgresAdminUrl = process.env.GATEHOUSE_TEST_POSTGRES;

export const sqlite: Backend = {
  name: 'sqlite',
  unavailable: undefined,
  async create() {
    const dir = mkdtempSync(join(tmpdir(), 'gatehouse-test-'));
    return { url: `sqlite:${join(dir, 'gatehouse.db')}`, drop: async () => rmSync(dir, { recursive: true, force: true }) };
  },
  async createMigrated() {
    const fresh = await this.create();
    copyFileSync(await migratedSqliteFile(), fresh.url.slice('sqlite:'.length));
    return fresh;
  },
};

let sqliteTemplate: Promise<string> | undefined;

/** A SQLite database migrated once per test process, which `createMigrated` copies: a copy costs a millisecond, migrating a tenth of a second. */
function migratedSqliteFile(): Promise<string> {
  sqliteTemplate ??= (async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gatehouse-template-'));
    process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
    const path = join(dir, 'template.db');
    const store = openStore(loadConfig({ DATABASE_URL: `sqlite:${path}` }).database);
    await migrate(store);
    await store.close(); // the last connection closed: everything is in the one file
    return path;
  })();
  return sqliteTemplate;
}

export const postgres: Backend = {
  name: 'postgres',
  unavailable: postgresAdminUrl ? undefined : process.env.GATEHOUSE_TEST_POSTGRES_MISSING || 'PostgreSQL was not found by test/run.ts',
  create: () => createPostgres(null),
  createMigrated: () => createPostgres(process.env.GATEHOUSE_TEST_POSTGRES_TEMPLATE ?? null),
};

/** A throw-away database, a copy of `template` (a name test/run.ts made: no quoting needed) or empty. */
async function createPostgres(template: string | null): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `gatehouse_test_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: postgresAdminUrl });
  await admin.connect();
  await admin.query(`create database ${name}${template ? ` template ${template}` : ''}`);
  await admin.end();
  const url = new URL(postgresAdminUrl!);
  url.pathname = `/${name}`;
  return {
    url: url.href,
    async drop() {
      const client = new pg.Client({ connectionString: postgresAdminUrl });
      await client.connect();
      await client.query(`drop database if exists ${name} with (force)`);
      await client.end();
    },
  };
}

export const BACKENDS: readonly Backend[] = [sqlite, postgres];

/** `describe` options that skip, with the reason shown, a backend that cannot run here. */
export function backendOptions(backend: Backend): { skip?: string } {
  return backend.unavailable ? { skip: `${backend.name} unavailable: ${backend.unavailable}` } : {};
}
