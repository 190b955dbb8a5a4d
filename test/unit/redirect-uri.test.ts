/** Redirect URLs (src/protocol/redirect-uri.ts): what may be registered, and which requested URL matches it. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { consentOrigin, originOf, redirectDestinations, redirectUriMatches, redirectUriProblem as problemFor } from '../../src/protocol/redirect-uri.ts';

/** The rule for a confidential client, and for a public one (which may also use a private-use scheme). */
const redirectUriProblem = (uri: string) => problemFor(uri, { publicClient: false });
const publicClientProblem = (uri: string) => problemFor(uri, { publicClient: true });

describe('redirectUriProblem (registration)', () => {
  test('https URLs, with a path and query, may be registered', () => {
    assert.equal(redirectUriProblem('https://app.example/callback'), null);
    assert.equal(redirectUriProblem('https://app.example:8443/cb?tenant=a'), null);
  });

  test('plain http is allowed for loopback hosts only', () => {
    for (const uri of ['http://127.0.0.1/cb', 'http://127.0.0.1:8080/cb', 'http://[::1]:8080/cb', 'http://localhost:8080/cb']) {
      assert.equal(redirectUriProblem(uri), null, uri);
    }
    for (const uri of ['http://app.example/cb', 'http://10.0.0.1/cb', 'http://localhost.evil.example/cb', 'http://127.0.0.2/cb']) {
      assert.match(redirectUriProblem(uri) ?? '', /must use https/, uri);
    }
  });

  test('a relative or unparsable URL is refused', () => {
    assert.equal(redirectUriProblem('/callback'), 'must be an absolute URL');
    assert.equal(redirectUriProblem('https://'), 'must be an absolute URL');
  });

  test('a fragment is refused, even an empty one (RFC 6749 §3.1.2)', () => {
    assert.equal(redirectUriProblem('https://app.example/cb#here'), 'must not contain a fragment');
    assert.equal(redirectUriProblem('https://app.example/cb#'), 'must not contain a fragment');
  });

  test('user names and passwords are refused', () => {
    assert.equal(redirectUriProblem('https://user@app.example/cb'), 'must not contain a user name or password');
    assert.equal(redirectUriProblem('https://user:pw@app.example/cb'), 'must not contain a user name or password');
  });

  test('other schemes are refused for a confidential client: custom app schemes and script URLs alike', () => {
    for (const uri of [
      'cursor://anysphere.cursor-mcp/oauth/callback',
      'com.example.app:/callback',
      'javascript:alert(1)',
      'data:text/html,hi',
      'ftp://app.example/cb',
    ]) {
      assert.match(redirectUriProblem(uri) ?? '', /^must use https/, uri);
    }
  });

  test('a public client may use a private-use scheme with a // authority (RFC 8252 §7.1), never a dangerous one', () => {
    for (const uri of [
      'cursor://anysphere.cursor-mcp/oauth/callback',
      'vscode://vscode.github-authentication/did-authenticate',
      'com.example.app://callback',
    ]) {
      assert.equal(publicClientProblem(uri), null, uri);
    }
    for (const uri of [
      'javascript://x/%0aalert(1)',
      'data://x/text',
      'file:///etc/passwd',
      'file://host/share',
      'vbscript://x/y',
      'blob://x/y',
      'about://blank/x',
      'ws://app.example/cb',
      'wss://app.example/cb',
      'com.example.app:/callback', // no authority: RFC 8252's reverse-DNS form without //, refused by the SPEC
      'mailto:someone@example.com',
      'cursor://user@anysphere.cursor-mcp/cb',
      'cursor://anysphere.cursor-mcp/cb#frag',
    ]) {
      assert.notEqual(publicClientProblem(uri), null, uri);
    }
  });
});

