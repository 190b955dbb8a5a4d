/**
 * `/admin/connections` (SPEC §4.5, §4.13): the upstream identity providers people log in
 * with — listed, added (the result shows the callback URL to register at the provider),
 * edited, disabled and enabled, deleted after a confirmation. Registered inside the admin
 * console's plugin (src/http/admin.ts), whose guard admits enabled administrators only; every
 * form is CSRF-protected. The decisions and the audit are the domain's
 * (src/accounts/connections/connections.ts), shared with `gatehouse connection`; the
 * provider's client secret is never shown, not even on the edit page.
 *
 * A connection's pages are under `/admin/connections/<id>/…` (`/edit`, `/delete`): an id is
 * made from a name, and a connection named "New" must not lose its page to the add form's
 * `/admin/connections/new`.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import {
  CONNECTION_PRESETS,
  ConnectionInputError,
  allConnections,
  callbackUrl,
  connectionNamed,
  createConnection,
  deleteConnection,
  describeConnection,
  presetLabel,
  setConnectionEnabled,
  slugOf,
  tokenResourcesOf,
  updateConnectionSettings,
  type Connection,
  type ConnectionInput,
} from '../accounts/connections/connections.ts';
import type { Actor } from '../audit.ts';
import type { AppContext } from '../context.ts';
import type { RawParams } from '../protocol/params.ts';
import { PageRefusal } from './errors.ts';
import { requireFormBody } from './helpers.ts';
import { field, page, sentence, ticked } from './pages.ts';
import { formToken } from './session.ts';

const NOTICES: Record<string, string> = {
  saved: 'Changes saved.',
  disabled: 'The connection is disabled: its button is gone from the login page and the sessions that came through it have ended.',
  enabled: 'The connection is enabled: people can log in with it again.',
  deleted: 'The connection was deleted: the sessions that came through it have ended and its identities are unlinked.',
};

/** The provider choices of the form: the presets, then any OpenID Connect provider, then any OAuth 2.0 provider. */
const PROVIDERS: ReadonlyArray<{ value: string; label: string }> = [
  ...CONNECTION_PRESETS.map((preset) => ({ value: preset, label: presetLabel(preset) })),
  { value: 'oidc', label: 'Other OpenID Connect provider' },
  { value: 'oauth2', label: 'Other OAuth 2.0 provider' },
];

/** What the form shows: as typed, or as stored (never the client secret). */
interface Values {
  name: string;
  /** A preset, `oidc` or `oauth2`; '' before one is chosen. */
  provider: string;
  issuer: string;
  authorization_url: string;
  token_url: string;
  userinfo_url: string;
  tenant: string;
  base_url: string;
  client_id: string;
  scope: string;
  domains: string;
  groups_claim: string;
  required: boolean;
  create_accounts: boolean;
  link_verified_email: boolean;
  trust_mfa: boolean;
  allow_private_address: boolean;
  /** SPEC §4.15: keep the provider's tokens; the resource servers that may exchange for them, separated by spaces. */
  keep_tokens: boolean;
  token_resources: string;
}

const NEW_CONNECTION: Values = {
  name: '',
  provider: '',
  issuer: '',
  authorization_url: '',
  token_url: '',
  userinfo_url: '',
  tenant: '',
  base_url: '',
  client_id: '',
  scope: '',
  domains: '',
  groups_claim: '',
  required: false,
  create_accounts: true,
  link_verified_email: false,
  trust_mfa: false,
  allow_private_address: false,
  keep_tokens: false,
  token_resources: '',
};

function valuesOf(row: Connection): Values {
  return {
    name: row.name,
    provider: row.preset ?? row.kind,
    issuer: row.preset === null ? (row.issuer ?? '') : '',
    authorization_url: row.preset === null ? (row.authorization_url ?? '') : '',
    token_url: row.preset === null ? (row.token_url ?? '') : '',
    userinfo_url: row.preset === null ? (row.userinfo_url ?? '') : '',
    tenant: row.tenant ?? '',
    base_url: row.base_url ?? '',
    client_id: row.client_id,
    scope: row.scope,
    domains: (JSON.parse(row.domains) as string[]).join(' '),
    groups_claim: row.groups_claim ?? '',
    required: row.required === 1,
    create_accounts: row.create_accounts === 1,
    link_verified_email: row.link_verified_email === 1,
    trust_mfa: row.trust_mfa === 1,
    allow_private_address: row.allow_private_address === 1,
    keep_tokens: row.keep_tokens === 1,
    token_resources: tokenResourcesOf(row)
      .map((allowed) => allowed.uri)
      .join(' '),
  };
}

