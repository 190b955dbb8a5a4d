/**
 * The pure parts of client ID metadata documents (SPEC §4.8): which client IDs are document
 * URLs, which addresses count as public, the host allow-list, document validation and cache
 * lifetimes. No network; the fetch itself is test/security/client-metadata-fetch.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { hostAllowed, isMetadataDocumentUrl, metadataUrlProblem, validateMetadataDocument } from '../../src/oauth/client-metadata.ts';
import { cacheLifetimeSeconds } from '../../src/protocol/safe-fetch.ts';
import { nonPublicRange } from '../../src/protocol/safe-fetch.ts';
import { ConfigError, loadConfig } from '../../src/config.ts';

describe('metadata document URLs', () => {
  test('https URLs with a path are document URLs', () => {
    for (const url of [
      'https://app.example/client.json',
      'https://app.example/oauth/client-metadata.json',
      'https://app.example:8443/c?v=1',
      'https://203.0.114.9/c',
    ]) {
      assert.equal(metadataUrlProblem(url), null, url);
      assert.ok(isMetadataDocumentUrl(url), url);
    }
  });

  test('everything else is not', () => {
    const refused: Record<string, RegExp> = {
      '3f8e0c52-9a9d-4d55-9a0e-0d1a36d0c7c5': /not a URL/,
      'http://app.example/client.json': /not an https URL/,
      'ftp://app.example/client.json': /not an https URL/,
      'https://app.example/': /no path/,
      'https://app.example': /no path/,
      'https://app.example/client.json#x': /fragment/,
      'https://app.example/client.json#': /fragment/,
      'https://user:pw@app.example/client.json': /user name or password/,
      'https://app.example/a/../client.json': /canonical/,
      'https://App.Example/client.json': /canonical/,
      'https://app.example:443/client.json': /canonical/,
      // A trailing dot names the same host to DNS but another string to every comparison (a block, a consent).
      'https://app.example./client.json': /ending in a dot/,
      'https://app.example.:443/client.json': /ending in a dot/,
      [`https://app.example/${'a'.repeat(2000)}`]: /too long/,
    };
    for (const [url, reason] of Object.entries(refused)) {
      assert.match(metadataUrlProblem(url) ?? 'accepted', reason, url);
      assert.equal(isMetadataDocumentUrl(url), false, url);
    }
  });
});

describe('public addresses', () => {
  test('every non-public range is refused, IPv4-mapped forms included', () => {
    const refused: Record<string, string> = {
      '127.0.0.1': 'loopback',
      '127.255.0.9': 'loopback',
      '::1': 'loopback',
      '10.1.2.3': 'private',
      '172.16.0.1': 'private',
      '172.31.255.254': 'private',
      '192.168.1.1': 'private',
      'fc00::1': 'uniqueLocal',
      'fd12:3456::1': 'uniqueLocal',
      '169.254.169.254': 'linkLocal', // cloud metadata endpoints
      'fe80::1': 'linkLocal',
      '100.64.0.1': 'carrierGradeNat',
      '100.127.255.254': 'carrierGradeNat',
      '0.0.0.0': 'unspecified',
      '0.1.2.3': 'unspecified',
      '::': 'unspecified',
      '224.0.0.1': 'multicast',
      'ff02::1': 'multicast',
      '255.255.255.255': 'broadcast',
      '192.0.2.1': 'reserved', // documentation (TEST-NET-1/2/3)
      '198.51.100.1': 'reserved',
      '203.0.113.1': 'reserved',
      '2001:db8::1': 'reserved',
      '198.18.0.1': 'reserved', // benchmarking
      '240.0.0.1': 'reserved',
      '192.0.0.1': 'reserved',
      '::ffff:127.0.0.1': 'loopback',
      '::ffff:10.0.0.1': 'private',
      '::ffff:169.254.169.254': 'linkLocal',
      '::ffff:7f00:1': 'loopback',
      '64:ff9b::a00:1': 'rfc6052', // NAT64 of 10.0.0.1
      '2002:a00:1::1': '6to4',
      '2001::1': 'teredo',
      '::127.0.0.1': 'loopback', // the deprecated IPv4-compatible form, written either way
      '::7f00:1': 'not global unicast',
      '::a00:1': 'not global unicast',
      '100::1': 'discard',
    };
    for (const [address, range] of Object.entries(refused)) assert.equal(nonPublicRange(address), range, address);
  });

  test('public addresses are accepted', () => {
    for (const address of [
      '93.184.215.14',
      '8.8.8.8',
      '1.1.1.1',
      '172.32.0.1',
      '100.128.0.1',
      '2606:4700:4700::1111',
      '2a00:1450:4001:80b::200e',
      '::ffff:8.8.8.8',
    ]) {
      assert.equal(nonPublicRange(address), null, address);
    }
  });

  test('something that is not an address is not public', () => {
    assert.equal(nonPublicRange('localhost'), 'not an IP address');
  });
});

describe('host allow-list', () => {
  test('an empty list admits any host', () => {
    assert.ok(hostAllowed('anything.example', []));
  });

  test('a plain entry matches that host only', () => {
    assert.ok(hostAllowed('example.com', ['example.com']));
    assert.ok(hostAllowed('Example.COM.', ['example.com']));
    assert.ok(!hostAllowed('app.example.com', ['example.com']));
    assert.ok(!hostAllowed('badexample.com', ['example.com']));
  });

  test('*.example.com matches subdomains, not example.com itself', () => {
    const list = ['*.example.com'];
    assert.ok(hostAllowed('app.example.com', list));
    assert.ok(hostAllowed('a.b.example.com', list));
    assert.ok(!hostAllowed('example.com', list));
    assert.ok(!hostAllowed('badexample.com', list));
    assert.ok(!hostAllowed('example.com.evil.test', list));
  });

  test('any entry of several', () => {
    assert.ok(hostAllowed('claude.ai', ['*.example.com', 'claude.ai']));
    assert.ok(!hostAllowed('chatgpt.com', ['*.example.com', 'claude.ai']));
  });
});

describe('document validation', () => {
  const url = 'https://app.example/client.json';
  const valid = {
    client_id: url,
    client_name: 'Example App',
    redirect_uris: ['https://app.example/callback', 'http://127.0.0.1/callback', 'http://localhost:33418/cb'],
    client_uri: 'https://app.example/',
    logo_uri: 'https://app.example/logo.png',
    grant_types: ['authorization_code', 'refresh_token', 'urn:ietf:params:oauth:grant-type:device_code'],
    response_types: ['code'],
    token_endpoint_auth_method: 'none',
    scope: 'annotation:read mcp:tools',
    post_logout_redirect_uris: ['https://app.example/logged-out'],
    backchannel_logout_uri: 'https://app.example/backchannel-logout',
    id_token_signed_response_alg: 'ES256',
    dpop_bound_access_tokens: true,
    require_pushed_authorization_requests: true,
    software_id: 'ignored',
  };
  const validate = (document: unknown) => validateMetadataDocument(url, typeof document === 'string' ? document : JSON.stringify(document));

  test('a complete document describes the client', () => {
    assert.deepEqual(validate(valid), {
      ok: true,
      client: {
        id: url,
        name: 'Example App',
        redirectUris: valid.redirect_uris,
        clientUri: 'https://app.example/',
        logoUri: 'https://app.example/logo.png',
        scope: 'annotation:read mcp:tools',
        postLogoutRedirectUris: ['https://app.example/logged-out'],
        backchannelLogoutUri: 'https://app.example/backchannel-logout',
        idTokenAlg: 'ES256',
        jwks: null,
        jwksUri: null,
        requireDpop: true,
        requirePar: true,
      },
    });
  });

  test('the optional fields may be absent', () => {
    const result = validate({ client_id: url, client_name: ' Minimal ', redirect_uris: ['https://app.example/cb'] });
    assert.deepEqual(result, {
      ok: true,
      client: {
        id: url,
        name: 'Minimal',
        redirectUris: ['https://app.example/cb'],
        clientUri: null,
        logoUri: null,
        scope: null,
        postLogoutRedirectUris: [],
        backchannelLogoutUri: null,
        idTokenAlg: 'RS256',
        jwks: null,
        jwksUri: null,
        requireDpop: false,
        requirePar: false,
      },
    });
  });

  test('each refusal names what is wrong, without quoting the document', () => {
    const refusals: [unknown, RegExp][] = [
      ['{"client_id":', /is not JSON/],
      ['<html>hello</html>', /is not JSON/],
      [[valid], /not a JSON object/],
      ['null', /not a JSON object/],
      ['"https://app.example/client.json"', /not a JSON object/],
      [{ ...valid, client_id: 'https://app.example/other.json' }, /client_id other than its own URL/],
      [{ ...valid, client_id: `${url}/` }, /client_id other than its own URL/],
      [{ ...valid, client_id: undefined }, /client_id other than its own URL/],
      [{ ...valid, client_name: undefined }, /client_name/],
      [{ ...valid, client_name: '   ' }, /client_name/],
      [{ ...valid, client_name: 42 }, /client_name/],
      [{ ...valid, client_name: 'x'.repeat(101) }, /client_name/],
      [{ ...valid, client_name: 'bell\u0007' }, /client_name/],
      [{ ...valid, redirect_uris: undefined }, /no redirect_uris/],
      [{ ...valid, redirect_uris: [] }, /no redirect_uris/],
      [{ ...valid, redirect_uris: 'https://app.example/cb' }, /no redirect_uris/],
      [{ ...valid, redirect_uris: ['https://app.example/cb', 7] }, /no redirect_uris/],
      [{ ...valid, redirect_uris: ['https://app.example/cb', 'http://app.example/cb'] }, /redirect_uris\[1\].*https/],
      [{ ...valid, redirect_uris: ['https://app.example/cb#frag'] }, /redirect_uris\[0\].*fragment/],
      [{ ...valid, redirect_uris: ['/relative'] }, /redirect_uris\[0\].*absolute/],
      [{ ...valid, client_uri: 'javascript:alert(1)' }, /client_uri is not an https URL/],
      [{ ...valid, logo_uri: 'http://app.example/logo.png' }, /logo_uri is not an https URL/],
      [{ ...valid, dpop_bound_access_tokens: 'yes' }, /dpop_bound_access_tokens must be true or false/],
      [{ ...valid, require_pushed_authorization_requests: 1 }, /require_pushed_authorization_requests must be true or false/],
      [{ ...valid, grant_types: 'authorization_code' }, /grant_types/],
      [{ ...valid, response_types: [1] }, /response_types/],
      [{ ...valid, token_endpoint_auth_method: 'client_secret_basic' }, /token_endpoint_auth_method/],
      [{ ...valid, token_endpoint_auth_method: 'private_key_jwt' }, /private_key_jwt without jwks or jwks_uri/],
      [{ ...valid, token_endpoint_auth_method: 'client_secret_post' }, /token_endpoint_auth_method/],
      [{ ...valid, token_endpoint_auth_method: 'private_key_jwt', jwks_uri: 'http://app.example/jwks' }, /jwks_uri that is not an https URL/],
      [{ ...valid, token_endpoint_auth_method: 'private_key_jwt', jwks: { keys: [{ kty: 'oct', k: 'c2VjcmV0' }] } }, /jwks that .*private member "k"/],
      [{ ...valid, token_endpoint_auth_method: 'private_key_jwt', jwks: { keys: [] }, jwks_uri: 'https://app.example/jwks' }, /both jwks and jwks_uri/],
      [{ ...valid, client_secret: 's3cret' }, /client_secret/],
      [{ ...valid, scope: ['annotation:read'] }, /scope/],
      [{ ...valid, scope: 'two  spaces' }, /scope/],
      [{ ...valid, post_logout_redirect_uris: 'https://app.example/logged-out' }, /post_logout_redirect_uris/],
      [{ ...valid, post_logout_redirect_uris: ['https://app.example/bye#alert'] }, /post_logout_redirect_uris\[0\].*fragment/],
      [{ ...valid, post_logout_redirect_uris: ['https://app.example/bye', 'http://app.example/bye'] }, /post_logout_redirect_uris\[1\].*https/],
      [{ ...valid, backchannel_logout_uri: 'http://app.example/backchannel' }, /backchannel_logout_uri is not an https URL/],
      [{ ...valid, backchannel_logout_uri: ['https://app.example/backchannel'] }, /backchannel_logout_uri is not an https URL/],
      [{ ...valid, backchannel_logout_uri: 'https://app.example/backchannel#alert' }, /backchannel_logout_uri with a fragment/],
      [{ ...valid, id_token_signed_response_alg: 'none' }, /id_token_signed_response_alg/],
      [{ ...valid, id_token_signed_response_alg: 'HS256' }, /id_token_signed_response_alg/],
    ];
    for (const [document, reason] of refusals) {
      const result = validate(document);
      assert.equal(result.ok, false, JSON.stringify(document));
      if (result.ok) continue;
      assert.match(result.reason, reason, JSON.stringify(document));
      assert.doesNotMatch(result.reason, /hello|s3cret|alert|other\.json/, 'the reason never quotes the document');
    }
  });
});

describe('cache lifetime', () => {
  test('max-age, bounded to between 5 minutes and 24 hours; 1 hour without one', () => {
    assert.equal(cacheLifetimeSeconds(undefined), 3600);
    assert.equal(cacheLifetimeSeconds('public'), 3600);
    assert.equal(cacheLifetimeSeconds('max-age=1200'), 1200);
    assert.equal(cacheLifetimeSeconds('public, Max-Age=7200, must-revalidate'), 7200);
    assert.equal(cacheLifetimeSeconds('max-age="900"'), 900);
    assert.equal(cacheLifetimeSeconds('max-age=0'), 300);
    assert.equal(cacheLifetimeSeconds('max-age=60'), 300);
    assert.equal(cacheLifetimeSeconds('max-age=300'), 300);
    assert.equal(cacheLifetimeSeconds('max-age=86400'), 86_400);
    assert.equal(cacheLifetimeSeconds('max-age=31536000'), 86_400);
    assert.equal(cacheLifetimeSeconds('max-age=99999999999999999999999'), 86_400);
    assert.equal(cacheLifetimeSeconds('no-store'), 300);
    assert.equal(cacheLifetimeSeconds('no-cache, max-age=7200'), 300);
    assert.equal(cacheLifetimeSeconds('max-age=-5'), 3600); // not a valid max-age: as if there were none
  });
});

describe('settings', () => {
  test('defaults: documents accepted from any public host', () => {
    assert.deepEqual(loadConfig({}).clientMetadata, { enabled: true, allowedHosts: [], allowPrivateAddresses: false });
  });

  test('values are read and typed', () => {
    const config = loadConfig({
      CLIENT_METADATA_DOCUMENTS: 'false',
      CLIENT_METADATA_ALLOWED_HOSTS: ' Claude.ai, *.example.com ,',
      CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES: 'true',
    });
    assert.deepEqual(config.clientMetadata, { enabled: false, allowedHosts: ['claude.ai', '*.example.com'], allowPrivateAddresses: true });
    assert.ok(Object.isFrozen(config.clientMetadata) && Object.isFrozen(config.clientMetadata.allowedHosts));
  });

  test('an invalid value stops start-up naming the setting', () => {
    const refused: Record<string, string>[] = [
      { CLIENT_METADATA_DOCUMENTS: 'maybe' },
      { CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES: '2' },
      { CLIENT_METADATA_ALLOWED_HOSTS: 'https://claude.ai' },
      { CLIENT_METADATA_ALLOWED_HOSTS: 'claude.ai, *' },
      { CLIENT_METADATA_ALLOWED_HOSTS: 'a.*.example.com' },
      { CLIENT_METADATA_ALLOWED_HOSTS: 'app.example.com:443' },
    ];
    for (const env of refused) {
      const [setting] = Object.keys(env);
      assert.throws(
        () => loadConfig(env),
        (error: unknown) => error instanceof ConfigError && error.message.includes(setting!),
        JSON.stringify(env),
      );
    }
  });
});
