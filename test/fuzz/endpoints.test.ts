/**
 * Property-based fuzzing (SPEC §5) of the endpoints that take input from anyone: the
 * authorization endpoint and its consent form, the token, PAR, revocation and introspection
 * endpoints (with hostile DPoP proofs too), userinfo, RP-initiated logout, the login form, passkey logins, the second step
 * of a login and the security forms, and the admin forms. Requests are random, oversized, repeated,
 * not UTF-8, holding NUL (in every field: PostgreSQL's text cannot), injection-shaped, sent
 * with the wrong method or content type — and built so that none of them is a request that
 * should succeed. Each must get a documented answer (a 4xx, or the redirect or `200` the
 * RFCs prescribe for that case), never a 5xx; HTML must not echo markup; redirects must stay
 * on Gatehouse or go to the registered URL; and no table may change, except the audit trail
 * recording failed logins.
 *
 * Seeded: the seed is printed; `FUZZ_SEED=<n> npm test` replays the same requests.
 * Requests go through `app.inject()`: the whole Fastify stack, without sockets.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as fc from 'fast-check';
import { SignJWT, UnsecuredJWT, exportJWK, generateKeyPair } from 'jose';
import { sql } from 'kysely';
import type { InjectOptions, LightMyRequestResponse } from 'fastify';
import { AUTHORIZATION_PARAMETERS } from '../../src/oauth/authorize.ts';
import { CLIENT_GRANT_TYPES } from '../../src/oauth/grants/types.ts';
import { IDENTITY_SCOPE_NAMES } from '../../src/oauth/scopes.ts';
import { COMMAND_LINE } from '../../src/audit.ts';
import { createIssuer } from '../../src/oauth/assertions/issuers.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { openIdLogin } from '../support/backchannel.ts';
import { jwksOf, signingKey } from '../support/jwks-server.ts';
import { discover } from '../support/oauth-client.ts';
import { setUpApp } from '../support/second-factors.ts';
import { startServer, type TestServer } from '../support/server.ts';
import { UserAgent } from '../support/user-agent.ts';

const SEED = process.env.FUZZ_SEED ? Number(process.env.FUZZ_SEED) : Math.floor(Math.random() * 2 ** 31);
console.log(`fuzz seed: ${SEED} (replay with FUZZ_SEED=${SEED})`);

const TABLES = [
  'users',
  'clients',
  'sessions',
  'grants',
  'auth_codes',
  'access_tokens',
  'refresh_tokens',
  'consents',
  'setup_tokens',
  'groups',
  'group_members',
  'backchannel_logouts',
  'consumed_assertions',
  'passkeys',
  'authenticator_apps',
  'recovery_codes',
  'pending_logins',
  'trusted_issuers',
  'client_grant_secrets',
  'signing_keys',
  'pushed_requests',
];
const SCOPES = ['annotation:read', 'annotation:write'];
const REDIRECT_URI = 'http://127.0.0.1:8765/callback';

/** What an attacker types: SQL, markup, template syntax, traversal, header splitting, prototype keys. */
const INJECTIONS = [
  "' OR '1'='1' --",
  '"; DROP TABLE users; --',
  '1; select pg_sleep(5)',
  '<script>alert(1)</script>',
  '"><img src=x onerror=alert(1)>',
  'javascript:alert(document.cookie)',
  '{{7*7}}',
  '<%= it.constructor %>',
  '${process.exit(1)}',
  '../../../../etc/passwd',
  '\r\nSet-Cookie: gatehouse_session=x',
  '\u0000',
  '__proto__',
  'constructor',
  'toString',
  '//evil.example/',
  'http://evil.example/callback',
  'gat_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA',
  'grt_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA',
  'gac_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA',
  'gcs_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA',
  '00000000-0000-0000-0000-000000000000',
];

/** The token types a token exchange names (RFC 8693 §3; the ID-JAG draft). */
const EXCHANGED_TYPES = [
  'urn:ietf:params:oauth:token-type:access_token',
  'urn:ietf:params:oauth:token-type:id_token',
  'urn:ietf:params:oauth:token-type:id-jag',
  'urn:ietf:params:oauth:token-type:refresh_token',
];

interface World {
  server: TestServer;
  /** A key pair a DPoP proof might name, both halves as JWKs. */
  dpopKey: { publicJwk: object; privateJwk: object };
  publicClient: string;
  confidentialClient: string;
  resourceBasic: string;
  adminUser: string;
  /** A jwt-bearer (publisher) client, and the URL of a trusted ID-JAG issuer: what an assertion's `iss` may name. */
  publisherClient: string;
  trustedIssuer: string;
  /** A real ID token, of bob's: a logout hint naming someone other than whoever is logged in. */
  bobsIdToken: string;
  /** bob's access token of the same login: issued to the public client, so no other client may exchange it. */
  bobsAccessToken: string;
  /** A confidential client allowed token exchange and ID-JAGs for `https://as.fuzz.example`, as its Basic credentials. */
  agentBasic: string;
  /** A private_key_jwt client (inline JWKS), and client assertions for it that must all be refused: signed by another key, unsigned, HS256. */
  keyedClient: string;
  forgedAssertions: string[];
  /** Cookies and CSRF tokens of an anonymous visitor, alice (logged in), and an administrator. */
  anonymous: { cookie: string; csrf: string };
  alice: { cookie: string; csrf: string };
  admin: { cookie: string; csrf: string };
  /** carol, who has an authenticator app, at the second step of a login (a pending login's cookie). */
  carol: { cookie: string; csrf: string };
  /** A visitor of the login page who asked for a passkey challenge: its cookies (the WebAuthn binding too), and the challenge. */
  passkey: { cookie: string; csrf: string; challenge: string };
}

const base64url = (text: string) => Buffer.from(text).toString('base64url');

/**
 * What a browser's WebAuthn library might post as `response`: anything, or JSON shaped like
 * a credential whose parts are fuzzed — with client data naming a real challenge of this
 * visitor's, or another; none is signed by any credential Gatehouse knows. Half of the
 * credentials have every member, so that their fuzzed values (NUL included) get past the
 * shape checks to the lookups; the other half, any of them.
 */