function typed(body: RawParams): Values {
  return {
    name: field(body, 'name'),
    provider: field(body, 'provider'),
    issuer: field(body, 'issuer').trim(),
    authorization_url: field(body, 'authorization_url').trim(),
    token_url: field(body, 'token_url').trim(),
    userinfo_url: field(body, 'userinfo_url').trim(),
    tenant: field(body, 'tenant').trim(),
    base_url: field(body, 'base_url').trim(),
    client_id: field(body, 'client_id').trim(),
    scope: field(body, 'scope').trim(),
    domains: field(body, 'domains').trim(),
    groups_claim: field(body, 'groups_claim').trim(),
    required: ticked(body, 'required'),
    create_accounts: ticked(body, 'create_accounts'),
    link_verified_email: ticked(body, 'link_verified_email'),
    trust_mfa: ticked(body, 'trust_mfa'),
    allow_private_address: ticked(body, 'allow_private_address'),
    keep_tokens: ticked(body, 'keep_tokens'),
    token_resources: field(body, 'token_resources').trim(),
  };
}

/**
 * What the form asks of the domain. The provider's fields are those of the chosen provider:
 * a preset's base URL and tenant (the domain refuses one that the preset does not take), an
 * OpenID Connect provider's issuer, an OAuth 2.0 provider's three URLs. An empty scope is the
 * provider's default on creation and leaves the scope as it is on an edit; an empty secret
 * on an edit keeps the stored one.
 */
function inputOf(values: Values, secret: string): ConnectionInput {
  const provider =
    values.provider === 'oidc'
      ? { preset: null, baseUrl: null, tenant: null, kind: 'oidc', issuer: values.issuer }
      : values.provider === 'oauth2'
        ? {
            preset: null,
            baseUrl: null,
            tenant: null,
            kind: 'oauth2',
            authorizationUrl: values.authorization_url,
            tokenUrl: values.token_url,
            userinfoUrl: values.userinfo_url,
          }
        : { preset: values.provider, baseUrl: values.base_url, tenant: values.tenant };
  return {
    name: values.name,
    ...provider,
    clientId: values.client_id,
    ...(secret === '' ? {} : { clientSecret: secret }),
    scope: values.scope === '' ? null : values.scope,
    domains: values.domains.split(/[\s,]+/),
    required: values.required,
    createAccounts: values.create_accounts,
    linkVerifiedEmail: values.link_verified_email,
    trustMfa: values.trust_mfa,
    allowPrivateAddress: values.allow_private_address,
    groupsClaim: values.groups_claim,
    keepTokens: values.keep_tokens,
    tokenResources: values.token_resources.split(/\s+/).filter((uri) => uri !== ''),
  };
}

/** The domain speaks in the command line's options; the page names its fields instead. */
const FIELD_WORDS: Record<string, string> = {
  '--name': 'a name',
  '--client-id': 'a client ID',
  '--domains': 'email domains',
  '--tenant': 'a tenant',
  '--base-url': 'a base URL',
  '--issuer': 'an issuer URL',
  '--preset': 'a provider',
  '--kind oauth2': '“Other OAuth 2.0 provider”',
  '--authorization-url': 'an authorization URL',
  '--token-url': 'a token URL',
  '--userinfo-url': 'a user info URL',
};

/** The field a refusal is shown next to, and its words. */
function refusal(error: unknown): Record<string, string> {
  if (!(error instanceof ConnectionInputError)) throw error;
  const message = error.message.replace(/--kind oauth2|--[a-z-]+/g, (flag) => FIELD_WORDS[flag] ?? flag);
  // The form's one choice of provider says both the preset and the kind.
  return { [error.field === 'kind' || error.field === 'preset' ? 'provider' : error.field]: sentence(message) };
}

/** How the list names a connection's provider. */
function providerName(row: { preset: Connection['preset']; kind: Connection['kind'] }): string {
  if (row.preset !== null) return presetLabel(row.preset);
  return row.kind === 'oidc' ? 'OpenID Connect' : 'OAuth 2.0';
}

