/**
 * The OAuth endpoints: authorization (with the consent page), device authorization, token,
 * revocation, introspection and the server metadata. Parsing and response shaping only; decisions live
 * in src/oauth/.
 *
 * Every schema here is documentation for OpenAPI (http/schemas.ts), not validation: with
 * `...PARAMETERS_CHECKED_BY_PROTOCOL` the protocol code checks the parameters itself and
 * answers with OAuth's own errors.
 */
import { secondStepUrl } from './second-factor.ts';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { PAR_PATH, authorize, type Arrival, type NextStep } from '../oauth/authorize.ts';
import { pushAuthorizationRequest } from '../oauth/par.ts';
import { clientAssertionCheck } from '../oauth/assertions/client-assertion.ts';
import { authenticateClient, identifyClient } from '../oauth/client-auth.ts';
import { requestDeviceAuthorization } from '../oauth/device.ts';
import type { AppContext } from '../context.ts';
import { invalidRequest } from '../protocol/errors.ts';
import { currentNonce } from '../oauth/dpop.ts';
import { TOKEN_PATH, requestToken } from '../oauth/grants/index.ts';
import { introspect } from '../oauth/introspection.ts';
import { OPENID_CONFIGURATION, metadataPaths, serverMetadata } from '../oauth/metadata.ts';
import { unvettedClient } from '../oauth/pending.ts';
import { single, type RawParams } from '../protocol/params.ts';
import { isPrivateUseRedirect, redirectsToThisDevice } from '../protocol/redirect-uri.ts';
import { revokeToken } from '../oauth/revocation.ts';
import type { Client } from '../clients/clients.ts';
import { scopesSupported } from '../oauth/resources.ts';
import { IDENTITY_SCOPES } from '../oauth/scopes.ts';
import { requireFormBody, rejectOtherMethods } from './helpers.ts';
import {
  PARAMETERS_CHECKED_BY_PROTOCOL,
  authorizeSchema,
  deviceAuthorizationSchema,
  introspectSchema,
  metadataSchema,
  openidConfigurationSchema,
  parSchema,
  revokeSchema,
  tokenSchema,
} from './schemas.ts';
import { currentLogin, formToken } from './session.ts';