function webauthnResponses(world: World, value: fc.Arbitrary<string>): fc.Arbitrary<string> {
  const encoded = fc.oneof(value, value.map(base64url));
  const credential = (complete: boolean) => {
    const members = complete ? {} : { requiredKeys: [] };
    const clientData = fc
      .record(
        {
          type: fc.constantFrom('webauthn.get', 'webauthn.create', 'x'),
          challenge: fc.oneof(fc.constant(world.passkey.challenge), value),
          origin: fc.constantFrom(world.server.url, 'http://evil.example', ''),
          crossOrigin: fc.boolean(),
        },
        members,
      )
      .map((data) => base64url(JSON.stringify(data)));
    return fc
      .record(
        {
          id: encoded,
          rawId: encoded,
          type: fc.constantFrom('public-key', 'password', ''),
          response: fc.record(
            {
              clientDataJSON: complete ? clientData : fc.oneof(clientData, encoded),
              authenticatorData: encoded,
              signature: encoded,
              userHandle: encoded,
              attestationObject: encoded,
              transports: fc.array(value, { maxLength: 3 }),
            },
            members,
          ),
          clientExtensionResults: fc.constant({}),
          authenticatorAttachment: fc.constantFrom('platform', 'cross-platform'),
        },
        members,
      )
      .map((c) => JSON.stringify(c));
  };
  return fc.oneof({ weight: 1, arbitrary: value }, { weight: 2, arbitrary: credential(true) }, { weight: 2, arbitrary: credential(false) });
}

/**
 * A value a parameter might carry: random text of any kind, near-valid values, attacks, and
 * huge ones — any of them with a NUL put in somewhere. PostgreSQL's text refuses NUL, so a
 * NUL that reached a query anywhere would be a 500 there (SQLite stores it): every field,
 * the JSON and JWT claims built from these values included, must refuse it first.
 */
function values(world: World): fc.Arbitrary<string> {
  const plain = fc.oneof(
    { weight: 3, arbitrary: fc.string({ maxLength: 40 }) },
    { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength: 40 }) },
    { weight: 3, arbitrary: fc.constantFrom(...INJECTIONS) },
    {
      weight: 3,
      arbitrary: fc.constantFrom(
        world.publicClient,
        world.confidentialClient,
        REDIRECT_URI,
        'code',
        'token',
        'S256',
        'plain',
        'authorization_code',
        'refresh_token',
        'client_credentials',
        'password',
        'none',
        'login consent',
        'web_message',
        'query',
        'form_post',
        'openid',
        'openid profile email groups offline_access',
        '0',
        '-1',
        '1.5',
        'n'.repeat(513),
        // Shaped like an ID token, signed by nobody Gatehouse knows.
        'eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCIsImtpZCI6IngifQ.eyJzdWIiOiJhY2N0OmFsaWNlQDEyNy4wLjAuMSJ9.c2lnbmF0dXJl',
        // A real ID token, whole, cut short, with its signature altered, or made huge.
        world.bobsIdToken,
        world.bobsIdToken.slice(0, -10),
        world.keyedClient,
        ...world.forgedAssertions,
        'urn:ietf:params:oauth:client-assertion-type:jwt-bearer',
        `${world.bobsIdToken.slice(0, -4)}AAAA`,
        `${world.bobsIdToken}${'A'.repeat(9000)}`,
        ...SCOPES,
        SCOPES.join(' '),
        'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM',
        'dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk',
        '',
      ),
    },
    { weight: 1, arbitrary: fc.integer({ min: 1000, max: 12_000 }).map((n) => 'A'.repeat(n)) },
  );
  const withNul = fc.tuple(plain, fc.nat()).map(([v, at]) => `${v.slice(0, at % (v.length + 1))}\u0000${v.slice(at % (v.length + 1))}`);
  return fc.oneof({ weight: 2, arbitrary: plain }, { weight: 1, arbitrary: withNul });
}

/** Percent-encodes every byte of the UTF-8 encoding (lone surrogates become U+FFFD). */
const encode = (text: string) =>
  Buffer.from(text, 'utf8')
    .toString('hex')
    .replace(/../g, (byte) => `%${byte}`);

/** An assertion-like value: a compact JWS of random header and claims (or not quite one), its `iss` one the server knows or not. */
function assertion(world: World, value: fc.Arbitrary<string>): fc.Arbitrary<string> {
  const b64 = (json: unknown) => Buffer.from(JSON.stringify(json)).toString('base64url');
  const claimValue = fc.oneof(value, fc.integer(), fc.double(), fc.constant(null), fc.array(value, { maxLength: 3 }), fc.constant({}));
  const iss = fc.oneof(fc.constantFrom(world.publisherClient, world.trustedIssuer), value, fc.integer());
  const now = Math.floor(Date.now() / 1000);
  const claims = fc.record(
    {
      iss,
      sub: fc.oneof(fc.constantFrom('acct:alice@127.0.0.1', 'alice', 'acct:alice\u0000@127.0.0.1'), claimValue),
      aud: fc.oneof(fc.constant(world.server.url), fc.constant('127.0.0.1'), claimValue),
      exp: fc.oneof(fc.constant(now + 60), fc.integer({ min: -1e12, max: 1e12 }), claimValue),
      nbf: fc.oneof(fc.constant(now), claimValue),
      iat: fc.oneof(fc.constant(now), claimValue),
      jti: claimValue,
      client_id: fc.oneof(fc.constant(world.confidentialClient), claimValue),
      email: claimValue,
      scope: claimValue,
      resource: claimValue,
    },
    { requiredKeys: [] },
  );
  const header = fc.record(
    {
      alg: fc.oneof(fc.constantFrom('HS256', 'none', 'RS256', 'ES256', 'PS256', 'EdDSA', 'HS512'), claimValue),
      typ: fc.oneof(fc.constant('oauth-id-jag+jwt'), claimValue),
      kid: claimValue,
    },
    { requiredKeys: [] },
  );
  const signature = fc.oneof(
    fc.constant(''),
    fc.base64String({ maxLength: 64 }).map((v) => v.replace(/[+/=]/g, 'A')),
    value,
  );
  return fc.oneof(
    { weight: 6, arbitrary: fc.tuple(header, claims, signature).map(([h, c, sig]) => `${b64(h)}.${b64(c)}.${sig}`) },
    { weight: 1, arbitrary: fc.tuple(value, value, value).map((parts) => parts.join('.')) },
    { weight: 1, arbitrary: value },
  );
}