export default async function connectionRoutes(app: FastifyInstance, { ctx, actor }: { ctx: AppContext; actor: (request: FastifyRequest) => Actor }) {
  const post = { ...page, preHandler: app.csrfProtection };

  async function connectionOr404(request: FastifyRequest): Promise<Connection> {
    const { id } = request.params as { id: string };
    try {
      if (id.length <= 100) return await connectionNamed(ctx, id);
    } catch (error) {
      if (!(error instanceof ConnectionInputError)) throw error;
    }
    throw new PageRefusal(404, 'There is no connection with this ID.');
  }

  function form(reply: FastifyReply, data: { connection: Connection | null; values: Values; errors: Record<string, string>; notice?: string | null }) {
    return reply.view('admin-connection-form.eta', {
      title: data.connection ? `Edit ${data.connection.name}` : 'Add a connection',
      connection: data.connection && { ...describeConnection(ctx, data.connection), provider: providerName(data.connection) },
      values: data.values,
      errors: data.errors,
      notice: data.notice ?? null,
      providers: PROVIDERS,
      // What the callback URL of a new connection looks like, around its id (made from its name).
      callbackAround: callbackUrl(ctx, 'ID').split('/ID/'),
      // …and the id the name typed would get, unless a connection has it already (then `-2` is added).
      slug: data.values.name.trim() === '' ? null : slugOf(data.values.name),
      csrfToken: formToken(reply),
    });
  }

  const notice = (request: FastifyRequest) => {
    const done = (request.query as RawParams).done;
    return typeof done === 'string' ? (NOTICES[done] ?? null) : null;
  };

  app.get('/admin/connections', page, async (request, reply) => {
    const rows = await allConnections(ctx);
    return reply.view('admin-connections.eta', {
      title: 'Connections',
      wide: true,
      connections: rows.map((row) => ({ ...describeConnection(ctx, row), provider: providerName(row) })),
      notice: notice(request),
      csrfToken: formToken(reply),
    });
  });

  app.get('/admin/connections/new', page, async (_request, reply) => form(reply, { connection: null, values: NEW_CONNECTION, errors: {} }));

  app.post('/admin/connections', post, async (request, reply) => {
    const body = requireFormBody(request);
    const values = typed(body);
    if (values.provider === '') return form(reply.code(400), { connection: null, values, errors: { provider: 'Choose the provider' } });
    let row: Connection;
    try {
      row = await createConnection(ctx, inputOf(values, field(body, 'client_secret')), actor(request));
    } catch (error) {
      return form(reply.code(400), { connection: null, values, errors: refusal(error) });
    }
    request.log.info({ event: 'admin_connection_created', connection: row.id }, 'connection added');
    return reply.view('admin-connection-created.eta', {
      title: `Added ${row.name}`,
      connection: { ...describeConnection(ctx, row), provider: providerName(row) },
    });
  });

  app.get('/admin/connections/:id/edit', page, async (request, reply) => {
    const connection = await connectionOr404(request);
    return form(reply, { connection, values: valuesOf(connection), errors: {}, notice: notice(request) });
  });

  app.post('/admin/connections/:id/edit', post, async (request, reply) => {
    const connection = await connectionOr404(request);
    const body = requireFormBody(request);
    const values = typed(body);
    try {
      if (values.provider === '') throw new ConnectionInputError('provider', 'Choose the provider');
      await updateConnectionSettings(ctx, connection.id, inputOf(values, field(body, 'client_secret')), actor(request));
    } catch (error) {
      return form(reply.code(400), { connection, values, errors: refusal(error) });
    }
    request.log.info({ event: 'admin_connection_updated', connection: connection.id }, 'connection changed');
    return reply.redirect(`/admin/connections/${encodeURIComponent(connection.id)}/edit?done=saved`, 303);
  });

  for (const [action, enabled] of [
    ['disable', false],
    ['enable', true],
  ] as const) {
    app.post(`/admin/connections/:id/${action}`, post, async (request, reply) => {
      const connection = await connectionOr404(request);
      requireFormBody(request);
      await setConnectionEnabled(ctx, connection.id, enabled, actor(request));
      request.log.info({ event: `admin_connection_${action}d`, connection: connection.id }, `connection ${action}d`);
      return reply.redirect(`/admin/connections?done=${action}d`, 303);
    });
  }

  app.get('/admin/connections/:id/delete', page, async (request, reply) => {
    const connection = await connectionOr404(request);
    return reply.view('admin-connection-delete.eta', {
      title: `Delete ${connection.name}`,
      connection: { ...describeConnection(ctx, connection), provider: providerName(connection) },
      csrfToken: formToken(reply),
    });
  });

  app.post('/admin/connections/:id/delete', post, async (request, reply) => {
    const connection = await connectionOr404(request);
    requireFormBody(request);
    await deleteConnection(ctx, connection.id, actor(request));
    request.log.info({ event: 'admin_connection_deleted', connection: connection.id }, 'connection deleted');
    return reply.redirect('/admin/connections?done=deleted', 303);
  });
}
