/** Reading `/metrics` as Prometheus would. */
import assert from 'node:assert/strict';
import type { TestServer } from './server.ts';

export type Samples = Map<string, number>;

/** Parses the Prometheus text format into `name{labels}` → value; sends `token` as a Bearer token when given. */
export async function scrape(server: TestServer, token?: string): Promise<Samples> {
  const response = await fetch(`${server.url}/metrics`, token === undefined ? {} : { headers: { authorization: `Bearer ${token}` } });
  assert.equal(response.status, 200);
  assert.match(response.headers.get('content-type')!, /^text\/plain; version=0\.0\.4/);
  const samples: Samples = new Map();
  for (const line of (await response.text()).split('\n')) {
    const match = /^([a-z_]+(?:\{[^}]*\})?) (\S+)$/.exec(line);
    if (match) samples.set(match[1]!, Number(match[2]));
  }
  return samples;
}

/**
 * Scrapes until `ready` holds (within five seconds): for what the server does in the
 * background, such as its first count of table sizes after start.
 */
export async function scrapeUntil(server: TestServer, ready: (samples: Samples) => boolean, token?: string): Promise<Samples> {
  for (let waited = 0; ; waited += 100) {
    const samples = await scrape(server, token);
    if (ready(samples)) return samples;
    assert.ok(waited < 5000, 'the metrics did not get there within 5 seconds');
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** The DATABASE_URL of the server's database, to start another server on it (a restart). */
export function databaseUrl(server: TestServer): string {
  const { database } = server.config;
  return database.kind === 'sqlite' ? `sqlite:${database.path}` : database.url;
}