/** A `DPoP` header value: anything, or a JWT-shaped proof with a hostile header or claims and a signature nobody made. */
function dpopProof(world: World, value: fc.Arbitrary<string>): fc.Arbitrary<string> {
  const b64 = (json: unknown) => Buffer.from(typeof json === 'string' ? json : JSON.stringify(json)).toString('base64url');
  const jwk = fc.oneof(
    fc.constant(world.dpopKey.publicJwk),
    fc.constant(world.dpopKey.privateJwk),
    fc.constant({ kty: 'oct', k: 'c2VjcmV0' }),
    fc.constant({}),
    value,
  );
  const header = fc.record(
    { typ: fc.oneof(fc.constant('dpop+jwt'), value), alg: fc.constantFrom('ES256', 'RS256', 'PS256', 'EdDSA', 'HS256', 'none', 'x'), jwk },
    { requiredKeys: [] },
  );
  const claims = fc.record(
    {
      htm: fc.oneof(fc.constantFrom('POST', 'GET'), value),
      htu: fc.oneof(fc.constantFrom(`${world.server.url}/api/token`, `${world.server.url}/oauth/par`, `${world.server.url}/api/profile`), value),
      iat: fc.oneof(fc.constant(Math.floor(Date.now() / 1000)), fc.integer(), value),
      jti: fc.oneof(fc.uuid(), value),
      ath: value,
      nonce: value,
    },
    { requiredKeys: [] },
  );
  const signature = fc.oneof(
    fc.constant(''),
    fc.uint8Array({ maxLength: 64 }).map((bytes) => Buffer.from(bytes).toString('base64url')),
    value,
  );
  const shaped = fc.tuple(header, claims, signature).map(([h, c, s]) => `${b64(h)}.${b64(c)}.${s}`);
  // A header value holds no line breaks or other control characters: what a client could send.
  return fc.oneof(shaped, value).map((v) => v.replace(/[\x00-\x1f\x7f-\uffff]/g, '') || '.');
}

/**
 * Name/value pairs as a form: encoded, or with bytes that are not UTF-8, or raw — as typed,
 * except for the characters that would change what the form says (`&`, `=` in a name, `+`,
 * `%`): the server reads the values generated, so that what a case guarantees of them (never
 * a valid name, never six digits, …) holds; malformed percent-encoding comes in a pair of its own. Seed 1592212297 sent the group name `x &… x` raw:
 * the server read `x `, a valid name once trimmed, and created the group.
 */
function form(pairs: Array<[string, string]>, style: 'encoded' | 'not-utf8' | 'raw'): string {
  const raw = (text: string, special: RegExp) => text.replace(special, (c) => encodeURIComponent(c));
  return pairs
    .map(([name, value]) => {
      if (style === 'raw') return `${raw(name, /[&=+%]/g)}=${raw(value, /[&+%]/g)}&%zz=%e2%8`;
      const encoded = `${encode(name)}=${encode(value)}`;
      return style === 'not-utf8' ? `${encoded}%ff%fe%c3%28` : encoded;
    })
    .join('&');
}

/** Parameters for an endpoint: its own names (repeated, missing, extra) with values from `value`, filtered by `allowed`. */
function params(names: readonly string[], value: fc.Arbitrary<string>): fc.Arbitrary<Array<[string, string]>> {
  const name = fc.oneof(
    { weight: 6, arbitrary: fc.constantFrom(...names) },
    { weight: 1, arbitrary: fc.constantFrom(...INJECTIONS.slice(12, 15), '_csrf', 'x') },
    { weight: 1, arbitrary: fc.string({ maxLength: 10 }) },
  );
  return fc.array(fc.tuple(name, value), { maxLength: 12 });
}

type Body = { payload?: string | Buffer; contentType?: string };

/** A body for a POST: usually a form, else the wrong content type, nothing, or far too much. */
function body(pairs: fc.Arbitrary<Array<[string, string]>>): fc.Arbitrary<Body> {
  const style = fc.constantFrom('encoded', 'encoded', 'encoded', 'not-utf8', 'raw') as fc.Arbitrary<'encoded' | 'not-utf8' | 'raw'>;
  return fc.oneof(
    { weight: 8, arbitrary: fc.tuple(pairs, style).map(([p, s]) => ({ payload: form(p, s), contentType: 'application/x-www-form-urlencoded' })) },
    {
      weight: 2,
      arbitrary: fc
        .tuple(
          pairs,
          fc.constantFrom(
            'application/json',
            'text/plain',
            'multipart/form-data; boundary=x',
            'application/xml',
            'application/x-www-form-urlencoded; charset=utf-16',
            'application/x-www-form-urlencodedX',
          ),
        )
        .map(([p, type]) => ({
          payload: type === 'application/json' ? JSON.stringify(Object.fromEntries(p)) : form(p, 'encoded'),
          contentType: type,
        })),
    },
    {
      weight: 1,
      arbitrary: fc.uint8Array({ maxLength: 200 }).map((bytes) => ({ payload: Buffer.from(bytes), contentType: 'application/x-www-form-urlencoded' })),
    },
    { weight: 1, arbitrary: fc.constant({}) },
    { weight: 1, arbitrary: fc.constant({ payload: `a=${'A'.repeat(70 * 1024)}`, contentType: 'application/x-www-form-urlencoded' }) },
  );
}

