/**
 * `/admin/oauthclients` (SPEC §4.5, §4.16): register, edit and rotate the secret of OAuth
 * clients; disable, enable and delete (after a confirm page) clients of every kind; block and
 * unblock the clients no administrator registered. Registered inside the
 * admin console's plugin (src/http/admin.ts), whose guard admits enabled administrators only;
 * every form is CSRF-protected. The decisions and the audit are the domain's
 * (src/clients/clients.ts), shared with the CLI.
 */
import { authMethodOf } from '../oauth/assertions/client-keys.ts';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import {
  PAGE_SIZE,
  ClientInputError,
  blockClient,
  changeClient,
  clientChangeProblems,
  clientInputProblems,
  describeClient,
  disableClient,
  enableClient,
  listClients,
  registerClient,
  removeClient,
  rotateClientSecret,
  unblockClient,
  type Client,
  type ClientChanges,
  type ClientInput,
} from '../clients/clients.ts';
import { idJagAudienceText, parseIdJagAudience } from '../identity/id-jags.ts';
import { lookupClient } from '../oauth/client-auth.ts';
import { AUTHORIZATION_CODE_GRANT_TYPE, CLIENT_GRANT_TYPES } from '../oauth/grants/types.ts';
import { FAPI2 } from '../oauth/client-rules.ts';
import { SCOPES } from '../config.ts';
import { SIGNING_ALGS } from '../identity/key-schedule.ts';
import { IDENTITY_SCOPE_NAMES } from '../oauth/scopes.ts';
import { single, type RawParams } from '../protocol/params.ts';
import { scopeDescriptions } from '../oauth/resources.ts';
import { PageRefusal } from './errors.ts';
import { requireFormBody, type AdminRoomOptions } from './helpers.ts';
import { field, formatTime, page, pageCursor, ticked, tickedValues } from './pages.ts';
import { formToken } from './session.ts';

const NOTICES: Record<string, string> = {
  deleted: 'The client was deleted and everything issued to it was revoked.',
  blocked: 'The client is blocked: it is refused from now on, and everything issued to it was revoked.',
  unblocked: 'The client is no longer blocked.',
  disabled: 'The client is disabled: it is refused from now on, and everything issued to it was revoked.',
  enabled: 'The client is enabled: it may get tokens again. What was revoked stays revoked.',
  saved: 'Changes saved.',
};

/** The form's fields, as typed: redisplayed with the errors so nothing has to be typed again. */
interface ClientFormValues {
  name: string;
  grant_type: string;
  redirect_uri: string;
  client_type: string;
  trusted: boolean;
  require_pkce: boolean;
  /** SPEC §4.14: DPoP and PAR required, the FAPI 2.0 profile. */
  require_dpop: boolean;
  require_par: boolean;
  fapi2: boolean;
  /** SPEC §4.15: token exchange allowed; the ID-JAG audiences, one per line (`<issuer>` or `<issuer>=<client ID there>`). */
  token_exchange: boolean;
  id_jag_audiences: string;
  scopes: string[];
  post_logout_redirect_uri: string;
  backchannel_logout_uri: string;
  id_token_alg: string;
  /** private_key_jwt (client_type `private_key_jwt`): the URL of its JWK Set, or the set itself. */
  jwks_uri: string;
  jwks: string;
}

function clientFormValues(body: RawParams): ClientFormValues {
  return {
    name: field(body, 'name'),
    grant_type: field(body, 'grant_type'),
    redirect_uri: field(body, 'redirect_uri').trim(),
    client_type: field(body, 'client_type'),
    trusted: ticked(body, 'trusted'),
    require_pkce: ticked(body, 'require_pkce'),
    require_dpop: ticked(body, 'require_dpop'),
    require_par: ticked(body, 'require_par'),
    fapi2: field(body, 'profile') === FAPI2,
    token_exchange: ticked(body, 'token_exchange'),
    id_jag_audiences: field(body, 'id_jag_audiences').trim(),
    scopes: tickedValues(body, 'scope'),
    post_logout_redirect_uri: field(body, 'post_logout_redirect_uri').trim(),
    backchannel_logout_uri: field(body, 'backchannel_logout_uri').trim(),
    id_token_alg: field(body, 'id_token_alg'),
    jwks_uri: field(body, 'jwks_uri').trim(),
    jwks: field(body, 'jwks').trim(),
  };
}