describe('redirectUriMatches', () => {
  test('the registered URL matches itself', () => {
    assert.equal(redirectUriMatches('https://app.example/cb?x=1', 'https://app.example/cb?x=1'), true);
  });

  test('matching is exact: no path prefix, trailing slash, case, query or port change', () => {
    const registered = 'https://app.example/cb';
    for (const requested of [
      'https://app.example/cb/',
      'https://app.example/cb/more',
      'https://app.example/CB',
      'https://APP.example/cb', // would normalise to the same URL, but matching is to the letter
      'https://app.example/cb?x=1',
      'https://app.example:443/cb',
      'https://app.example:8443/cb',
      'http://app.example/cb',
      'https://app.example.evil.example/cb',
      'https://app.example/cb#x',
    ]) {
      assert.equal(redirectUriMatches(registered, requested), false, requested);
    }
  });

  test('a registered http://127.0.0.1 URL matches the same URL on any port (RFC 8252 §7.3)', () => {
    const registered = 'http://127.0.0.1/cb';
    assert.equal(redirectUriMatches(registered, 'http://127.0.0.1:51234/cb'), true);
    assert.equal(redirectUriMatches('http://127.0.0.1:8080/cb', 'http://127.0.0.1:51234/cb'), true);
    assert.equal(redirectUriMatches('http://127.0.0.1:8080/cb', 'http://127.0.0.1/cb'), true);
  });

  test('the same holds for http://[::1]', () => {
    assert.equal(redirectUriMatches('http://[::1]/cb', 'http://[::1]:51234/cb'), true);
    assert.equal(redirectUriMatches('http://[::1]:8080/cb?a=b', 'http://[::1]:9/cb?a=b'), true);
  });

  test('on loopback only the port may differ: path, query, host, scheme and user info must match', () => {
    const registered = 'http://127.0.0.1:8080/cb';
    for (const requested of [
      'http://127.0.0.1:9090/other',
      'http://127.0.0.1:9090/cb?x=1',
      'http://[::1]:9090/cb',
      'http://localhost:9090/cb',
      'https://127.0.0.1:9090/cb',
      'http://evil@127.0.0.1:9090/cb',
      'http://127.0.0.1:9090/x/../cb', // normalises to /cb, but is not the registered URL to the letter
      'http://127.0.0.1:80/cb', // the default port spelled out is not the URL the client would be sent to
      'not a url',
    ]) {
      assert.equal(redirectUriMatches(registered, requested), false, requested);
    }
  });

  test('https on a loopback address gets no port exception', () => {
    assert.equal(redirectUriMatches('https://127.0.0.1:8443/cb', 'https://127.0.0.1:9443/cb'), false);
  });

  test('localhost joins the any-port rule (RFC 8252 §7.3; Claude Code and VS Code register it)', () => {
    assert.equal(redirectUriMatches('http://localhost:8080/cb', 'http://localhost:8080/cb'), true);
    assert.equal(redirectUriMatches('http://localhost:8080/cb', 'http://localhost:9090/cb'), true);
    assert.equal(redirectUriMatches('http://localhost/cb', 'http://localhost:9090/cb'), true);
    for (const requested of ['http://localhost:9090/other', 'http://127.0.0.1:9090/cb', 'https://localhost:9090/cb', 'http://localhost.evil.example:9090/cb']) {
      assert.equal(redirectUriMatches('http://localhost/cb', requested), false, requested);
    }
  });
});

describe('originOf', () => {
  test('gives scheme, host and port only', () => {
    assert.equal(originOf('https://app.example:8443/cb?x=1'), 'https://app.example:8443');
    assert.equal(originOf('http://[::1]:5000/cb'), 'http://[::1]:5000');
  });
});

describe('consentOrigin (what an approval for a client no administrator checked is remembered for)', () => {
  test('a remote redirect URL: its origin, port included', () => {
    assert.equal(consentOrigin('https://app.example/cb?x=1'), 'https://app.example');
    assert.equal(consentOrigin('https://app.example:8443/cb'), 'https://app.example:8443');
  });

  test('a loopback redirect URL: scheme and host, whatever the port (RFC 8252 §7.3)', () => {
    assert.equal(consentOrigin('http://127.0.0.1:51004/callback'), 'http://127.0.0.1');
    assert.equal(consentOrigin('http://127.0.0.1/callback'), 'http://127.0.0.1');
    assert.equal(consentOrigin('http://[::1]:8080/cb'), 'http://[::1]');
    assert.notEqual(consentOrigin('http://localhost:1/cb'), consentOrigin('https://localhost.evil.example/cb'));
  });
});

describe('redirectDestinations (every place a client may send the person)', () => {
  test('loopback URLs are this computer; other hosts once each, in order', () => {
    assert.deepEqual(
      redirectDestinations(['http://127.0.0.1/cb', 'https://b.example/1', 'http://localhost/cb', 'https://a.example/x', 'https://b.example/2']),
      {
        thisComputer: true,
        hosts: ['b.example', 'a.example'],
      },
    );
    assert.deepEqual(redirectDestinations(['https://a.example:8443/cb']), { thisComputer: false, hosts: ['a.example:8443'] });
  });
});