const method = (right: 'GET' | 'POST') =>
  fc.oneof({ weight: 9, arbitrary: fc.constant(right) }, { weight: 1, arbitrary: fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH') });

interface Case {
  endpoint: string;
  request: InjectOptions;
  /** What may come back, besides a JSON or page error: a 200 the RFC prescribes, or a redirect. */
  allowed: readonly number[];
}

/** The forms are pages too: a GET of their URL shows the page (or, once logged in, moves on). */
const PAGES = new Set(['login', 'consent', 'admin', 'second-factor']);

function request(endpoint: string, m: string, url: string, b: Body, headers: Record<string, string>, allowed: readonly number[]): Case {
  const all = { ...headers, ...(b.contentType ? { 'content-type': b.contentType } : {}) };
  if (m === 'GET' && PAGES.has(endpoint)) allowed = [...allowed, 200, 302, 303];
  const payload = b.payload !== undefined && m !== 'GET' ? b.payload : undefined;
  return {
    endpoint,
    allowed,
    request: { method: m as InjectOptions['method'], url, headers: all, ...(payload === undefined ? {} : { payload }) },
    // How a failing case is reported: short enough to read, enough to replay by hand.
    [fc.toStringMethod]: () => `${m} ${url.slice(0, 300)} ${JSON.stringify(all).slice(0, 300)} ${String(payload ?? '').slice(0, 500)}`,
  } as Case;
}

const CLIENT_ERRORS = [400, 401, 403, 404, 405, 413, 414, 415, 429];

/** Every fuzzed endpoint, as a generator of requests that must all fail (or, where the RFC says so, succeed without effect). */
function cases(world: World): Array<{ name: string; runs: number; arbitrary: fc.Arbitrary<Case> }> {
  const value = values(world);
  // Every parameter the endpoint reads, and OpenID Connect's that it ignores (SPEC §4.10).
  const authorizeNames = [...AUTHORIZATION_PARAMETERS, 'claims', 'display', 'ui_locales', 'claims_locales', 'acr_values'];
  const who = fc.constantFrom(world.anonymous, world.alice);
  const guessedBasic = [
    fc.constant(undefined),
    value.map((v) => `Basic ${Buffer.from(v).toString('base64')}`),
    value.map((v) => `Basic ${v}`),
    fc
      .tuple(fc.constantFrom(world.publicClient, world.confidentialClient), value)
      .map(([id, secret]) => `Basic ${Buffer.from(`${id}:${secret}`).toString('base64')}`),
  ];
  const basic = fc.oneof(fc.constant(world.resourceBasic), ...guessedBasic);
  // At the token endpoint the resource server's real credentials would make a well-formed
  // client_credentials request succeed, which is not what this suite sends.
  const tokenBasic = fc.oneof(...guessedBasic);
  const authorization = (header: string | undefined): Record<string, string> => (header === undefined ? {} : { authorization: header });
  const csrfOf = (session: { csrf: string }) => fc.oneof({ weight: 4, arbitrary: fc.constant(session.csrf) }, { weight: 1, arbitrary: value });
  /** A form for a session: its CSRF token (usually right) plus fuzzed fields. */
  const sessionForm = (session: { csrf: string }, pairs: fc.Arbitrary<Array<[string, string]>>) =>
    fc.tuple(csrfOf(session), pairs).map(([csrf, p]): Array<[string, string]> => [['_csrf', csrf], ...p]);
  const notOneOf = (valid: readonly string[]) => value.filter((v) => !valid.includes(v));
  /** A passkey answer's fields: any, or one response (and maybe `next`), so that most responses get as far as their lookups. */
  const passkeyAnswer = fc.oneof(
    { weight: 1, arbitrary: params(['response', 'next'], fc.oneof(webauthnResponses(world, value), value)) },
    {
      weight: 3,
      arbitrary: fc
        .tuple(webauthnResponses(world, value), fc.array(fc.tuple(fc.constant('next'), value), { maxLength: 1 }))
        .map(([response, next]): Array<[string, string]> => [['response', response], ...next]),
    },
  );

  return [
    {
      // Alice is logged in but has approved nothing, and the clients are not trusted: no request can yield a code.
      name: 'GET /oauth/authorize',
      runs: 550,
      arbitrary: fc
        .tuple(method('GET'), params(authorizeNames, value), who)
        .map(([m, p, session]) => request('authorize', m, `/oauth/authorize?${form(p, 'encoded')}`, {}, { cookie: session.cookie }, [200, 302, 303])),
    },
    {
      // The consent form, never with decision=approve.
      name: 'POST /oauth/authorize',
      runs: 250,
      arbitrary: fc
        .tuple(
          method('POST'),
          body(
            sessionForm(
              world.alice,
              params([...authorizeNames, 'decision'], value).map((p) => p.filter(([n, v]) => !(n === 'decision' && v === 'approve'))),
            ),
          ),
        )
        // 200: a denial answered by a page (response_mode=form_post or web_message).
        .map(([m, b]) => request('consent', m, '/oauth/authorize', b, { cookie: world.alice.cookie }, [200, 302, 303])),
    },
    {
      name: 'POST /api/token',
      runs: 650,
      arbitrary: fc
        .tuple(
          method('POST'),
          body(
            params(
              [
                'grant_type',
                'code',
                'redirect_uri',
                'code_verifier',
                'client_id',
                'client_secret',
                'refresh_token',
                'scope',
                'client_assertion_type',
                'client_assertion',
              ],
              value,
            ),
          ),
          tokenBasic,
        )
        .map(([m, b, header]) => request('token', m, '/api/token', b, authorization(header), [])),
    },
    {
      // RFC 7523 assertions (SPEC §4.11): JWT-shaped or not, naming the publisher client, the
      // trusted issuer or anything else, any algorithm, any claims — none is validly signed, so
      // every one is refused, audited as refused, and consumes nothing.
      name: 'POST /api/token (jwt-bearer assertions)',
      runs: 400,
      arbitrary: fc
        .tuple(
          method('POST'),
          body(
            fc
              .tuple(params(['grant_type', 'assertion', 'scope', 'resource', 'client_id', 'client_secret'], value), assertion(world, value))
              .map(([p, a]): Array<[string, string]> => [['grant_type', 'urn:ietf:params:oauth:grant-type:jwt-bearer'], ['assertion', a], ...p]),
          ),
          tokenBasic,
        )
        .map(([m, b, header]) => request('token', m, '/api/token', b, authorization(header), [])),
    },
    {
      // RFC 8693 (SPEC §4.15): an agent allowed to exchange, with its real credentials, sends
      // anything as the subject and actor tokens, their types, the requested type and the
      // audience — bob's real tokens too, which are another client's: every exchange is refused
      // (delegation, ID-JAG or a connection's provider token, which no connection keeps here).
      name: 'POST /api/token (token exchange)',
      runs: 300,
      arbitrary: fc
        .tuple(
          method('POST'),
          body(
            fc
              .tuple(
                params(['scope', 'resource', 'actor_token_type', 'client_id'], value),
                fc.oneof(value, fc.constantFrom(world.bobsAccessToken, world.bobsIdToken)),
                fc.oneof(value, fc.constantFrom(...EXCHANGED_TYPES)),
                fc.oneof(value, fc.constantFrom(...EXCHANGED_TYPES)),
                fc.oneof(value, fc.constantFrom('https://as.fuzz.example', 'https://as.fuzz.example/', 'github', world.server.url)),
                fc.option(fc.oneof(value, fc.constant(world.bobsAccessToken)), { nil: undefined }),
              )
              .map(([p, subject, subjectType, requested, audience, actor]): Array<[string, string]> => [
                ['grant_type', 'urn:ietf:params:oauth:grant-type:token-exchange'],
                ['subject_token', subject],
                ['subject_token_type', subjectType],
                ['requested_token_type', requested],
                ['audience', audience],
                ...(actor === undefined ? [] : ([['actor_token', actor]] as Array<[string, string]>)),
                ...p,
              ]),
          ),
        )
        .map(([m, b]) => request('token', m, '/api/token', b, { authorization: world.agentBasic }, [])),
    },
    {
      // RFC 9449: hostile `DPoP` headers — not JWTs, JWT-shaped with any header and claims, a
      // private or symmetric key, `none`, several at once — at the token and PAR endpoints and
      // with `Authorization: DPoP` at the API and userinfo. None is validly signed: each is
      // `invalid_dpop_proof` or another documented refusal, consumes no `jti`, binds nothing,
      // and no pushed request is stored.
      name: 'hostile DPoP proofs at /api/token, /oauth/par, /api/profile and /oauth/userinfo',
      runs: 400,
      arbitrary: fc
        .tuple(
          fc.constantFrom('/api/token', '/oauth/par', '/api/profile', '/oauth/userinfo'),
          body(params([...authorizeNames, 'grant_type', 'code', 'code_verifier', 'refresh_token', 'client_secret'], value)),
          fc.array(dpopProof(world, value), { minLength: 1, maxLength: 3 }),
          value,
        )
        .map(([path, b, proofs, token]) => {
          const api = path === '/api/profile' || path === '/oauth/userinfo';
          const headers = { dpop: proofs.join(', '), ...(api ? { authorization: `DPoP ${token}` } : {}) };
          return request('dpop', api ? 'GET' : 'POST', path, api ? {} : b, headers, []);
        }),
    },
    {
      // RFC 7009 §2.2: an unknown token is answered 200, and nothing happens.
      name: 'POST /oauth/revoke',
      runs: 400,
      arbitrary: fc
        .tuple(
          method('POST'),
          body(params(['token', 'token_type_hint', 'client_id', 'client_secret', 'client_assertion_type', 'client_assertion'], value)),
          basic,
        )
        .map(([m, b, header]) => request('revoke', m, '/oauth/revoke', b, authorization(header), [200])),
    },
    {
      // RFC 7662 §2.2: an unknown token is {"active": false}.
      name: 'POST /oauth/introspect',
      runs: 400,
      arbitrary: fc
        .tuple(
          method('POST'),
          body(params(['token', 'token_type_hint', 'client_id', 'client_secret', 'client_assertion_type', 'client_assertion'], value)),
          basic,
        )
        .map(([m, b, header]) => request('introspect', m, '/oauth/introspect', b, authorization(header), [200])),
    },
    {
      // OIDC userinfo: no generated token is live, so every request is refused.
      name: 'GET and POST /oauth/userinfo',
      runs: 200,
      arbitrary: fc
        .tuple(
          method('GET'),
          body(params(['access_token'], value)),
          fc.oneof(
            fc.constant(undefined),
            value.map((v) => `Bearer ${v}`),
            value,
          ),
        )
        .map(([m, b, header]) => request('userinfo', m, '/oauth/userinfo', b, authorization(header), [])),
    },
    {
      // RP-initiated logout: no request carries alice's CSRF token or an ID token of hers, and
      // no client registered a URL to return to after logout, so every answer is a page, a
      // refusal, or (for an application's POST) the same request as a GET, and nobody is logged out.
      name: 'GET and POST /oauth/logout',
      runs: 400,
      arbitrary: fc
        .tuple(
          method('GET'),
          params(['id_token_hint', 'client_id', 'post_logout_redirect_uri', 'state', 'ui_locales'], value),
          fc.constantFrom('encoded', 'encoded', 'not-utf8', 'raw') as fc.Arbitrary<'encoded' | 'not-utf8' | 'raw'>,
          body(params(['id_token_hint', 'client_id', 'post_logout_redirect_uri', 'state', '_csrf'], value)),
          who,
        )
        .map(([m, p, style, b, session]) => request('logout', m, `/oauth/logout?${form(p, style)}`, b, { cookie: session.cookie }, [200, 303])),
    },
    {
      // No generated password is alice's: every login fails (and the throttle soon answers 429).
      name: 'POST /login',
      runs: 150,
      arbitrary: fc
        .tuple(method('POST'), body(sessionForm(world.anonymous, params(['username', 'password', 'next'], fc.oneof(value, fc.constant('alice'))))))
        .map(([m, b]) => request('login', m, '/login', b, { cookie: world.anonymous.cookie }, [])),
    },
    {
      // Passkey logins: options (a challenge for this browser, 200), then answers no credential
      // signed — as carol's second step too: she has no passkey, so none of them can be hers.
      name: 'POST /login/passkey, /login/second-factor/passkey and /login/passkey/options',
      runs: 500,
      arbitrary: fc.oneof(
        fc
          .tuple(fc.constantFrom(['/login/passkey', world.passkey] as const, ['/login/second-factor/passkey', world.carol] as const), method('POST'))
          .chain(([[path, session], m]) =>
            body(sessionForm(session, passkeyAnswer)).map((b) => request('passkey', m, path, b, { cookie: session.cookie }, [])),
          ),
        fc
          .tuple(method('POST'), body(sessionForm(world.passkey, params(['x'], value))), fc.constantFrom(world.passkey, world.anonymous))
          .map(([m, b, session]) => request('passkey', m, '/login/passkey/options', b, { cookie: session.cookie }, [200])),
      ),
    },
    {
      // Alice's /account/security: she has no passkey, and no generated response is a passkey;
      // renaming or removing one she does not have changes nothing (303 back to the page).
      name: '/account/security',
      runs: 250,
      arbitrary: fc.oneof(
        fc
          .tuple(method('POST'), body(sessionForm(world.alice, params(['response', 'name'], fc.oneof(webauthnResponses(world, value), value)))))
          .map(([m, b]) => request('security', m, '/account/security/passkeys', b, { cookie: world.alice.cookie }, [])),
        fc
          .tuple(
            fc.constantFrom('/account/security/passkeys/rename', '/account/security/passkeys/remove', '/account/security/passkeys/options'),
            method('POST'),
            body(sessionForm(world.alice, params(['id', 'name'], value))),
            who,
          )
          .map(([path, m, b, session]) => request('security', m, path, b, { cookie: session.cookie }, [200, 303])),
        fc
          .tuple(params(['x', 'next'], value), who)
          .map(([p, session]) => request('security', 'GET', `/account/security?${form(p, 'encoded')}`, {}, { cookie: session.cookie }, [200, 303])),
      ),
    },
    {
      // Codes for carol's second step that can never be right: never 6 digits (she has no recovery
      // codes); a set-up while she has an app; and alice's security forms, none of which can change
      // anything: no set-up to confirm, no app to remove, no factor to recover, a new set-up only
      // without the right CSRF token. (The throttle soon answers 429.)
      name: 'the second step and the security forms',
      runs: 300,
      arbitrary: fc.oneof(
        fc
          .tuple(
            fc.constantFrom('/login/second-factor', '/login/second-factor/set-up'),
            method('POST'),
            body(
              sessionForm(
                world.carol,
                params(
                  ['code', 'next'],
                  fc.oneof(value, fc.constantFrom('12345', '1234567', '１２３４５６', '123 45', 'abcde-23456', 'ABCDE23456', `${'1'.repeat(64)}x`)),
                ).map((p) => p.filter(([, v]) => !/^\d{6}$/.test(v.replace(/[\s-]/g, '')))),
              ),
            ),
            // A GET of the set-up page as alice would start a set-up: a page shown, not a failed request.
            fc.constantFrom(world.anonymous.cookie, world.carol.cookie),
          )
          .map(([path, m, b, cookie]) => request('second-factor', m, path, b, { cookie }, [200, 303])),
        fc
          .tuple(
            fc.constantFrom('/account/security/app/confirm', '/account/security/app/remove', '/account/security/recovery-codes'),
            method('POST'),
            body(sessionForm(world.alice, params(['code'], value))),
          )
          // 409: no factor to recover (the refusal's documented status).
          .map(([path, m, b]) => request('second-factor', m, path, b, { cookie: world.alice.cookie }, [200, 303, 409])),
        fc
          .tuple(
            method('POST'),
            body(params(['code'], value)),
            value.filter((v) => v !== world.alice.csrf),
          )
          .map(([m, b, csrf]) =>
            request(
              'second-factor',
              m,
              '/account/security/app',
              { ...b, payload: `_csrf=${encode(csrf)}&${String(b.payload ?? '')}` },
              { cookie: world.alice.cookie },
              [200, 303],
            ),
          ),
      ),
    },
    {
      // Registrations with a grant type that is never valid, edits whose scopes are never valid,
      // users whose names are never valid, and actions on ids that are not real or without the right CSRF token.
      name: 'the admin forms',
      runs: 400,
      arbitrary: fc.oneof(
        fc
          .tuple(
            method('POST'),
            body(
              sessionForm(
                world.admin,
                params(['name', 'grant_type', 'redirect_uri', 'client_type', 'trusted', 'require_pkce', 'scope'], value).chain((p) =>
                  notOneOf(CLIENT_GRANT_TYPES).map((g): Array<[string, string]> => [...p.filter(([n]) => n !== 'grant_type'), ['grant_type', g]]),
                ),
              ),
            ),
          )
          .map(([m, b]) => request('admin', m, '/admin/oauthclients', b, { cookie: world.admin.cookie }, [200, 303])),
        fc
          .tuple(
            method('POST'),
            body(
              sessionForm(
                world.admin,
                params(['name', 'redirect_uri', 'trusted', 'require_pkce', 'scope'], value).chain((p) =>
                  fc
                    .array(
                      value.filter((v) => !v.split(' ').every((s) => s === '' || [...SCOPES, ...IDENTITY_SCOPE_NAMES].includes(s))),
                      { maxLength: 3 },
                    )
                    .map((s): Array<[string, string]> => [...p.filter(([n]) => n !== 'scope'), ...s.map((v): [string, string] => ['scope', v])]),
                ),
              ),
            ),
          )
          .map(([m, b]) => request('admin', m, `/admin/oauthclients/${world.publicClient}`, b, { cookie: world.admin.cookie }, [200, 303])),
        fc
          .tuple(
            method('POST'),
            body(
              sessionForm(
                world.admin,
                params(['username', 'email', 'password', 'admin'], value).chain((p) =>
                  value
                    .filter((v) => !/^[A-Za-z0-9][A-Za-z0-9._-]{2,29}$/.test(v.trim()))
                    .map((u): Array<[string, string]> => [...p.filter(([n]) => n !== 'username'), ['username', u]]),
                ),
              ),
            ),
          )
          .map(([m, b]) => request('admin', m, '/admin/users', b, { cookie: world.admin.cookie }, [200, 303])),
        // A user's profile with an address that is never valid; groups named with a space, which no group can be.
        fc
          .tuple(
            method('POST'),
            body(
              sessionForm(
                world.admin,
                params(['name', 'email', 'email_verified'], value).chain((p) =>
                  value.map((e): Array<[string, string]> => [...p.filter(([n]) => n !== 'email'), ['email', `${e} @`]]),
                ),
              ),
            ),
          )
          .map(([m, b]) => request('admin', m, `/admin/users/${world.adminUser}`, b, { cookie: world.admin.cookie }, [200, 303])),
        fc
          .tuple(
            fc.constantFrom('/admin/users/groups', '/admin/users/groups/add', '/admin/users/groups/remove', '/admin/users/groups/delete'),
            method('POST'),
            params(['username'], fc.oneof(value, fc.constant('alice'))),
            value,
          )
          .chain(([path, m, p, name]) =>
            body(sessionForm(world.admin, fc.constant([...p, ['name', `x ${name} x`], ['group', `x ${name} x`]] as Array<[string, string]>))).map((b) =>
              request('admin', m, path, b, { cookie: world.admin.cookie }, [200, 303]),
            ),
          ),
        fc
          .tuple(
            fc.constantFrom(
              '/admin/oauthclients/%s/secret',
              '/admin/oauthclients/%s/delete',
              '/admin/users/%s/disable',
              '/admin/users/%s/promote',
              '/admin/resources/%s/delete',
              '/admin/keys/%s/revoke',
            ),
            fc.oneof(
              // Every real id the values may hold is left out: with the right CSRF token, acting on it would succeed.
              notOneOf([world.publicClient, world.confidentialClient, world.keyedClient, world.publisherClient, world.adminUser, 'builtin']).map((id) => ({
                id: encode(id),
                csrf: world.admin.csrf,
              })),
              fc.constantFrom('%zz', '%', '%E0%A4%A', '..%2F..%2F', '%00', '%2e%2e').map((id) => ({ id, csrf: world.admin.csrf })),
              fc
                .tuple(
                  fc.constantFrom(world.confidentialClient, world.adminUser),
                  value.filter((v) => v !== world.admin.csrf),
                )
                .map(([id, csrf]) => ({ id, csrf })),
            ),
            method('POST'),
          )
          .map(([path, { id, csrf }, m]) =>
            request(
              'admin',
              m,
              path.replace('%s', id),
              { payload: `_csrf=${encode(csrf)}`, contentType: 'application/x-www-form-urlencoded' },
              { cookie: world.admin.cookie },
              [200, 303],
            ),
          ),
        fc
          .tuple(
            fc.constantFrom('/admin/audit', '/admin/users', '/admin/oauthclients', '/admin/users/groups'),
            params(['user', 'client', 'type', 'before', 'after', 'q', 'done'], value),
            fc.constantFrom(world.admin, world.alice, world.anonymous),
          )
          .map(([path, p, session]) => request('admin', 'GET', `${path}?${form(p, 'encoded')}`, {}, { cookie: session.cookie }, [200, 303])),
      ),
    },
  ];
}

async function snapshot(server: TestServer): Promise<Record<string, string[]>> {
  const tables: Record<string, string[]> = {};
  for (const table of TABLES) {
    const { rows } = await sql<Record<string, unknown>>`select * from ${sql.table(table)}`.execute(server.store.db);
    tables[table] = rows.map((row) => JSON.stringify(row)).sort();
  }
  return tables;
}

/** The rows of each table that one snapshot has and the other has not: what a failure names, rather than every table whole. */
function changedRows(before: Record<string, string[]>, after: Record<string, string[]>): Record<string, { gone: string[]; new: string[] }> {
  const changes: Record<string, { gone: string[]; new: string[] }> = {};
  for (const table of TABLES) {
    const gone = before[table]!.filter((row) => !after[table]!.includes(row));
    const added = after[table]!.filter((row) => !before[table]!.includes(row));
    if (gone.length > 0 || added.length > 0) changes[table] = { gone, new: added };
  }
  return changes;
}

function check(c: Case, response: LightMyRequestResponse): void {
  const where = `${c.request.method} ${String(c.request.url).slice(0, 200)} → ${response.statusCode}`;
  assert.ok(response.statusCode < 500, `${where}: ${response.body.slice(0, 300)}`);
  assert.ok(CLIENT_ERRORS.includes(response.statusCode) || c.allowed.includes(response.statusCode), `${where} is not a documented answer`);
  const type = String(response.headers['content-type'] ?? '');
  if (response.statusCode >= 400 && type.startsWith('application/json')) {
    const error = response.json() as { error?: unknown; error_description?: unknown };
    assert.equal(typeof error.error, 'string', where);
    assert.equal(typeof error.error_description, 'string', where);
  }
  if (type.startsWith('text/html')) {
    // A textarea's content is raw text (RCDATA): a form redisplaying what was typed there echoes no markup.
    assert.doesNotMatch(response.body, /<script>alert|<img src=x|\{\{7\*7\}\}<\/(?!textarea>)|=49\b/, `${where}: input echoed as markup`);
  }
  if (c.endpoint === 'revoke' && response.statusCode === 200) assert.equal(response.body, '{}');
  if (c.endpoint === 'introspect' && response.statusCode === 200) assert.deepEqual(response.json(), { active: false });
  const location = response.headers.location;
  if (typeof location === 'string') {
    const target = new URL(location, 'http://gatehouse.invalid');
    const onGatehouse = target.origin === 'http://gatehouse.invalid' && location.startsWith('/') && !location.startsWith('//');
    assert.ok(onGatehouse || location.startsWith(`${REDIRECT_URI}?`), `${where}: redirects to ${location}`);
    if (!onGatehouse) assert.ok(target.searchParams.get('error'), `${where}: a redirect to the client without an error`);
  }
}

for (const backend of BACKENDS) {
  describe(`fuzzing the endpoints (${backend.name})`, backendOptions(backend), () => {
    let world: World;
    let before_: Record<string, string[]>;
    let auditBefore: number;
    let sent = 0;

    before(async () => {
      const server = await startServer(
        backend,
        {
          TOKEN_REQUESTS_PER_CLIENT: '0',
          TOKEN_REQUESTS_PER_ADDRESS: '0',
          LOGIN_FAILURES_PER_ADDRESS: '5',
          LOG_LEVEL: 'silent',
        },
        'localhost',
      );
      await server.createUser('alice');
      await server.createUser('bob');
      const admin = await server.createUser('root', { admin: true });
      const publicClient = (await server.createClient({ name: 'Annotator' })).client.id;
      const confidential = await server.createClient({ name: 'Backend', confidential: true });
      const resource = await server.createClient({ name: 'API', grantType: 'client_credentials', redirectUris: [], confidential: true });
      const publisher = await server.createClient({
        name: 'Publisher',
        grantType: 'urn:ietf:params:oauth:grant-type:jwt-bearer',
        redirectUris: [],
        confidential: true,
      });
      // Its keys would come from a private address it may not use: every fetch is refused before connecting.
      const trustedIssuer = 'https://idp.fuzz.example';
      await createIssuer(server.app.gatehouse, { issuer: trustedIssuer, profile: 'id-jag', jwksUri: 'https://127.0.0.1:1/jwks' }, COMMAND_LINE);
      const registeredKey = await signingKey('ES256', 'k1');
      const keyed = await server.createClient({
        name: 'Keyed job',
        grantType: 'client_credentials',
        redirectUris: [],
        confidential: true,
        jwks: JSON.stringify(jwksOf(registeredKey)),
      });
      const claims = { iss: keyed.client.id, sub: keyed.client.id, aud: server.url, jti: 'fuzz', exp: Math.floor(Date.now() / 1000) + 3000 };
      const otherKey = await signingKey('ES256', 'k1');
      const session = async (username: string | null, page: string) => {
        const agent = new UserAgent(server.url);
        if (username) await agent.login(username);
        const html = (await agent.visit(page)).html;
        const csrf = /name="_csrf" value="([^"]+)"/.exec(html)![1]!;
        return { cookie: [...agent.cookies].map(([k, v]) => `${k}=${v}`).join('; '), csrf };
      };
      const passkeyVisitor = async () => {
        const agent = new UserAgent(server.url);
        const csrf = /name="_csrf" value="([^"]+)"/.exec((await agent.visit('/login')).html)![1]!;
        const options = await agent.fetch('/login/passkey/options', { method: 'POST', body: new URLSearchParams({ _csrf: csrf }) });
        const { challenge } = (await options.json()) as { challenge: string };
        return { cookie: [...agent.cookies].map(([k, v]) => `${k}=${v}`).join('; '), csrf, challenge };
      };
      const carol = new UserAgent(server.url);
      await server.createUser('carol');
      await carol.login('carol');
      await setUpApp(carol);
      const dpop = await generateKeyPair('ES256', { extractable: true });
      const bobsLogin = await openIdLogin(await discover(server, publicClient), new UserAgent(server.url), 'bob');
      const agent = await server.createClient({
        name: 'Agent',
        confidential: true,
        tokenExchange: true,
        idJagAudiences: [{ issuer: 'https://as.fuzz.example', client_id: null }],
      });
      world = {
        server,
        dpopKey: { publicJwk: await exportJWK(dpop.publicKey), privateJwk: await exportJWK(dpop.privateKey) },
        publicClient,
        confidentialClient: confidential.client.id,
        resourceBasic: `Basic ${Buffer.from(`${resource.client.id}:${resource.secret}`).toString('base64')}`,
        adminUser: admin.id,
        publisherClient: publisher.client.id,
        trustedIssuer,
        keyedClient: keyed.client.id,
        // None of these may authenticate: the fuzz run must change nothing (a good assertion would issue a token).
        forgedAssertions: [
          await new SignJWT(claims).setProtectedHeader({ alg: 'ES256', kid: 'k1' }).sign(otherKey.privateKey),
          new UnsecuredJWT(claims).encode(),
          await new SignJWT(claims).setProtectedHeader({ alg: 'HS256', kid: 'k1' }).sign(new TextEncoder().encode(JSON.stringify(registeredKey.publicJwk))),
        ],
        bobsIdToken: bobsLogin.idToken,
        bobsAccessToken: bobsLogin.accessToken,
        agentBasic: `Basic ${Buffer.from(`${agent.client.id}:${agent.secret}`).toString('base64')}`,
        anonymous: await session(null, '/login'),
        alice: await session('alice', '/'),
        admin: await session('root', '/admin/users'),
        passkey: await passkeyVisitor(),
        carol: await session('carol', '/login/second-factor'),
      };
      before_ = await snapshot(server);
      auditBefore = Number((await sql<{ n: number }>`select count(*) as n from audit_events`.execute(server.store.db)).rows[0]!.n);
    });
    after(() => world?.server.close());

    test(`random and hostile requests get documented 4xx answers (seed ${SEED})`, async (t) => {
      t.diagnostic(`fuzz seed ${SEED}: replay with FUZZ_SEED=${SEED}`);
      for (const { name, runs, arbitrary } of cases(world)) {
        const started = Date.now();
        await fc
          .assert(
            fc.asyncProperty(arbitrary, async (c) => {
              sent++;
              check(c, await world.server.app.inject(c.request));
            }),
            { seed: SEED, numRuns: runs, endOnFailure: true },
          )
          .catch((error: Error) => {
            // fast-check keeps the failed assertion as the cause: said too, so that a failure reads in one place.
            throw new Error(`${name}: ${error.message}\n${error.cause instanceof Error ? error.cause.message : ''}`);
          });
        t.diagnostic(`${name}: ${runs} requests in ${Date.now() - started} ms`);
      }
      t.diagnostic(`${sent} requests sent`);
      assert.ok(sent >= 2500);
    });

    test('and changed nothing stored, except the audit trail of failed logins and refused assertions', async () => {
      const changes = changedRows(before_, await snapshot(world.server));
      assert.deepEqual(changes, {}, `seed ${SEED} changed stored rows (replay with FUZZ_SEED=${SEED}): ${JSON.stringify(changes).slice(0, 2000)}`);
      const { rows } = await sql<{ type: string }>`select type from audit_events order by id`.execute(world.server.store.db);
      assert.deepEqual(
        [...new Set(rows.slice(auditBefore).map((row) => row.type))].filter((type) => type !== 'login_failed' && type !== 'assertion_refused'),
        [],
      );
    });
  });
}