/** The redirect URLs typed one per line. */
function linesOf(text: string): string[] {
  return text
    .split(/\r?\n/)
    .map((line) => line.trim())
    .filter((line) => line !== '');
}

function changesFrom(values: ClientFormValues): ClientChanges {
  return {
    name: values.name,
    redirectUris: linesOf(values.redirect_uri),
    trusted: values.trusted,
    requirePkce: values.require_pkce,
    requireDpop: values.require_dpop,
    requirePar: values.require_par,
    profile: values.fapi2 ? FAPI2 : null,
    tokenExchange: values.token_exchange,
    idJagAudiences: linesOf(values.id_jag_audiences).map(parseIdJagAudience),
    scope: values.scopes.join(' '),
    postLogoutRedirectUris: linesOf(values.post_logout_redirect_uri),
    backchannelLogoutUri: values.backchannel_logout_uri === '' ? null : values.backchannel_logout_uri,
    // Not chosen (a form of an older page): as it was, or the default.
    idTokenAlg: values.id_token_alg === '' ? undefined : values.id_token_alg,
    // Keys only for a client that authenticates with them; others leave them as they are (none).
    ...(values.client_type === 'private_key_jwt'
      ? { jwksUri: values.jwks_uri === '' ? null : values.jwks_uri, jwks: values.jwks === '' ? null : values.jwks }
      : {}),
  };
}

/** Problems the form adds to the registration rules: on a form, no scope ticked is a mistake, not "all". */
function formProblems(values: ClientFormValues): Record<string, string> {
  const problems: Record<string, string> = {};
  if (!['public', 'confidential', 'private_key_jwt'].includes(values.client_type)) problems.client_type = 'Choose public, confidential or private_key_jwt';
  if (values.client_type === 'private_key_jwt' && values.jwks_uri === '' && values.jwks === '')
    problems.jwks_uri = 'Give the URL of its JWKS, or paste the JWKS';
  if (values.scopes.length === 0) problems.scope = 'Choose at least one scope';
  return problems;
}

/** The form's client type: public, confidential (a secret) or private_key_jwt (keys). */
function clientTypeOf(client: Client): string {
  const method = authMethodOf(client);
  return method === 'none' ? 'public' : method === 'private_key_jwt' ? 'private_key_jwt' : 'confidential';
}

function clientRow(client: Client) {
  return { ...describeClient(client), created: formatTime(client.created_at) };
}

function notice(request: FastifyRequest): string | null {
  const done = (request.query as RawParams).done;
  return typeof done === 'string' ? (NOTICES[done] ?? null) : null;
}