export default async function oauthRoutes(app: FastifyInstance, { ctx }: { ctx: AppContext }) {
  for (const path of metadataPaths(ctx.config)) {
    const schema = path.includes(OPENID_CONFIGURATION) ? openidConfigurationSchema : metadataSchema;
    app.get(path, { schema }, async () => serverMetadata(ctx.config, await scopesSupported(ctx)));
  }

  app.get('/oauth/authorize', { config: { page: true }, schema: authorizeSchema, ...PARAMETERS_CHECKED_BY_PROTOCOL }, async (request, reply) => {
    return answerAuthorization(request, reply, { url: request.url, params: request.query as RawParams, decision: null });
  });

  // The consent form posts back the request's parameters plus the user's decision.
  app.post('/oauth/authorize', { config: { page: true }, preHandler: app.csrfProtection }, async (request, reply) => {
    const form = requireFormBody(request);
    const decision = single(form, 'decision');
    if (decision !== 'approve' && decision !== 'deny') throw invalidRequest('the form did not say whether to authorize');
    return answerAuthorization(request, reply, { url: request.url, params: form, decision });
  });

  /** Errors `authorize` throws (unknown client, unregistered redirect URL) render the error page. */
  async function answerAuthorization(request: FastifyRequest, reply: FastifyReply, arrival: Arrival) {
    reply.header('Cache-Control', 'no-store');
    const step = await authorize(arrival, await currentLogin(request, ctx), ctx, request.ip);
    switch (step.kind) {
      case 'login':
        return reply.redirect(`/login?${new URLSearchParams({ next: step.next, ...(step.switchAccount ? { switch: '1' } : {}) })}`);
      case 'second_factor':
        return reply.redirect(secondStepUrl('code', step.next));
      case 'consent':
        return consentPage(request, reply, step);
      case 'respond': {
        if (step.refusal?.detail) request.log.info({ error: step.refusal.error, detail: step.refusal.detail }, 'authorization refused');
        // The code must not leak to third parties through the Referer header (RFC 9700 §4.2.4).
        reply.header('Referrer-Policy', 'no-referrer');
        const { response } = step;
        if (response.mode === 'web_message') return reply.view('web-message.eta', { title: 'Returning to the application', popup: response.post });
        // The form posts itself by a script file (no inline script under the CSP), or by its button.
        if (response.mode === 'form_post') return reply.view('form-post.eta', { title: 'Returning to the application', response });
        return reply.redirect(response.redirectTo, 302);
      }
    }
  }

  function consentPage(
    request: FastifyRequest,
    reply: FastifyReply,
    { request: authorization, user, fields, popup, approvedBefore }: Extract<NextStep, { kind: 'consent' }>,
  ) {
    const here = new URL(request.url, ctx.config.publicUrl);
    const { audience } = authorization;
    const described = new Map([...IDENTITY_SCOPES, ...audience.scopes.map((s): [string, string] => [s.name, s.description])]);
    const describe = (scope: string) => ({ scope, description: described.get(scope) ?? scope });
    const privateUse = isPrivateUseRedirect(authorization.redirectUri);
    const fresh = authorization.scopes.filter((scope) => !approvedBefore.includes(scope));
    return reply.view('consent.eta', {
      title: `Authorize ${authorization.client.name}`,
      client: authorization.client,
      user,
      // Named only when it is not the service itself.
      resource: audience.builtin ? null : { name: audience.name, uri: audience.uri },
      // What is new is asked about; what was approved before is shown apart (SPEC §4.4: step-up by
      // scope union) — unless nothing is new (prompt=consent asks about all of it again).
      scopes: (fresh.length > 0 ? fresh : authorization.scopes).map(describe),
      approvedBefore: fresh.length > 0 ? approvedBefore.map(describe) : [],
      hidden: fields,
      csrfToken: formToken(reply),
      popup,
      switchNext: here.pathname + here.search,
      redirectHost: new URL(authorization.redirectUri).host,
      // A private-use scheme (RFC 8252 §7.1): the code goes to whichever application on the device opens it.
      privateUseScheme: privateUse ? new URL(authorization.redirectUri).protocol : null,
      notVetted: notVetted(authorization.client, authorization.redirectUri),
    });
  }

  /** What the consent page says of a client no administrator checked (SPEC §4.1), or null for a registered one. */
  function notVetted(client: Client, redirectUri: string) {
    const unvetted = unvettedClient(client);
    return unvetted && { ...unvetted, onThisComputer: redirectsToThisDevice(redirectUri) };
  }

  app.post(TOKEN_PATH, { schema: tokenSchema, ...PARAMETERS_CHECKED_BY_PROTOCOL }, async (request, reply) => {
    reply.header('Cache-Control', 'no-store').header('Pragma', 'no-cache');
    // The nonce for the client's next proof (RFC 9449 §8.2), with every answer, when nonces are on.
    const nonce = currentNonce(ctx);
    if (nonce !== null) reply.header('DPoP-Nonce', nonce);
    const { authorization } = request.headers;
    return requestToken({ params: requireFormBody(request), authorization, dpop: request.headers.dpop, address: request.ip }, ctx);
  });

  app.post(PAR_PATH, { schema: parSchema, ...PARAMETERS_CHECKED_BY_PROTOCOL }, async (request, reply) => {
    reply.header('Cache-Control', 'no-store');
    const { authorization } = request.headers;
    const pushed = await pushAuthorizationRequest({ params: requireFormBody(request), authorization, dpop: request.headers.dpop, address: request.ip }, ctx);
    return reply.code(201).send(pushed);
  });

  app.post('/oauth/device_authorization', { schema: deviceAuthorizationSchema, ...PARAMETERS_CHECKED_BY_PROTOCOL }, async (request, reply) => {
    reply.header('Cache-Control', 'no-store');
    return requestDeviceAuthorization(requireFormBody(request), request.headers.authorization, ctx, request.ip);
  });

  app.post('/oauth/revoke', { schema: revokeSchema, ...PARAMETERS_CHECKED_BY_PROTOCOL }, async (request, reply) => {
    reply.header('Cache-Control', 'no-store');
    const params = requireFormBody(request);
    const authentication = await identifyClient(ctx.clients, request.headers.authorization, params, clientAssertionCheck(ctx, '/oauth/revoke', request.ip), {
      secretByCopy: true,
    });
    await revokeToken(params, authentication, ctx, request.ip);
    return {};
  });

  app.post('/oauth/introspect', { schema: introspectSchema, ...PARAMETERS_CHECKED_BY_PROTOCOL }, async (request, reply) => {
    reply.header('Cache-Control', 'no-store');
    const params = requireFormBody(request);
    const client = await authenticateClient(ctx.clients, request.headers.authorization, params, clientAssertionCheck(ctx, '/oauth/introspect', request.ip));
    return introspect(params, client, ctx);
  });

  rejectOtherMethods(app, [TOKEN_PATH, PAR_PATH, '/oauth/device_authorization', '/oauth/revoke', '/oauth/introspect'], 'POST');
  rejectOtherMethods(app, metadataPaths(ctx.config), 'GET');
}
