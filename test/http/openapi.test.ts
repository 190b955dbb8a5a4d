/**
 * GET /openapi.json: a valid OpenAPI 3.1 document, generated from the route schemas, that
 * lists every public endpoint (SPEC §4) and none of the people's pages.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import SwaggerParser from '@apidevtools/swagger-parser';
import type { OpenAPIV3_1 } from 'openapi-types';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { startServer, type TestServer } from '../support/server.ts';

/** The public endpoints of SPEC §4, as `METHOD path`. */
const PUBLIC_ENDPOINTS = [
  'GET /oauth/authorize',
  'POST /api/token',
  'POST /oauth/device_authorization',
  'POST /oauth/revoke',
  'POST /oauth/introspect',
  'POST /oauth/par',
  'GET /api/profile',
  'GET /api/links',
  'GET /.well-known/oauth-authorization-server',
  'GET /.well-known/openid-configuration',
  'GET /oauth/userinfo',
  'POST /oauth/userinfo',
  'GET /oauth/jwks',
  'GET /ws',
  'GET /_status',
  'GET /metrics',
];

for (const backend of BACKENDS) {
  describe(`GET /openapi.json (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let response: Response;
    let document: OpenAPIV3_1.Document;

    before(async () => {
      server = await startServer(backend);
      response = await fetch(new URL('/openapi.json', server.url), { headers: { origin: 'https://app.example' } });
      document = (await response.json()) as OpenAPIV3_1.Document;
    });
    after(() => server?.close());

    test('is a valid OpenAPI 3.1 document for this server, readable from any origin', async () => {
      assert.equal(response.status, 200);
      assert.match(response.headers.get('content-type')!, /^application\/json/);
      assert.equal(response.headers.get('access-control-allow-origin'), '*');
      assert.equal(document.openapi, '3.1.0');
      assert.deepEqual(document.servers, [{ url: server.url }]);
      // validate() throws, naming the problem, when the document breaks the OpenAPI schema or its own references.
      await SwaggerParser.validate(structuredClone(document) as never);
    });

    test('lists every public endpoint, and no page', () => {
      const listed = Object.entries(document.paths!).flatMap(([path, item]) =>
        Object.keys(item!)
          .filter((key) => ['get', 'post', 'put', 'delete', 'patch', 'head', 'options'].includes(key))
          .map((method) => `${method.toUpperCase()} ${path}`),
      );
      assert.deepEqual(listed.toSorted(), PUBLIC_ENDPOINTS.toSorted());
    });

    test('describes the parameters, the answers and the errors of the token endpoint', () => {
      const token = document.paths!['/api/token']!.post!;
      const body = (token.requestBody as OpenAPIV3_1.RequestBodyObject).content['application/x-www-form-urlencoded']!.schema as OpenAPIV3_1.SchemaObject;
      assert.deepEqual(body.required, ['grant_type']);
      assert.deepEqual((body.properties!.grant_type as OpenAPIV3_1.SchemaObject).enum, [
        'authorization_code',
        'refresh_token',
        'client_credentials',
        'urn:ietf:params:oauth:grant-type:device_code',
        'urn:ietf:params:oauth:grant-type:jwt-bearer',
        'urn:ietf:params:oauth:grant-type:token-exchange',
      ]);
      const named = ['code', 'redirect_uri', 'code_verifier', 'refresh_token', 'device_code', 'assertion', 'subject_token', 'actor_token', 'audience'];
      for (const name of [...named, 'scope', 'client_id', 'client_secret']) assert.ok(body.properties![name], name);
      assert.deepEqual(Object.keys(token.responses!).toSorted(), ['200', '400', '401', '429', '503']);
      const tokens = (token.responses!['200'] as OpenAPIV3_1.ResponseObject).content!['application/json']!.schema as OpenAPIV3_1.SchemaObject;
      assert.deepEqual(Object.keys(tokens.properties!).toSorted(), [
        'access_token',
        'expires_in',
        'id_token',
        'issued_token_type',
        'refresh_token',
        'scope',
        'token_type',
      ]);
      const refused = (token.responses!['400'] as OpenAPIV3_1.ResponseObject).content!['application/json']!.schema as OpenAPIV3_1.SchemaObject;
      assert.deepEqual(refused.required, ['error', 'error_description']);
    });

    test('documents the parameters without taking over their checks: a repeated one still gets its own message', async () => {
      const repeated = await fetch(new URL('/api/token', server.url), {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: 'grant_type=refresh_token&refresh_token=a&refresh_token=b',
      });
      assert.equal(repeated.status, 400);
      assert.deepEqual(await repeated.json(), { error: 'invalid_request', error_description: "the 'refresh_token' parameter is repeated" });
      const missing = await fetch(new URL('/api/token', server.url), {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: '',
      });
      assert.deepEqual(await missing.json(), { error: 'invalid_request', error_description: "the 'grant_type' parameter is missing" });
    });
  });
}