export default async function clientRoutes(app: FastifyInstance, { ctx, admin, actor }: AdminRoomOptions) {
  const post = { ...page, preHandler: app.csrfProtection };

  async function clientOr404(request: FastifyRequest): Promise<Client> {
    const { id } = request.params as { id: string };
    const client = await lookupClient(ctx.db, id);
    // Clients no administrator registered are not edited here: they are blocked from the list.
    if (!client || client.kind !== 'registered') throw new PageRefusal(404, 'There is no OAuth client with this ID.');
    return client;
  }

  async function clientForm(
    reply: FastifyReply,
    data: { client: Client | null; values: ClientFormValues; errors: Record<string, string>; notice?: string | null },
  ) {
    const editing = data.client !== null;
    // Every scope of every resource server may be given to a client.
    const scopeChoices = [...(await scopeDescriptions(ctx))].map(([scope, description]) => ({ scope, description }));
    return reply.view('admin-client-form.eta', {
      title: editing ? `Edit ${data.client!.name}` : 'Register a new OAuth client',
      client: editing ? clientRow(data.client!) : null,
      values: data.values,
      errors: data.errors,
      notice: data.notice ?? null,
      grantTypes: CLIENT_GRANT_TYPES,
      idTokenAlgs: SIGNING_ALGS,
      scopeChoices,
      csrfToken: formToken(reply),
    });
  }

  app.get('/admin/oauthclients', page, async (request, reply) => {
    const cursor = pageCursor(request.query as RawParams);
    const { rows, next, previous } = await listClients(ctx, cursor, PAGE_SIZE);
    return reply.view('admin-clients.eta', {
      title: 'OAuth clients',
      wide: true,
      clients: rows.map(clientRow),
      paged: 'after' in cursor || 'before' in cursor,
      next: next && `/admin/oauthclients?${new URLSearchParams(next)}`,
      previous: previous && `/admin/oauthclients?${new URLSearchParams(previous)}`,
      notice: notice(request),
      csrfToken: formToken(reply),
    });
  });

  // Clients no administrator registered are blocked rather than edited (SPEC §4.5, §4.8).
  // Their IDs may be URLs, so the form carries the ID instead of the path.
  for (const [action, perform] of Object.entries({ block: blockClient, unblock: unblockClient })) {
    app.post(`/admin/oauthclients/${action}`, post, async (request, reply) => {
      const clientId = field(requireFormBody(request), 'client_id');
      const client = await lookupClient(ctx.db, clientId);
      if (!client || client.kind === 'registered') throw new PageRefusal(404, 'There is no client with this ID that can be blocked.');
      await perform(ctx, client.id, actor(request));
      request.log.info({ event: `admin_client_${action}ed`, admin: admin(request).id, client: client.id }, `client ${action}ed`);
      return reply.redirect(`/admin/oauthclients?done=${action}ed`, 303);
    });
  }

  // Clients of every kind are disabled, enabled and deleted; the form carries the ID (a URL, maybe).
  async function anyClientOr404(clientId: string): Promise<Client> {
    const client = await lookupClient(ctx.db, clientId);
    if (!client) throw new PageRefusal(404, 'There is no OAuth client with this ID.');
    return client;
  }

  for (const [action, perform] of Object.entries({ disable: disableClient, enable: enableClient })) {
    app.post(`/admin/oauthclients/${action}`, post, async (request, reply) => {
      const client = await anyClientOr404(field(requireFormBody(request), 'client_id'));
      await perform(ctx, client, actor(request));
      request.log.info({ event: `admin_client_${action}d`, admin: admin(request).id, client: client.id }, `client ${action}d`);
      // From a registered client's own page (`?from=edit`), back to it; else to the list.
      const fromItsPage = single(request.query as RawParams, 'from') === 'edit' && client.kind === 'registered';
      const back = fromItsPage ? `/admin/oauthclients/${client.id}` : '/admin/oauthclients';
      return reply.redirect(`${back}?done=${action}d`, 303);
    });
  }

  async function deletePage(reply: FastifyReply, client: Client) {
    return reply.view('admin-client-delete.eta', {
      title: `Delete ${client.name}`,
      client: clientRow(client),
      // A registered client's own page; the list for the others, whose IDs may be URLs.
      back: client.kind === 'registered' ? `/admin/oauthclients/${client.id}` : '/admin/oauthclients',
      csrfToken: formToken(reply),
    });
  }

  app.get('/admin/oauthclients/delete', page, async (request, reply) =>
    deletePage(reply, await anyClientOr404(single(request.query as RawParams, 'client_id') ?? '')),
  );

  app.post('/admin/oauthclients/delete', post, async (request, reply) => {
    const client = await anyClientOr404(field(requireFormBody(request), 'client_id'));
    await removeClient(ctx, client.id, actor(request));
    request.log.info({ event: 'admin_client_deleted', admin: admin(request).id, client: client.id }, 'client deleted');
    return reply.redirect('/admin/oauthclients?done=deleted', 303);
  });

  app.get('/admin/oauthclients/new', page, async (_request, reply) => {
    const values: ClientFormValues = {
      name: '',
      grant_type: AUTHORIZATION_CODE_GRANT_TYPE,
      redirect_uri: '',
      client_type: 'public',
      trusted: false,
      require_pkce: true,
      require_dpop: false,
      require_par: false,
      fapi2: false,
      token_exchange: false,
      id_jag_audiences: '',
      scopes: [...SCOPES, ...IDENTITY_SCOPE_NAMES], // as `gatehouse client create` without --scope
      post_logout_redirect_uri: '',
      backchannel_logout_uri: '',
      id_token_alg: 'RS256',
      jwks_uri: '',
      jwks: '',
    };
    return clientForm(reply, { client: null, values, errors: {} });
  });

  app.post('/admin/oauthclients', post, async (request, reply) => {
    const values = clientFormValues(requireFormBody(request));
    const input: ClientInput = { ...changesFrom(values), grantType: values.grant_type, confidential: values.client_type !== 'public' };
    const errors = { ...clientInputProblems(input), ...formProblems(values) };
    if (Object.keys(errors).length > 0) return clientForm(reply.code(400), { client: null, values, errors });
    let registered;
    try {
      registered = await registerClient(ctx, input, actor(request));
    } catch (error) {
      if (!(error instanceof ClientInputError)) throw error;
      return clientForm(reply.code(400), { client: null, values, errors: { [error.field]: error.message } });
    }
    const { client, secret } = registered;
    request.log.info({ event: 'admin_client_registered', admin: admin(request).id, client: client.id }, 'client registered');
    return reply.view('admin-client-registered.eta', { title: `Registered ${client.name}`, client: clientRow(client), secret, rotated: false });
  });

  app.get('/admin/oauthclients/:id', page, async (request, reply) => {
    const client = await clientOr404(request);
    const row = clientRow(client);
    const values: ClientFormValues = {
      name: client.name,
      grant_type: client.grant_type,
      redirect_uri: row.redirect_uris.join('\n'),
      client_type: clientTypeOf(client),
      trusted: row.trusted,
      require_pkce: row.require_pkce,
      require_dpop: row.require_dpop,
      require_par: row.require_par,
      fapi2: row.profile === FAPI2,
      token_exchange: row.token_exchange,
      id_jag_audiences: row.id_jag_audiences.map(idJagAudienceText).join('\n'),
      scopes: row.scopes,
      post_logout_redirect_uri: row.post_logout_redirect_uris.join('\n'),
      backchannel_logout_uri: row.backchannel_logout_uri ?? '',
      id_token_alg: row.id_token_signed_response_alg,
      jwks_uri: client.jwks_uri ?? '',
      jwks: client.jwks === null ? '' : JSON.stringify(JSON.parse(client.jwks), null, 2),
    };
    return clientForm(reply, { client, values, errors: {}, notice: notice(request) });
  });

  app.post('/admin/oauthclients/:id', post, async (request, reply) => {
    const client = await clientOr404(request);
    const values = {
      ...clientFormValues(requireFormBody(request)),
      grant_type: client.grant_type,
      client_type: clientTypeOf(client),
    };
    const errors = { ...clientChangeProblems(client, changesFrom(values)), ...formProblems(values) };
    if (Object.keys(errors).length > 0) return clientForm(reply.code(400), { client, values, errors });
    try {
      await changeClient(ctx, client, changesFrom(values), actor(request));
    } catch (error) {
      if (!(error instanceof ClientInputError)) throw error;
      return clientForm(reply.code(400), { client, values, errors: { [error.field]: error.message } });
    }
    request.log.info({ event: 'admin_client_changed', admin: admin(request).id, client: client.id }, 'client changed');
    return reply.redirect(`/admin/oauthclients/${client.id}?done=saved`, 303);
  });

  app.post('/admin/oauthclients/:id/secret', post, async (request, reply) => {
    const client = await clientOr404(request);
    requireFormBody(request);
    const secret = await rotateClientSecret(ctx, client, actor(request));
    request.log.info({ event: 'admin_client_secret_rotated', admin: admin(request).id, client: client.id }, 'client secret rotated');
    return reply.view('admin-client-registered.eta', { title: `New secret for ${client.name}`, client: clientRow(client), secret, rotated: true });
  });

  app.get('/admin/oauthclients/:id/delete', page, async (request, reply) => deletePage(reply, await clientOr404(request)));

  app.post('/admin/oauthclients/:id/delete', post, async (request, reply) => {
    const client = await clientOr404(request);
    requireFormBody(request);
    await removeClient(ctx, client.id, actor(request));
    request.log.info({ event: 'admin_client_deleted', admin: admin(request).id, client: client.id }, 'client deleted');
    return reply.redirect('/admin/oauthclients?done=deleted', 303);
  });
}
