/**
 * `/admin/resources` (SPEC §4.5): register, edit and delete resource servers and their
 * scopes. Registered inside the admin console's plugin (src/http/admin.ts), whose guard
 * admits enabled administrators only; every form is CSRF-protected. The decisions and the
 * audit are the domain's (src/clients/resources.ts), shared with the CLI.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Actor } from '../audit.ts';
import { ACCESS_TOKEN_TTL_RANGE } from '../config.ts';
import { SIGNING_ALGS } from '../identity/key-schedule.ts';
import {
  ResourceInputError,
  TOKEN_FORMATS,
  changeTokenSettings,
  createScope,
  describeScope,
  findResource,
  listResourceViews,
  parseScopeDefinition,
  registerResource,
  removeResource,
  removeScope,
  renameResource,
  type ResourceView,
  type ScopeInput,
  type TokenSettingsInput,
} from '../clients/resources.ts';
import type { AppContext } from '../context.ts';
import { single, type RawParams } from '../protocol/params.ts';
import { PageRefusal } from './errors.ts';
import { requireFormBody } from './helpers.ts';
import { PAGE_SIZE } from '../clients/clients.ts';
import { field, page, pageCursor, ticked } from './pages.ts';
import { formToken } from './session.ts';

const NOTICES: Record<string, string> = {
  saved: 'Changes saved.',
  deleted: 'The resource server was deleted, its scopes removed and every access given to it revoked.',
};

interface ResourceFormValues {
  name: string;
  uri: string;
  /** One `name=description` per line. */
  scopes: string;
  token_format: string;
  signing_alg: string;
  /** Seconds as typed; '': the default of the format. */
  access_token_ttl: string;
  require_second_factor: boolean;
  require_dpop: boolean;
}

const NEW_RESOURCE: ResourceFormValues = {
  name: '',
  uri: '',
  scopes: '',
  token_format: 'opaque',
  signing_alg: 'ES256',
  access_token_ttl: '',
  require_second_factor: false,
  require_dpop: false,
};

/** The form's token settings; a field the form did not show (the built-in resource's format) stays as it is. */
function tokenSettingsOf(body: RawParams): TokenSettingsInput {
  return {
    tokenFormat: single(body, 'token_format'),
    signingAlg: single(body, 'signing_alg'),
    // The form always shows the lifetime: empty is the default.
    accessTokenTtl: field(body, 'access_token_ttl'),
    requireSecondFactor: ticked(body, 'require_second_factor'),
    requireDpop: ticked(body, 'require_dpop'),
  };
}

/** What the form shows of a resource server's settings, or of what was typed. */
function settingsValues(settings: TokenSettingsInput, resource: ResourceView | null) {
  return {
    token_format: settings.tokenFormat ?? resource?.token_format ?? 'opaque',
    signing_alg: settings.signingAlg ?? resource?.signing_alg ?? 'ES256',
    access_token_ttl: settings.accessTokenTtl ?? '',
    require_second_factor: settings.requireSecondFactor ?? false,
    require_dpop: settings.requireDpop ?? false,
  };
}

const valuesOf = (resource: ResourceView): ResourceFormValues => ({
  name: resource.name,
  uri: resource.uri,
  scopes: scopesText(resource.scopes),
  token_format: resource.token_format,
  signing_alg: resource.signing_alg,
  access_token_ttl: resource.access_token_ttl === null ? '' : String(resource.access_token_ttl),
  require_second_factor: resource.require_second_factor,
  require_dpop: resource.require_dpop,
});

/** The scopes field: one `name=description` a line; blank lines are ignored. */
function scopeLines(text: string): ScopeInput[] {
  return text
    .split(/\r?\n/)
    .map((line) => line.trim())
    .filter((line) => line !== '')
    .map(parseScopeDefinition);
}

const scopesText = (scopes: readonly ScopeInput[]) => scopes.map((s) => `${s.name}=${s.description}`).join('\n');

