/**
 * An MCP host as the MCP suites play it: the example MCP server (examples/mcp-server) started
 * as `npm run example:mcp` starts it, against a test server, and what a host implements for
 * the MCP SDK's client (OAuthClientProvider). Used by test/browser/mcp-client.test.ts and
 * test/connections/front-door.test.ts.
 */
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { OAuthClientProvider } from '@modelcontextprotocol/sdk/client/auth.js';
import type { OAuthClientInformationMixed, OAuthClientMetadata, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { freePort } from './ports.ts';
import { databaseUrl, startChild, type Child } from './processes.ts';
import type { TestServer } from './server.ts';

const EXAMPLE = fileURLToPath(new URL('../../examples/mcp-server/server.ts', import.meta.url));

export interface Example extends Child {
  url: string;
  dataDir: string;
}

/**
 * `npm run example:mcp` against this server, with Gatehouse's settings in its environment;
 * `again` starts a stopped one again, at the same address with the same data.
 */
export async function startExample(server: TestServer, options: { again?: Example; tokenFormat?: 'jwt' } = {}): Promise<Example> {
  const url = options.again?.url ?? `http://127.0.0.1:${await freePort()}/mcp`;
  const dataDir = options.again?.dataDir ?? mkdtempSync(join(tmpdir(), 'gatehouse-mcp-example-'));
  const env = {
    PATH: process.env.PATH,
    GATEHOUSE_URL: server.url,
    MCP_URL: url,
    EXAMPLE_DATA_DIR: dataDir,
    DATABASE_URL: databaseUrl(server.config),
    ...(options.tokenFormat ? { MCP_TOKEN_FORMAT: options.tokenFormat } : {}),
  };
  const started = await startChild('the MCP example', EXAMPLE, [], env, (output) => output.includes('Example MCP server:'));
  return { url, dataDir, ...started };
}

/**
 * What an MCP host (Claude, VS Code…) implements: where to keep the client's registration
 * and tokens, and how to send the person to the authorization URL. Here the URL is kept
 * for the test to open in Chromium.
 */
export class Provider implements OAuthClientProvider {
  readonly redirectUrl: string;
  readonly clientMetadataUrl: string | undefined;
  /** What the client asks for instead of everything the MCP server offers, if anything. */
  readonly onlyScope: string | undefined;
  authorizationUrl: URL | undefined;
  private information: OAuthClientInformationMixed | undefined;
  private held: OAuthTokens | undefined;
  private verifier: string | undefined;

  constructor(redirectUrl: string, options: { clientMetadataUrl?: string; onlyScope?: string } = {}) {
    this.redirectUrl = redirectUrl;
    this.clientMetadataUrl = options.clientMetadataUrl;
    this.onlyScope = options.onlyScope;
  }
  get clientMetadata(): OAuthClientMetadata {
    return {
      client_name: 'Notes MCP client',
      redirect_uris: [this.redirectUrl],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    };
  }
  clientInformation() {
    return this.information;
  }
  saveClientInformation(information: OAuthClientInformationMixed) {
    this.information = information;
  }
  tokens() {
    return this.held;
  }
  saveTokens(tokens: OAuthTokens) {
    this.held = tokens;
  }
  redirectToAuthorization(url: URL) {
    // A host may ask for less than the MCP server offers (least privilege).
    if (this.onlyScope !== undefined) url.searchParams.set('scope', this.onlyScope);
    this.authorizationUrl = url;
  }
  saveCodeVerifier(verifier: string) {
    this.verifier = verifier;
  }
  codeVerifier() {
    if (this.verifier === undefined) throw new Error('no code verifier saved');
    return this.verifier;
  }
  invalidateCredentials(scope: 'all' | 'client' | 'tokens' | 'verifier' | 'discovery') {
    if (scope === 'all' || scope === 'tokens') this.held = undefined;
    if (scope === 'all' || scope === 'client') this.information = undefined;
  }
}

/** The text of a tool call's first item (`error: …` when the call failed). */
export function text(result: unknown): string {
  const { content, isError } = result as CallToolResult;
  assert.equal(content[0]?.type, 'text');
  return `${isError ? 'error: ' : ''}${(content[0] as { text: string }).text}`;
}

/** `expected` occurs in `seen`, in this order (other requests may come between). */
export function assertInOrder(seen: readonly string[], expected: readonly string[]): void {
  let at = 0;
  for (const line of seen) if (line === expected[at]) at++;
  assert.equal(at, expected.length, `expected, in order:\n${expected.join('\n')}\ngot:\n${seen.join('\n')}`);
}
