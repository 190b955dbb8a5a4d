/** Resource indicators (SPEC §3, RFC 8707): what may name a resource server, its one normalized form, and what is read for one. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { COMMAND_LINE } from '../../src/audit.ts';
import { registerResource } from '../../src/clients/resources.ts';
import { audienceById, normalizeResourceUri, requestedAudience } from '../../src/oauth/resources.ts';
import { memoryContext } from './support/context.ts';

const uri = (raw: string) => {
  const result = normalizeResourceUri(raw);
  return 'uri' in result ? result.uri : `problem: ${result.problem}`;
};

describe('normalizeResourceUri', () => {
  test('lower-cases scheme and host and removes one trailing slash, nothing else', () => {
    assert.equal(uri('HTTPS://MCP.Example.COM/'), 'https://mcp.example.com');
    assert.equal(uri('https://mcp.example.com/Tools/'), 'https://mcp.example.com/Tools');
    assert.equal(uri('https://mcp.example.com//'), 'https://mcp.example.com/');
    assert.equal(uri('https://mcp.example.com:8443/a%2Fb'), 'https://mcp.example.com:8443/a%2Fb');
  });

  test('http only on loopback hosts', () => {
    assert.equal(uri('http://127.0.0.1:3000/mcp'), 'http://127.0.0.1:3000/mcp');
    assert.equal(uri('http://LOCALHOST:3000'), 'http://localhost:3000');
    assert.equal(uri('http://[::1]:3000/'), 'http://[::1]:3000');
    assert.match(uri('http://api.example.com'), /must use https/);
  });

  test('refuses what is not an absolute https URL without query, fragment or user name', () => {
    assert.match(uri('/relative'), /absolute URL/);
    assert.match(uri('urn:example:api'), /absolute URL/);
    assert.match(uri('ftp://files.example.com'), /must use https/);
    assert.match(uri('https://api.example.com/?a=1'), /query/);
    assert.match(uri('https://api.example.com/#top'), /fragment/);
    assert.match(uri('https://user:pw@api.example.com'), /user name/);
    assert.match(uri('https://api.example.com/ x'), /spaces/);
    assert.match(uri(`https://api.example.com/${'a'.repeat(2000)}`), /too long/);
  });
});

describe('the audience an authorization request asks for', () => {
  test('a resource server is read with its scopes in name order, one with none with none, an unknown one refused', async () => {
    const { ctx, close } = await memoryContext();
    try {
      const scopes = [
        { name: 'tools:write', description: 'Change things' },
        { name: 'tools:read', description: 'Read things' },
      ];
      await registerResource(ctx, { uri: 'https://mcp.example.com', name: 'Tools', scopes }, COMMAND_LINE);
      await registerResource(ctx, { uri: 'https://bare.example.com', name: 'Bare', scopes: [] }, COMMAND_LINE);

      const tools = await requestedAudience(ctx, 'https://MCP.example.com/');
      assert.equal(tools.name, 'Tools');
      assert.deepEqual(
        tools.scopes.map(({ name, description }) => ({ name, description })),
        [...scopes].reverse(),
      );
      assert.deepEqual((await audienceById(ctx, tools.id)).scopes, tools.scopes, 'by id as by URI');
      const bare = await requestedAudience(ctx, 'https://bare.example.com');
      assert.equal(bare.name, 'Bare');
      assert.deepEqual(bare.scopes, []);
      await assert.rejects(requestedAudience(ctx, 'https://unknown.example.com'), /unknown to this authorization server/);
      await assert.rejects(audienceById(ctx, 'no-such-id'), /no longer exists/);
    } finally {
      await close();
    }
  });
});