export default async function resourceRoutes(app: FastifyInstance, { ctx, actor }: { ctx: AppContext; actor: (request: FastifyRequest) => Actor }) {
  const post = { ...page, preHandler: app.csrfProtection };

  async function resourceOr404(request: FastifyRequest): Promise<ResourceView> {
    const { id } = request.params as { id: string };
    const resource = id.length <= 100 ? await findResource(ctx, id) : undefined;
    if (!resource) throw new PageRefusal(404, 'There is no resource server with this ID.');
    return resource;
  }

  function form(
    reply: FastifyReply,
    data: { resource: ResourceView | null; values: ResourceFormValues; errors: Record<string, string>; notice?: string | null },
  ) {
    return reply.view('admin-resource-form.eta', {
      title: data.resource ? `Edit ${data.resource.name}` : 'Register a resource server',
      resource: data.resource,
      values: data.values,
      errors: data.errors,
      notice: data.notice ?? null,
      formats: TOKEN_FORMATS,
      algs: SIGNING_ALGS,
      ranges: ACCESS_TOKEN_TTL_RANGE,
      defaults: { opaque: ctx.config.accessTokenTtl, jwt: ctx.config.jwtAccessTokenTtl },
      csrfToken: formToken(reply),
    });
  }

  const refused = (error: unknown): Record<string, string> => {
    if (!(error instanceof ResourceInputError)) throw error;
    return { [error.field]: error.message.charAt(0).toUpperCase() + error.message.slice(1) };
  };

  app.get('/admin/resources', page, async (request, reply) => {
    const done = (request.query as RawParams).done;
    const notice = typeof done === 'string' ? (NOTICES[done] ?? null) : null;
    const cursor = pageCursor(request.query as RawParams);
    const { rows, next, previous } = await listResourceViews(ctx, cursor, PAGE_SIZE);
    return reply.view('admin-resources.eta', {
      title: 'Resource servers',
      wide: true,
      resources: rows,
      paged: 'after' in cursor || 'before' in cursor,
      next: next && `/admin/resources?${new URLSearchParams(next)}`,
      previous: previous && `/admin/resources?${new URLSearchParams(previous)}`,
      notice,
    });
  });

  app.get('/admin/resources/new', page, async (_request, reply) => form(reply, { resource: null, values: NEW_RESOURCE, errors: {} }));

  app.post('/admin/resources', post, async (request, reply) => {
    const body = requireFormBody(request);
    const settings = tokenSettingsOf(body);
    const values = { name: field(body, 'name'), uri: field(body, 'uri').trim(), scopes: field(body, 'scopes'), ...settingsValues(settings, null) };
    try {
      const { resource, secret } = await registerResource(
        ctx,
        { name: values.name, uri: values.uri, scopes: scopeLines(values.scopes), ...settings },
        actor(request),
      );
      request.log.info({ event: 'admin_resource_registered', resource: resource.id }, 'resource server registered');
      return reply.view('admin-resource-registered.eta', { title: `Registered ${resource.name}`, resource, secret });
    } catch (error) {
      return form(reply.code(400), { resource: null, values, errors: refused(error) });
    }
  });

  app.get('/admin/resources/:id', page, async (request, reply) => {
    const resource = await resourceOr404(request);
    const done = (request.query as RawParams).done;
    return form(reply, { resource, values: valuesOf(resource), errors: {}, notice: typeof done === 'string' ? (NOTICES[done] ?? null) : null });
  });

  /**
   * Saves the token settings (checked whole first: refused, nothing is saved), the name and
   * the scopes: a new line adds a scope, a changed description is saved, a line taken out
   * deletes that scope (revoking the access that holds it).
   */
  app.post('/admin/resources/:id', post, async (request, reply) => {
    const resource = await resourceOr404(request);
    const body = requireFormBody(request);
    const settings = tokenSettingsOf(body);
    const values = { name: field(body, 'name'), uri: resource.uri, scopes: field(body, 'scopes'), ...settingsValues(settings, resource) };
    const who = actor(request);
    try {
      await changeTokenSettings(ctx, resource, settings, who);
      const wanted = scopeLines(values.scopes);
      const had = new Map(resource.scopes.map((s) => [s.name, s.description]));
      if (!resource.builtin && values.name.trim() !== resource.name) await renameResource(ctx, resource, values.name, who);
      for (const scope of wanted) {
        if (!had.has(scope.name)) await createScope(ctx, resource, scope, who);
        else if (had.get(scope.name) !== scope.description) await describeScope(ctx, scope, who);
      }
      for (const name of had.keys()) if (!wanted.some((s) => s.name === name)) await removeScope(ctx, name, who);
    } catch (error) {
      return form(reply.code(400), { resource: (await findResource(ctx, resource.id)) ?? resource, values, errors: refused(error) });
    }
    return reply.redirect(`/admin/resources/${encodeURIComponent(resource.id)}?done=saved`, 303);
  });

  app.get('/admin/resources/:id/delete', page, async (request, reply) => {
    const resource = await resourceOr404(request);
    if (resource.builtin) throw new PageRefusal(400, 'The built-in resource cannot be deleted.');
    return reply.view('admin-resource-delete.eta', { title: `Delete ${resource.name}`, resource, csrfToken: formToken(reply) });
  });

  app.post('/admin/resources/:id/delete', post, async (request, reply) => {
    const resource = await resourceOr404(request);
    requireFormBody(request);
    if (resource.builtin) throw new PageRefusal(400, 'The built-in resource cannot be deleted.');
    await removeResource(ctx, resource, actor(request));
    request.log.info({ event: 'admin_resource_deleted', resource: resource.id }, 'resource server deleted');
    return reply.redirect('/admin/resources?done=deleted', 303);
  });
}
